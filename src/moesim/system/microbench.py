"""One collective on its own, as nccl-tests and ASTRA-sim's microbenchmarks run it (``moesim collective``).

Every rank of a group runs one collective of one size and nothing else (no compute); the result is
when the first and the last rank finish, and nccl-tests' bandwidths (docs/system.md, "Collective
benchmarks"): ``algbw = size / time`` and ``busbw = algbw × factor``, with factor 2(n−1)/n for
all-reduce and (n−1)/n for all-gather, reduce-scatter and all-to-all. ``size`` is nccl-tests' size:
the all-reduce buffer, the all-gather output, the reduce-scatter input, the all-to-all send buffer
(so an all-gather's per-rank input, ASTRA-sim's ``comm_size``, is size / n).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from moesim.errors import MoesimError
from moesim.network import BACKENDS
from moesim.network.params import network_mode
from moesim.schema import MAX_COUNT, default_of
from moesim.system.collectives.base import COLLECTIVES, resolve
from moesim.system.engine import SystemSettings
from moesim.system.phases import fast_tier_caveat
from moesim.system.run import simulate, split_overrides
from moesim.system.spec import RunSpec
from moesim.topology.catalog import parse_topology
from moesim.workload.graph import CollectiveType, Node, NodeKind, RankGraph, Workload

COLLECTIVE_TYPES = {
    "all_reduce": CollectiveType.ALL_REDUCE,
    "all_gather": CollectiveType.ALL_GATHER,
    "reduce_scatter": CollectiveType.REDUCE_SCATTER,
    "all_to_all": CollectiveType.ALL_TO_ALL,
}
COUNTERS = ("pauses", "pause_events", "drops", "ecn_marks", "cnps")
"""The backend event counters a benchmark reports, where the backend keeps them."""
DEFAULT_ALGORITHM = {"all_reduce": "ring", "all_gather": "ring", "reduce_scatter": "ring", "all_to_all": "direct"}


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw: 2(n−1)/n for all-reduce, (n−1)/n for the others."""
    share = (ranks - 1) / ranks
    return 2 * share if collective == "all_reduce" else share


@dataclass(frozen=True)
class CollectiveSpec:
    """A collective benchmark: which collective, over which ranks of which topology, how it is run."""

    collective: str
    topology: str
    ranks: int = 0
    """The first ``ranks`` GPUs of the topology take part (0: all of them)."""
    algorithm: str = ""
    """A collective implementation (``ring``, ``dbt``, ``direct``, ``halving_doubling``, or an
    ASTRA-sim name such as ``doubleBinaryTree``); empty: ring, or direct for all-to-all."""
    network: str = default_of(RunSpec, "network")
    """As ``moesim run``: the study's InfiniBand mode without CC by default; ``none`` is the reference's
    shipped configuration (docs/reference-runs.md)."""
    backend: str = default_of(RunSpec, "backend")
    """As ``moesim collective``: fluid by default; ``packet`` for the reference scenarios."""
    overrides: tuple[tuple[str, Any], ...] = ()
    dims: tuple[int, ...] = ()
    """Logical dimensions, fastest-varying first (e.g. (8, 2)): the collective runs as one phase per
    dimension (docs/system.md); their product is the rank count. Empty: one dimension of ``ranks``."""


@dataclass(frozen=True)
class CollectiveResult:
    """One size of a benchmark: completion of the last and the first rank, and nccl-tests' bandwidths."""

    size_bytes: int
    time_s: float
    first_done_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    counters: dict[str, int]
    """The backend's event counters for this size (packet: pauses, drops, ECN marks, CNPs; fluid: pause
    events, CNPs); empty for a backend without them."""


@dataclass(frozen=True)
class PreparedBench:
    """A checked benchmark: the collective, its ranks and algorithm, the system settings and the network."""

    spec: CollectiveSpec
    ctype: CollectiveType
    ranks: int
    algorithm: str
    settings: SystemSettings
    make_backend: Any
    topology: Any
    caveat: str | None = None
    """What the backend cannot see in this benchmark (``phases.fast_tier_caveat``), or None."""


