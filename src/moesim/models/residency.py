"""Weight residency: does an even 1/R share of the checkpoint fit in each accelerator's memory?

docs/study.md §2 ("Weight residency"): the per-rank requirement is checkpoint size / R (R = 32), checked
against a capacity of 64 GB per accelerator (decimal GB, 1e9 bytes). Weights only: KV cache,
activations and buffers are not counted, so "fits" is necessary, not sufficient, for serving.
Redundant experts (docs/deployments.md, "Redundant experts") add their replicas' weights to what is
sharded: N replicas of one routed expert in every MoE layer (``replica_bytes``). With data-parallel
attention over D groups (``DP<d>[TP<t>]EP<e>``) only the routed experts are sharded over every rank: each
group holds its own copy of the rest (attention, dense and shared-expert FFNs, router, embeddings, the
multi-token-prediction module), sharded over the group's ranks (``dp_groups``).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from moesim.errors import input_error
from moesim.models.catalog import get_model
from moesim.models.checkpoint import checkpoint_size
from moesim.models.spec import ModelSpec
from moesim.schema import MAX_COUNT, Constraint, Param

GB = 1_000_000_000
"""Decimal gigabyte, the unit of checkpoint sizes and of the residency criterion."""

DEFAULT_RANKS = 32
DEFAULT_CAPACITY_BYTES = 64 * GB

RANKS = Param("ranks", "residency", int, "", Constraint(low=1, high=MAX_COUNT))
REDUNDANT = Param("redundant_experts", "residency", int, "", Constraint(low=0, high=MAX_COUNT))
DP_GROUPS = Param("dp_groups", "residency", int, "", Constraint(low=1, high=MAX_COUNT))
WIDTH = Param("expert_bytes_per_param", "residency", float, "B", Constraint(low=0, high=64, low_open=True))
BYTES = Param("bytes", "residency", int, "B", Constraint(low=1, high=2**52))
"""A weight size or a capacity: from one byte to 4.5 PB (sizes stay exact in float64)."""

WEIGHTS_ONLY_NOTE = "weights only: KV cache, activations and communication/workspace buffers are NOT included"


@dataclass(frozen=True)
class ResidencyReport:
    """Per-rank weight requirement of one model (even sharding) against a per-accelerator capacity."""

    label: str
    total_bytes: int
    ranks: int
    per_rank_bytes: float
    capacity_bytes: int
    fits: bool
    source: str
    note: str = WEIGHTS_ONLY_NOTE
    replica_bytes: int = 0
    """Of ``total_bytes``, the redundant expert replicas' weights (0: none)."""
    dp_groups: int = 1
    """Data-parallel attention groups, each holding ``replicated_bytes`` (1: everything evenly sharded)."""
    replicated_bytes: int = 0
    """Of ``total_bytes``, the weights outside the routed experts that each of ``dp_groups`` holds in full."""

    @property
    def headroom_bytes(self) -> float:
        """Capacity left per rank after the weights (negative when they do not fit)."""
        return self.capacity_bytes - self.per_rank_bytes

    def to_dict(self) -> dict[str, Any]:
        data = {**asdict(self), "headroom_bytes": self.headroom_bytes}
        for name in ("replica_bytes", "replicated_bytes"):
            if not data[name]:
                del data[name]
        if data["dp_groups"] == 1:
            del data["dp_groups"]
        return data


def _expert_bytes(spec: ModelSpec, experts: int, layers: int, expert_bytes_per_param: float) -> int:
    """Weights of ``experts`` routed experts in each of ``layers`` MoE layers: 3·h·w parameters each (gate, up
    and down projections; h = ``comm_dim``, w = ``expert_ffn_width``, as the workload's expert GEMMs count
    them) at ``expert_bytes_per_param`` bytes (FP8 = 1, FP4 = 0.5)."""
    WIDTH.check(expert_bytes_per_param, spec.key, strict=True)
    params = experts * layers * 3 * spec.comm_dim * spec.expert_ffn_width
    return math.ceil(Fraction(expert_bytes_per_param) * params)


def replica_bytes(spec: ModelSpec, redundant_experts: int, expert_bytes_per_param: float) -> int:
    """Weights of ``redundant_experts`` replicas of one routed expert in every MoE layer (``_expert_bytes``)."""
    REDUNDANT.check(redundant_experts, spec.key, strict=True)
    return _expert_bytes(spec, redundant_experts, spec.moe_layers, expert_bytes_per_param)


def replicated_bytes(spec: ModelSpec, expert_bytes_per_param: float) -> int:
    """The checkpoint's weights outside the routed experts: its stated size less ``routed_experts`` experts
    in each MoE layer, the MTP module's (``mtp_layers``) included. The remainder holds attention, dense and
    shared-expert FFNs, routers, embeddings, norms and quantisation scales."""
    assert spec.checkpoint_size_bytes is not None
    layers = spec.moe_layers + spec.mtp_layers
    rest = spec.checkpoint_size_bytes - _expert_bytes(spec, spec.routed_experts, layers, expert_bytes_per_param)
    if rest <= 0:
        raise input_error(spec.source or spec.key, "checkpoint_size_bytes",
                          f"{spec.checkpoint_size_bytes} B is not more than its routed experts' weights at "
                          f"{expert_bytes_per_param:g} B per parameter (give the checkpoint's expert width)")
    return rest


