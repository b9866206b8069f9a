"""System-layer settings: ASTRA-sim's system JSON with the study's defaults (docs/system.md)."""

from __future__ import annotations

from dataclasses import dataclass

from moesim.errors import input_error
from moesim.schema import MAX_COUNT, check_fields, param
from moesim.workload.graph import CollectiveType

_IMPL_FIELD = {
    CollectiveType.ALL_REDUCE: "all_reduce",
    CollectiveType.ALL_TO_ALL: "all_to_all",
    CollectiveType.ALL_GATHER: "all_gather",
    CollectiveType.REDUCE_SCATTER: "reduce_scatter",
}


MAX_SPLITS = 1024
"""The most chunks a collective is cut into (``dataset_splits``, ``active_chunks``): each chunk is a
transfer per step and rank, so the work of a run grows with it."""


@dataclass(frozen=True)
class SystemSettings:
    """System-layer settings (ASTRA-sim system JSON, B.1) with the study's defaults (docs/study.md §6).

    Implementations are per logical dimension, as in ASTRA-sim's ``*-implementation`` lists. Every field
    is declared with its allowed values (``moesim.schema``): the roofline's rates span any real GPU (a
    slower one would make a run's time outgrow the simulator's nanosecond clock).
    """

    peak_flops: float = param(1.0e15, low=1e9, high=1e18)
    mem_bw_bytes_per_s: float = param(1.6e12, low=1e6, high=1e15)
    roofline: bool = True
    dataset_splits: int = param(4, low=1, high=MAX_SPLITS)
    active_chunks: int = param(1, low=1, high=MAX_SPLITS)
    endpoint_delay_s: float = param(10e-9, low=0, high=1)
    scheduling_policy: str = param("LIFO", choices=("LIFO", "FIFO"))
    all_reduce: tuple[str, ...] = ("ring", "ring")
    all_to_all: tuple[str, ...] = ("direct", "direct")
    all_gather: tuple[str, ...] = ("ring", "ring")
    reduce_scatter: tuple[str, ...] = ("ring", "ring")
    # a collective over several logical dimensions (docs/system.md): all-reduce as reduce-scatter,
    # all-reduce, all-gather phases ("localBWAware") or an all-reduce per dimension ("baseline")
    collective_optimization: str = param("localBWAware", choices=("localBWAware", "baseline"))
    # logical dimensions finer than the workload's, fastest first (docs/system.md): each of its
    # dimensions ([TP, EP]) is the product of consecutive entries, e.g. [8, 2, 2] for TP16EP2; empty: its own
    logical_dims: tuple[int, ...] = param((), low=1, high=MAX_COUNT)
    intra_server_cc: bool = False
    fast_forward: bool = True
    # how far (relative) an approximate fast-forward may move a layer's time (docs/system.md)
    fast_forward_tolerance: float = param(2e-3, low=0, high=1)
    # a run whose layer periods keep wandering (chaotic offsets between ranks) is extrapolated with the
    # mean of its last 24 periods once that mean's standard error is within this (relative), e.g. 0.01;
    # 0: never (the default: a wandering run can still settle into a slower pattern, docs/system.md)
    fast_forward_noise: float = param(0.0, low=0, high=1)
    # rank r starts at a uniform draw in [0, start_jitter_s) from jitter_seed: rerun with a few seeds
    # to see how far a result moves when nothing but the ranks' start times does (docs/system.md)
    start_jitter_s: float = param(0.0, low=0, high=1)
    jitter_seed: int = param(0, low=0, high=2**32 - 1)
    # the fraction of the GPU a rank's communication kernels occupy while one of its collectives is in
    # flight (e.g. DeepEP's 20-24 of 132 SMs: 0.15-0.18): compute overlapping it runs that much slower
    comm_sms: float = param(0.0, low=0, high=1, high_open=True)
    # (routed experts, top-k, expert groups, groups per token) of the all-to-alls, for algorithms that
    # send a token once per destination server (hierarchical); empty: every row is its own message
    expert_routing: tuple[int, ...] = param((), low=1, high=MAX_COUNT)
    # ASTRA-sim's receives (docs/reference-semantics.md B.1–B.2): the k-th message to arrive on a pair of
    # members serves the pair's k-th receive, and a ring member posts step k's receive with step k's send,
    # so one that starts a phase late sends its backlog one bundle delay apart. Off: each transfer waits
    # for its own message and a late member's ready steps leave together. Lockstep runs are the same
    # either way; runs whose ranks drift apart are not (docs/system.md). On for ASTRA-sim inputs
    # (`moesim astra run`) and `moesim collective`, off for study runs.
    astra_receives: bool = False

    def __post_init__(self) -> None:
        check_fields(self, "system settings")
        routing = self.expert_routing
        if routing and (len(routing) != 4 or routing[0] % routing[2] or routing[3] > routing[2]
                        or routing[1] > routing[3] * routing[0] // routing[2]):
            raise input_error("system settings", "expert_routing", "must be (experts, top-k, groups, groups per "
                              f"token): positive integers, groups dividing experts, top-k within the chosen groups, "
                              f"got {routing!r}")

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
