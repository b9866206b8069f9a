"""Per-rank totals of a workload: node counts, FLOPs, bytes and a roofline GPU-time estimate (what
``moesim workload generate/inspect`` prints)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from moesim.schema import Constraint, Param
from moesim.workload.costs import roofline_time_s
from moesim.workload.graph import CollectiveType, Node, NodeKind, Workload

# Roofline constants of docs/study.md §3, used only for the summary's GPU-time estimate; the system
# layer does the real timing with its own (overridable) settings.
STUDY_PEAK_FLOPS = 1.0e15
STUDY_MEM_BW_BYTES_PER_S = 1.6e12
ROOFLINE = (Param("peak_flops", "workload", float, "FLOP/s", Constraint(low=0, low_open=True)),
            Param("mem_bw_bytes_per_s", "workload", float, "B/s", Constraint(low=0, low_open=True)))
"""The roofline rates of the summary's GPU-time estimate (any positive rate)."""

TP_COLLECTIVES = (CollectiveType.ALL_REDUCE, CollectiveType.REDUCE_SCATTER, CollectiveType.ALL_GATHER)
"""The collectives a generated workload runs inside its TP groups (``generator.py``)."""

# ----------------------------------------------------------------------------------------------
# Summary


@dataclass(frozen=True)
class RankSummary:
    """Per-rank totals. TP bytes = the TP collectives' data sizes (all-reduces; under data-parallel attention
    the reduce-scatters' inputs and all-gathers' inputs), EP bytes = all-to-all buffer sizes."""

    rank: int
    nodes: int
    compute_nodes: int
    collective_nodes: int
    flops: int
    bytes_moved: int
    tp_bytes: int
    ep_bytes: int
    other_comm_bytes: int
    gpu_s_estimate: float


@dataclass(frozen=True)
class WorkloadSummary:
    """What `moesim workload generate/inspect` prints."""

    name: str
    num_ranks: int
    logical_dims: tuple[int, ...]
    comm_groups: int
    ranks: tuple[RankSummary, ...]

    @property
    def tp_bytes(self) -> int:
        return sum(r.tp_bytes for r in self.ranks)

    @property
    def ep_bytes(self) -> int:
        return sum(r.ep_bytes for r in self.ranks)

    @property
    def flops(self) -> int:
        return sum(r.flops for r in self.ranks)

    @property
    def nodes(self) -> int:
        return sum(r.nodes for r in self.ranks)

    @property
    def gpu_s_estimate(self) -> float:
        """The slowest rank's summed roofline time (no communication)."""
        return max((r.gpu_s_estimate for r in self.ranks), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "num_ranks": self.num_ranks,
            "logical_dims": list(self.logical_dims),
            "comm_groups": self.comm_groups,
            "nodes": self.nodes,
            "tp_bytes": self.tp_bytes,
            "ep_bytes": self.ep_bytes,
            "flops": self.flops,
            "gpu_s_estimate": self.gpu_s_estimate,
            "ranks": [dataclasses.asdict(r) for r in self.ranks],
        }


def _rank_summary(
    rank: int, nodes: tuple[Node, ...], peak_flops: float, mem_bw_bytes_per_s: float
) -> RankSummary:
    comp = [n for n in nodes if n.kind is NodeKind.COMPUTE]
    coll = [n for n in nodes if n.kind is NodeKind.COLLECTIVE]
    tp = sum(n.size_bytes for n in coll if n.collective in TP_COLLECTIVES)
    ep = sum(n.size_bytes for n in coll if n.collective is CollectiveType.ALL_TO_ALL)
    return RankSummary(
        rank=rank,
        nodes=len(nodes),
        compute_nodes=len(comp),
        collective_nodes=len(coll),
        flops=sum(n.flops for n in comp),
        bytes_moved=sum(n.bytes_moved for n in comp),
        tp_bytes=tp,
        ep_bytes=ep,
        other_comm_bytes=sum(n.size_bytes for n in coll) - tp - ep,
        gpu_s_estimate=sum(roofline_time_s(n, peak_flops, mem_bw_bytes_per_s) for n in comp),
    )


def summary(
    workload: Workload,
    peak_flops: float = STUDY_PEAK_FLOPS,
    mem_bw_bytes_per_s: float = STUDY_MEM_BW_BYTES_PER_S,
) -> WorkloadSummary:
    """Per-rank node counts, communication bytes, FLOPs and a roofline GPU-time estimate."""
    for p, value in zip(ROOFLINE, (peak_flops, mem_bw_bytes_per_s), strict=True):
        p.check(value, "summary", strict=True)
    cache: dict[int, RankSummary] = {}
    ranks = []
    for g in workload.graphs:
        key = id(g.nodes)
        if key not in cache:
            cache[key] = _rank_summary(g.rank, g.nodes, peak_flops, mem_bw_bytes_per_s)
        ranks.append(dataclasses.replace(cache[key], rank=g.rank))
    return WorkloadSummary(
        name=workload.name,
        num_ranks=workload.num_ranks,
        logical_dims=workload.logical_dims,
        comm_groups=len(workload.comm_groups),
        ranks=tuple(ranks),
    )
