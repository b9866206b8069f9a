"""ModelSpec: the architecture facts a MoE inference workload needs, as a frozen dataclass."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from moesim.schema import constraint, param

MAX_WIDTH = 2**20
"""The largest width (hidden size, FFN width, LoRA rank) a model may declare; the largest real ones are
below 2^15, and beyond this products of sizes leave the exact range of float64."""
MAX_HEADS = 2**14
"""The most attention heads, and the largest head dimension."""
MAX_LAYERS = 1024
"""The most layers a model may declare (real ones have below 200; the graphs grow with them)."""
MAX_EXPERTS = 2**16


def _positive(high: int) -> dict[str, Any]:
    """Metadata of a required field in [1, high]."""
    return constraint(low=1, high=high)


def _optional(high: int) -> Any:
    return param(None, low=1, high=high)


@dataclass(frozen=True)
class AttentionSpec:
    """Attention shape. MLA models set the ``*_rank`` / ``qk_*_head_dim`` fields; GQA/MQA models leave them None."""

    num_heads: int = field(metadata=_positive(MAX_HEADS))
    num_kv_heads: int = field(metadata=_positive(MAX_HEADS))
    head_dim: int = field(metadata=_positive(MAX_HEADS))
    q_lora_rank: int | None = _optional(MAX_WIDTH)
    kv_lora_rank: int | None = _optional(MAX_WIDTH)
    qk_rope_head_dim: int | None = _optional(MAX_HEADS)
    qk_nope_head_dim: int | None = _optional(MAX_HEADS)
    v_head_dim: int | None = _optional(MAX_HEADS)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None


@dataclass(frozen=True)
class ModelSpec:
    """One MoE model. ``comm_dim`` is h, the width exchanged by TP all-reduces and EP all-to-alls.

    It equals ``hidden_size`` except for models with a latent MoE dimension (Kimi K3: 3584 vs 7168).
    """

    key: str
    name: str
    hidden_size: int = field(metadata=_positive(MAX_WIDTH))
    comm_dim: int = field(metadata=_positive(MAX_WIDTH))
    num_layers: int = field(metadata=_positive(MAX_LAYERS))
    first_dense_layers: int = field(metadata=constraint(low=0, high=MAX_LAYERS))
    attention: AttentionSpec
    dense_ffn_width: int = field(metadata=constraint(low=0, high=MAX_WIDTH))
    routed_experts: int = field(metadata=_positive(MAX_EXPERTS))
    shared_experts: int = field(metadata=constraint(low=0, high=MAX_EXPERTS))
    top_k: int = field(metadata=_positive(MAX_EXPERTS))
    expert_ffn_width: int = field(metadata=_positive(MAX_WIDTH))
    vocab_size: int = field(metadata=_positive(2**24))
    total_params: float | None = param(None, low=0, high=1e16, low_open=True)
    checkpoint_size_bytes: int | None = param(None, low=1, high=2**52)
    bytes_per_activation: int = param(2, low=1, high=16)
    notes: tuple[str, ...] = field(default=(), compare=False)
    source: str = field(default="", compare=False)
    shared_expert_ffn_width: int | None = _optional(MAX_WIDTH)
    """Width of one shared expert; None means the same as ``expert_ffn_width``."""
    mtp_layers: int = param(0, low=0, high=MAX_LAYERS)
    """MoE layers of the checkpoint's multi-token-prediction module (``num_nextn_predict_layers``), outside
    ``num_layers``: a forward pass does not run them, weight residency counts their routed experts."""

    @classmethod
    def from_hf_config(cls, path: str | os.PathLike[str], key: str | None = None) -> ModelSpec:
        """Build a spec from a Hugging Face ``config.json`` (DeepSeek-V2/V3, Mixtral, Qwen2/3-MoE, GLM-MoE).

        See ``moesim.models.hf``; bad or contradictory fields raise a one-line MoesimError.
        """
        from moesim.models.hf import from_hf_config

        return from_hf_config(path, key=key)

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers

    @property
    def tp_proxy(self) -> int:
        """Communication proxy for TP traffic: h × layers (docs/study.md §2)."""
        return self.comm_dim * self.num_layers

    @property
    def ep_proxy(self) -> int:
        """Communication proxy for EP traffic: h × top-k × MoE layers (docs/study.md §2)."""
        return self.comm_dim * self.top_k * self.moe_layers