def residency(
    total_bytes: int,
    *,
    ranks: int = DEFAULT_RANKS,
    capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
    source: str,
    label: str = "",
    replicas_bytes: int = 0,
    dp_groups: int = 1,
    replicated: int = 0,
) -> ResidencyReport:
    """Evenly shard ``total_bytes`` (plus ``replicas_bytes`` of redundant experts) over ``ranks``:
    per-rank = total / ranks; fits iff capacity ≥ per-rank. With ``dp_groups`` D > 1, ``replicated`` of
    the total is held by each group over its ranks / D ranks and the rest sharded over all ranks:
    per-rank = replicated · D / ranks + (total − replicated) / ranks."""
    RANKS.check(ranks, "residency", strict=True)
    DP_GROUPS.check(dp_groups, "residency", strict=True)
    BYTES.check(capacity_bytes, "residency", strict=True, label="capacity_bytes")
    BYTES.check(total_bytes, source or "residency", strict=True, label="total_bytes")
    if ranks % dp_groups:
        raise input_error("residency", "dp_groups", f"{dp_groups} groups do not divide {ranks} ranks evenly")
    total = int(total_bytes) + replicas_bytes
    per_rank = total / ranks if dp_groups == 1 else (replicated * dp_groups + total - replicated) / ranks
    return ResidencyReport(
        label=label,
        total_bytes=total,
        ranks=ranks,
        per_rank_bytes=per_rank,
        capacity_bytes=int(capacity_bytes),
        fits=capacity_bytes >= per_rank,
        source=source,
        replica_bytes=replicas_bytes,
        dp_groups=dp_groups,
        replicated_bytes=replicated if dp_groups > 1 else 0,
    )


def model_residency(
    spec: ModelSpec, *, ranks: int = DEFAULT_RANKS, capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
    redundant_experts: int = 0, expert_bytes_per_param: float = 1.0, dp_groups: int = 1,
) -> ResidencyReport:
    """Residency from the spec's stated ``checkpoint_size_bytes``, plus ``redundant_experts`` replicas of
    a routed expert per MoE layer at ``expert_bytes_per_param`` (``replica_bytes``); with ``dp_groups``
    data-parallel attention groups each holds the weights outside the routed experts
    (``replicated_bytes``)."""
    if spec.checkpoint_size_bytes is None:
        raise input_error(
            spec.source or spec.key,
            "checkpoint_size_bytes",
            "not set for this model; give a checkpoint directory or a stated size",
        )
    return residency(
        spec.checkpoint_size_bytes,
        ranks=ranks,
        capacity_bytes=capacity_bytes,
        source=f"model '{spec.key}' checkpoint_size_bytes",
        label=spec.key,
        replicas_bytes=replica_bytes(spec, redundant_experts, expert_bytes_per_param),
        dp_groups=dp_groups,
        replicated=replicated_bytes(spec, expert_bytes_per_param) if dp_groups > 1 else 0,
    )


def checkpoint_residency(
    path: str | os.PathLike[str],
    *,
    ranks: int = DEFAULT_RANKS,
    capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
    label: str | None = None,
) -> ResidencyReport:
    """Residency from a checkpoint's files (safetensors headers or the shard index; no tensor data read)."""
    size = checkpoint_size(path)
    return residency(
        size.total_bytes,
        ranks=ranks,
        capacity_bytes=capacity_bytes,
        source=size.source,
        label=label if label is not None else Path(path).resolve().name,
    )


def residency_for(
    ref: str, *, ranks: int = DEFAULT_RANKS, capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
    redundant_experts: int = 0, expert_bytes_per_param: float = 1.0, dp_groups: int = 1,
) -> ResidencyReport:
    """Residency of a model reference: a catalog key, a model file, or a checkpoint directory.

    A directory without ``config.json`` is sized from its safetensors files. A Hugging Face config (or a
    directory holding one) has no stated size, so the checkpoint next to it is sized from its files.
    Redundant experts and data-parallel groups count only with a catalog or model-file size
    (``model_residency``: they need the spec's expert shapes).
    """
    p = Path(ref)
    spec = None if p.is_dir() and not (p / "config.json").is_file() else get_model(ref)
    if spec is None or (spec.checkpoint_size_bytes is None and (p.is_dir() or p.suffix == ".json")):
        if redundant_experts or dp_groups > 1:
            raise input_error(ref, "checkpoint_size_bytes", "sized from its files, which do not say which weights "
                              "are routed experts: redundant experts and dp_groups need a catalog key or a model "
                              "file with a stated size")
        directory = p if p.is_dir() else p.parent
        return checkpoint_residency(directory, ranks=ranks, capacity_bytes=capacity_bytes,
                                    label=None if spec is None else spec.key)
    return model_residency(spec, ranks=ranks, capacity_bytes=capacity_bytes, redundant_experts=redundant_experts,
                           expert_bytes_per_param=expert_bytes_per_param, dp_groups=dp_groups)