def prepare_collective(spec: CollectiveSpec) -> PreparedBench:
    """Check every input of a benchmark; errors are one line naming the field and what is allowed."""
    source = "collective"
    if spec.collective not in COLLECTIVE_TYPES:
        raise MoesimError(f"{source}: field 'collective': unknown '{spec.collective}' "
                          f"(allowed: {', '.join(COLLECTIVE_TYPES)})")
    ctype = COLLECTIVE_TYPES[spec.collective]
    algorithm = spec.algorithm or DEFAULT_ALGORITHM[spec.collective]
    impls = tuple(a.strip() for a in algorithm.split(","))
    for impl in impls:
        name, _ = resolve(impl)
        if ctype not in COLLECTIVES.get(name).supports:
            allowed = sorted(e.name for e in COLLECTIVES if ctype in e.obj.supports)
            raise MoesimError(f"{source}: field 'algorithm': {impl} does not run {spec.collective} "
                              f"(allowed: {', '.join(allowed)})")
    wl_over, sys_over, net_over, link_bw = split_overrides(dict(spec.overrides), source)
    if wl_over:
        raise MoesimError(f"{source}: field '{next(iter(wl_over))}': a workload parameter; a collective "
                          "benchmark has no workload options (use -b/-e/-f for sizes)")
    settings_fields = {f.name for f in dataclasses.fields(SystemSettings)}
    for name in sys_over:
        if name not in settings_fields:  # gpu, all_to_all_algorithm: what a run resolves, not a setting
            raise MoesimError(f"{source}: field '{name}': a run parameter; a collective benchmark does not take it")
    # a benchmark reproduces the reference stack: ns-3's NIC bookkeeping unless --set says otherwise
    params = network_mode(spec.network).with_overrides({"nic_model": "ns3", **net_over})
    topology_ref = parse_topology(spec.topology)
    gpus = topology_ref.num_gpus
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in spec.dims):
        raise MoesimError(f"{source}: field 'dims': {list(spec.dims)} is not allowed (positive integers)")
    if spec.dims and spec.ranks and spec.ranks != math.prod(spec.dims):
        raise MoesimError(f"{source}: field 'ranks': {spec.ranks} is not the product of dims {list(spec.dims)} "
                          f"(allowed: {math.prod(spec.dims)} or 0)")
    ranks = math.prod(spec.dims) if spec.dims else spec.ranks or gpus
    if not 2 <= ranks <= gpus:
        field = "dims" if spec.dims else "ranks"
        raise MoesimError(f"{source}: field '{field}': {ranks} ranks are not allowed (topology {spec.topology} "
                          f"has {gpus} GPUs; allowed 2..{gpus})")
    topology = topology_ref.resolve(params.transport.nic_switch_delay_s)
    if link_bw:
        topology = topology.with_link_bandwidths(link_bw)
    settings = SystemSettings(roofline=False, all_reduce=impls, all_gather=impls, reduce_scatter=impls,
                              all_to_all=impls, intra_server_cc=params.transport.intra_server_cc, astra_receives=True)
    settings = dataclasses.replace(settings, **sys_over)
    backend_cls = BACKENDS.get(spec.backend)
    caveat = fast_tier_caveat(spec.backend, params, len([d for d in spec.dims if d > 1]) > 1)
    return PreparedBench(spec, ctype, ranks, algorithm, settings, lambda: backend_cls(topology, params), topology,
                         caveat)


def node_size_bytes(collective: str, size_bytes: int, ranks: int) -> int:
    """The size a rank's collective node carries for nccl-tests' ``size``: the all-gather node holds
    its per-rank input (ASTRA-sim's comm_size), the others the whole buffer."""
    return size_bytes // ranks if collective == "all_gather" else size_bytes


def run_collective(bench: PreparedBench, size_bytes: int) -> CollectiveResult:
    """Simulate one size on a fresh backend."""
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or not 1 <= size_bytes <= MAX_COUNT:
        raise MoesimError(f"collective: field 'size': {size_bytes!r} is not allowed (an integer in [1, {MAX_COUNT}] bytes)")
    n = bench.ranks
    node_bytes = node_size_bytes(bench.spec.collective, size_bytes, n)
    graphs = tuple(RankGraph(r, (Node(0, bench.spec.collective, NodeKind.COLLECTIVE, collective=bench.ctype,
                                      size_bytes=node_bytes),)) for r in range(n))
    workload = Workload(f"{bench.spec.collective}_{n}", graphs, bench.spec.dims or (n,))
    backend = bench.make_backend()
    times = simulate(workload, bench.topology, backend, bench.settings)
    last = max(t.wall_s for t in times)
    first = min(t.wall_s for t in times)
    algbw = size_bytes / last if last > 0 else float("inf")
    return CollectiveResult(size_bytes, last, first, algbw, algbw * bus_factor(bench.spec.collective, n),
                            _counters(backend.diagnostics()))


def _counters(diagnostics: dict[str, Any]) -> dict[str, int]:
    """The integer counters of a backend's diagnostics (top level and its ``stats``), event counts only."""
    flat = {**diagnostics, **diagnostics.get("stats", {})}
    return {k: int(flat[k]) for k in COUNTERS if k in flat}


def sizes(begin_bytes: int, end_bytes: int, factor: int) -> list[int]:
    """nccl-tests' size sweep: begin, begin × factor, ... up to end (inclusive)."""
    if begin_bytes < 1 or end_bytes < begin_bytes:
        raise MoesimError(f"collective: field 'sizes': need 1 <= begin <= end, got {begin_bytes}..{end_bytes}")
    if factor < 2:
        raise MoesimError(f"collective: field 'factor': {factor} is not allowed (an integer >= 2)")
    out = [begin_bytes]
    while out[-1] * factor <= end_bytes:
        out.append(out[-1] * factor)
    return out
