"""What every Hugging Face family reader shares: the registry and a strict field reader for config.json."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from moesim.errors import MoesimError, input_error
from moesim.models.spec import AttentionSpec, ModelSpec
from moesim.registry import Registry


@dataclass(frozen=True)
class HfContext:
    """What a family reader gets besides the config: the file (for errors) and the spec's key and name."""

    source: str
    key: str
    name: str


FamilyReader = Callable[["ConfigReader", HfContext], ModelSpec]

HF_FAMILIES: Registry[FamilyReader] = Registry("Hugging Face model_type")
"""``model_type`` → reader. One module per family registers its model types here."""


class ConfigReader:
    """Typed access to a parsed config.json; every problem is a one-line error naming the file and field."""

    def __init__(self, data: Mapping[str, Any], source: str) -> None:
        self.data = data
        self.source = source

    def error(self, field: str, problem: str, allowed: list[object] | None = None) -> MoesimError:
        return input_error(self.source, field, problem, allowed)

    def req(self, field: str, minimum: int = 1) -> int:
        """A required integer field >= ``minimum``."""
        value = self.opt(field, None, minimum)
        if value is None:
            raise self.error(field, "missing required field")
        return value

    def opt(self, field: str, default: int | None, minimum: int = 1) -> int | None:
        """An integer field >= ``minimum``; missing or null gives ``default``."""
        value = self.data.get(field)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(field, f"must be an integer, got {type(value).__name__} {value!r}")
        if value < minimum:
            raise self.error(field, f"must be >= {minimum}, got {value}")
        return value

    def int_list(self, field: str) -> list[int]:
        """A list of non-negative integers; missing or null means the empty list."""
        value = self.data.get(field)
        if value is None:
            return []
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise self.error(field, f"must be a list of integers, got {value!r}")
        if any(v < 0 for v in value):
            raise self.error(field, f"must hold layer indices >= 0, got {value!r}")
        return list(value)

    def head_dim(self, hidden: int, heads: int) -> int:
        """``head_dim`` if the config states it, else hidden / heads (which must divide exactly)."""
        if self.data.get("head_dim") is not None:
            return self.req("head_dim")
        if hidden % heads:
            raise self.error(
                "num_attention_heads",
                f"{heads} does not divide hidden_size={hidden} and head_dim is absent",
            )
        return hidden // heads

    def kv_heads(self, heads: int) -> int:
        """``num_key_value_heads`` (default: one per attention head), which must divide the head count."""
        kv = self.opt("num_key_value_heads", heads) or heads
        if kv > heads or heads % kv:
            raise self.error("num_key_value_heads", f"{kv} does not divide num_attention_heads={heads}")
        return kv

    def top_k(self, experts: int, experts_field: str) -> int:
        k = self.req("num_experts_per_tok")
        if k > experts:
            raise self.error(
                "num_experts_per_tok", f"{k} exceeds {experts_field}={experts}", allowed=[f"1..{experts}"]
            )
        return k

    def leading_dense(self, field: str, layers: int) -> int:
        """Leading dense layers (e.g. ``first_k_dense_replace``); at least one MoE layer must remain."""
        dense = self.opt(field, 0, minimum=0) or 0
        if dense >= layers:
            raise self.error(
                field,
                f"{dense} leaves no MoE layer of num_hidden_layers={layers}",
                allowed=[f"0..{layers - 1}"],
            )
        return dense


def mla_attention(cfg: ConfigReader, heads: int) -> AttentionSpec:
    """Multi-head latent attention (DeepSeek-V2 paper, section 2.1): q/kv low-rank projections.

    ``head_dim`` is the query/key head width, qk_nope_head_dim + qk_rope_head_dim; values use v_head_dim.
    """
    rope = cfg.req("qk_rope_head_dim")
    nope = cfg.req("qk_nope_head_dim")
    return AttentionSpec(
        num_heads=heads,
        num_kv_heads=cfg.kv_heads(heads),
        head_dim=rope + nope,
        q_lora_rank=cfg.opt("q_lora_rank", None),
        kv_lora_rank=cfg.req("kv_lora_rank"),
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
        v_head_dim=cfg.req("v_head_dim"),
    )
