"""System-layer settings: ASTRA-sim's system JSON with the study's defaults (docs/system.md)."""

from __future__ import annotations

from dataclasses import dataclass

from moesim.errors import input_error
from moesim.workload.graph import CollectiveType

_IMPL_FIELD = {
    CollectiveType.ALL_REDUCE: "all_reduce",
    CollectiveType.ALL_TO_ALL: "all_to_all",
    CollectiveType.ALL_GATHER: "all_gather",
    CollectiveType.REDUCE_SCATTER: "reduce_scatter",
}


@dataclass(frozen=True)
class SystemSettings:
    """System-layer settings (ASTRA-sim system JSON, B.1) with the study's defaults (docs/study.md §6).

    Implementations are per logical dimension, as in ASTRA-sim's ``*-implementation`` lists.
    """

    peak_flops: float = 1.0e15
    mem_bw_bytes_per_s: float = 1.6e12
    roofline: bool = True
    dataset_splits: int = 4
    active_chunks: int = 1
    endpoint_delay_s: float = 10e-9
    scheduling_policy: str = "LIFO"
    all_reduce: tuple[str, ...] = ("ring", "ring")
    all_to_all: tuple[str, ...] = ("direct", "direct")
    all_gather: tuple[str, ...] = ("ring", "ring")
    reduce_scatter: tuple[str, ...] = ("ring", "ring")
    # a collective over several logical dimensions (docs/system.md): all-reduce as reduce-scatter,
    # all-reduce, all-gather phases ("localBWAware") or an all-reduce per dimension ("baseline")
    collective_optimization: str = "localBWAware"
    # logical dimensions finer than the workload's, fastest first (docs/system.md): each of its
    # dimensions ([TP, EP]) is the product of consecutive entries, e.g. [8, 2, 2] for TP16EP2; empty: its own
    logical_dims: tuple[int, ...] = ()
    intra_server_cc: bool = False
    fast_forward: bool = True
    fast_forward_tolerance: float = 2e-3
    # rank r starts at a uniform draw in [0, start_jitter_s) from jitter_seed: rerun with a few seeds
    # to see how far a result moves when nothing but the ranks' start times does (docs/system.md)
    start_jitter_s: float = 0.0
    jitter_seed: int = 0
    # ASTRA-sim's receives (docs/reference-semantics.md B.1–B.2): the k-th message to arrive on a pair of
    # members serves the pair's k-th receive, and a ring member posts step k's receive with step k's send,
    # so one that starts a phase late sends its backlog one bundle delay apart. Off: each transfer waits
    # for its own message and a late member's ready steps leave together. Lockstep runs are the same
    # either way; runs whose ranks drift apart are not (docs/system.md). On for ASTRA-sim inputs
    # (`moesim astra run`) and `moesim collective`, off for study runs.
    astra_receives: bool = False

    def __post_init__(self) -> None:
        if self.scheduling_policy not in ("LIFO", "FIFO"):
            raise input_error("system settings", "scheduling_policy", f"got {self.scheduling_policy!r}", ("LIFO", "FIFO"))
        if self.collective_optimization not in ("localBWAware", "baseline"):
            raise input_error("system settings", "collective_optimization", f"got {self.collective_optimization!r}",
                              ("localBWAware", "baseline"))
        dims = self.logical_dims
        if not isinstance(dims, tuple) or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
            raise input_error("system settings", "logical_dims", f"must be a list of positive integers, got {dims!r}")
        for name in ("dataset_splits", "active_chunks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise input_error("system settings", name, f"must be a positive integer, got {value!r}")
        for name in ("peak_flops", "mem_bw_bytes_per_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise input_error("system settings", name, f"must be a positive number, got {value!r}")
        if isinstance(self.jitter_seed, bool) or not isinstance(self.jitter_seed, int) or self.jitter_seed < 0:
            raise input_error("system settings", "jitter_seed", f"must be an integer >= 0, got {self.jitter_seed!r}")
        for name in ("endpoint_delay_s", "fast_forward_tolerance", "start_jitter_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise input_error("system settings", name, f"must be a number >= 0, got {value!r}")

    def implementations(self, ctype: CollectiveType) -> tuple[str, ...]:
        """The per-dimension implementations of one collective type."""
        impls: tuple[str, ...] = getattr(self, _IMPL_FIELD[ctype])
        return impls

    def implementation(self, ctype: CollectiveType, dims: tuple[bool, ...], subgroup: bool) -> str:
        """Per-dimension implementation; a communicator sub-group uses a 1-D ring unless exactly one
        implementation is configured (C.4)."""
        impls: tuple[str, ...] = getattr(self, _IMPL_FIELD[ctype])
        if subgroup:
            return impls[0] if len(impls) == 1 else "ring"
        involved = [d for d, on in enumerate(dims) if on] or [0]
        return impls[min(involved[0], len(impls) - 1)]
