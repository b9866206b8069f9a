"""ModelSpec: the architecture facts a MoE inference workload needs, as a frozen dataclass."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class AttentionSpec:
    """Attention shape. MLA models set the ``*_rank`` / ``qk_*_head_dim`` fields; GQA/MQA models leave them None."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None

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
    hidden_size: int
    comm_dim: int
    num_layers: int
    first_dense_layers: int
    attention: AttentionSpec
    dense_ffn_width: int
    routed_experts: int
    shared_experts: int
    top_k: int
    expert_ffn_width: int
    vocab_size: int
    total_params: float | None = None
    checkpoint_size_bytes: int | None = None
    bytes_per_activation: int = 2
    notes: tuple[str, ...] = field(default=(), compare=False)
    source: str = field(default="", compare=False)
    shared_expert_ffn_width: int | None = None
    """Width of one shared expert; None means the same as ``expert_ffn_width``."""

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
