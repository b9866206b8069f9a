"""One study run as a library call: RunSpec → workload, topology, backend → simulate → RunResult."""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from moesim import __version__
from moesim.errors import MoesimError, input_error
from moesim.models.catalog import get_model
from moesim.models.spec import ModelSpec
from moesim.network import BACKENDS
from moesim.network.base import NetworkBackend
from moesim.network.diagnostics import DiagnosticsSpec
from moesim.network.params import NetworkParams, network_mode
from moesim.system.engine import Simulation, SystemSettings
from moesim.system.spec import ALGORITHMS, RankTimes, RunResult, RunSpec
from moesim.topology.builder import LINK_KINDS
from moesim.topology.catalog import get_topology
from moesim.topology.model import Topology
from moesim.workload.generator import WorkloadOptions, generate
from moesim.workload.graph import Workload
from moesim.workload.layout import ParallelLayout

_WORKLOAD_KEYS = {"tokens"} | {f.name for f in dataclasses.fields(WorkloadOptions)}
_SYSTEM_KEYS = {f.name for f in dataclasses.fields(SystemSettings)} - {
    "all_reduce", "all_to_all", "all_gather", "reduce_scatter"}
_NETWORK_KEYS = {f.name for f in dataclasses.fields(NetworkParams)} - {"name"}
LINK_BANDWIDTH_KEYS = {f"{kind}_bandwidth_bps": kind for kind in LINK_KINDS}
"""Topology overrides: every link of one kind gets this bandwidth (e.g. ``fabric_bandwidth_bps``)."""


def split_overrides(overrides: dict[str, Any], source: str = "overrides") -> tuple[dict, dict, dict, dict]:
    """Sort override names into (workload, system, network, link bandwidth by kind) parts; unknown
    names are an error."""
    wl, sy, net, links = {}, {}, {}, {}
    for key, value in overrides.items():
        if key in _WORKLOAD_KEYS:
            wl[key] = value
        elif key in _SYSTEM_KEYS:
            sy[key] = value
        elif key in _NETWORK_KEYS:
            net[key] = value
        elif key in LINK_BANDWIDTH_KEYS:
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise input_error(source, key, f"must be a positive bandwidth in bits/s, got {value!r}")
            links[LINK_BANDWIDTH_KEYS[key]] = float(value)
        else:
            allowed = sorted(_WORKLOAD_KEYS | _SYSTEM_KEYS | _NETWORK_KEYS | set(LINK_BANDWIDTH_KEYS))
            raise MoesimError(f"{source}: field '{key}': unknown parameter (allowed: {', '.join(allowed)})")
    return wl, sy, net, links


@dataclass(frozen=True)
class PreparedRun:
    """Every input of a run, resolved and checked; the workload graphs are built on demand
    (``workload()``), so planning and hashing a sweep never builds them."""

    spec: RunSpec
    model: ModelSpec
    layout: ParallelLayout
    params: NetworkParams
    topology: Topology
    settings: SystemSettings
    backend_cls: type[NetworkBackend]
    tokens: int
    workload_options: WorkloadOptions

    def workload(self) -> Workload:
        """The per-rank execution graphs (built anew on each call)."""
        return generate(self.model, self.layout, self.tokens, self.workload_options)

    def cc_flows_possible(self) -> bool:
        """Whether any flow of this run can carry congestion control (the per-flow policy): all flows when
        ``intra_server_cc``, else only flows between servers, so a run on one server has none."""
        if self.params.intra_server_cc:
            return True
        return len({self.topology.gpus[r].server for r in range(self.layout.num_ranks)}) > 1


def prepare(spec: RunSpec) -> PreparedRun:
    """Resolve every input of a run, so errors surface before anything is simulated."""
    if spec.algorithm not in ALGORITHMS:
        raise MoesimError(f"unknown algorithm '{spec.algorithm}' (allowed: {', '.join(ALGORITHMS)})")
    wl_over, sys_over, net_over, link_bw = split_overrides(spec.override_dict())
    model = get_model(spec.model)
    layout = ParallelLayout.parse(spec.strategy)
    params = network_mode(spec.network).with_overrides(net_over)
    topology = get_topology(spec.topology, nic_switch_delay_s=params.nic_switch_delay_s)
    if link_bw:
        topology = topology.with_link_bandwidths(link_bw)
    layout.validate(num_ranks=topology.num_gpus, routed_experts=model.routed_experts,
                    source=f"run {spec.model}/{spec.topology}")
    tokens = int(wl_over.pop("tokens", 4096))
    options = WorkloadOptions(**wl_over)
    tp_impl, ep_impl = ALGORITHMS[spec.algorithm]
    settings = SystemSettings(all_reduce=(tp_impl, tp_impl), all_to_all=(ep_impl, ep_impl),
                              intra_server_cc=params.intra_server_cc)
    settings = dataclasses.replace(settings, **sys_over)
    backend_cls = BACKENDS.get(spec.backend)
    return PreparedRun(spec, model, layout, params, topology, settings, backend_cls, tokens, options)


@dataclass(frozen=True)
class Simulated:
    """What one simulation produced, independent of the labels of the runs that share its inputs."""

    spec: RunSpec
    ranks: tuple[RankTimes, ...]
    backend_parameters: dict[str, Any]
    fast_forwarded_layers: int
    fast_forward_mode: str
    diagnostics: dict[str, Any]
    sim_wallclock_s: float
    timeline: tuple[NodeTime, ...] = ()
    """Every node's interval when the simulation was asked for it (``simulate_prepared(timeline=True)``)."""


@dataclass(frozen=True)
class NodeTime:
    """When one node of one rank ran: its layer (-1: none), kind (compute or a collective's name), interval."""

    rank: int
    node_id: int
    name: str
    layer: int
    kind: str
    start_s: float
    end_s: float


Progress = Callable[[float, int, int], None]
"""A progress callback: (simulated time s, layers every rank has finished, layers per rank)."""
PROGRESS_EVERY_S = 0.2
"""Wall-clock seconds between two progress calls (the callback decides what to show)."""


def _watch(sim: Simulation, backend: NetworkBackend, workload: Workload, progress: Progress) -> None:
    """Call ``progress`` after engine steps, at most every PROGRESS_EVERY_S of wall time. A rank's layers
    done are those before its first unfinished node (nodes are ordered by layer)."""
    total = 1 + max((n.layer for g in workload.graphs for n in g.nodes), default=-1)
    advance = backend.advance_to
    next_call = [time.monotonic() + PROGRESS_EVERY_S]

    def layers_done() -> int:
        done = total
        for st in sim.ranks:
            if st.completed < len(st.nodes):
                done = min(done, max(0, st.nodes[st.done.index(False)].layer))
        return done

    def advance_and_report(t: float) -> list[int]:
        finished = advance(t)
        now = time.monotonic()
        if now >= next_call[0]:
            next_call[0] = now + PROGRESS_EVERY_S
            progress(t, layers_done(), total)
        return finished

    backend.advance_to = advance_and_report  # type: ignore[method-assign,assignment]


def simulate_prepared(prepared: PreparedRun, diagnostics: bool = False, progress: Progress | None = None,
                      timeline: bool = False) -> Simulated:
    """Simulate a prepared run. ``diagnostics`` keeps the backend's per-run diagnostics and ``timeline`` every
    node's interval (both disable layer fast-forward); ``progress`` is called as the simulation advances."""
    t0 = time.perf_counter()
    settings = prepared.settings
    if diagnostics:
        settings = dataclasses.replace(settings, fast_forward=False)
    backend_cls = prepared.backend_cls
    if diagnostics and "diagnostics" in inspect.signature(backend_cls).parameters:
        backend = backend_cls(prepared.topology, prepared.params, diagnostics=DiagnosticsSpec.everything())  # type: ignore[call-arg]
    else:
        backend = backend_cls(prepared.topology, prepared.params)
    workload = prepared.workload()
    sim = Simulation(workload, prepared.topology, backend, settings, record_timeline=timeline)
    if progress is not None:
        _watch(sim, backend, workload, progress)
    ranks = sim.run()
    backend_params = backend.parameters() if hasattr(backend, "parameters") else {}
    return Simulated(prepared.spec, tuple(ranks), backend_params, sim.fast_forwarded_layers, sim.fast_forward_mode,
                     backend.diagnostics() if diagnostics else {}, time.perf_counter() - t0,
                     _node_times(workload, sim.timeline or []))


def _node_times(workload: Workload, timeline: list[tuple[int, int, str, float, float]]) -> tuple[NodeTime, ...]:
    """The engine's (rank, node id, name, start, end) records with each node's layer and kind."""
    by_id = [{n.id: n for n in g.nodes} for g in workload.graphs] if timeline else []
    out = []
    for rank, node_id, name, start_s, end_s in timeline:
        node = by_id[rank][node_id]
        kind = node.collective.name if node.collective is not None else node.kind.value
        out.append(NodeTime(rank, node_id, name, node.layer, kind, start_s, end_s))
    return tuple(sorted(out, key=lambda t: (t.rank, t.start_s, t.node_id)))


def result_of(prepared: PreparedRun, simulated: Simulated) -> RunResult:
    """The RunResult of ``prepared`` from a simulation of it (or of a run with the same effective inputs)."""
    spec, params, settings = prepared.spec, prepared.params, prepared.settings
    ranks = simulated.ranks
    bottleneck = max(range(len(ranks)), key=lambda r: (ranks[r].wall_s, -r))
    cc_model = params.cc_name if prepared.backend_cls.models_congestion_control else "none (backend is blind to CC)"
    policy = "all flows" if params.intra_server_cc else "inter-server flows only (intra-server flows: no CC)"
    backend_params = simulated.backend_parameters
    if spec != simulated.spec and hasattr(prepared.backend_cls, "parameters"):  # a twin: its own parameters
        backend_params = prepared.backend_cls(prepared.topology, params).parameters()  # type: ignore[attr-defined]
    parameters = {
        "tokens": prepared.tokens,
        "network": {k: v for k, v in params.as_dict().items() if k != "extra"},
        "system": dataclasses.asdict(settings),
        "topology_gpus": prepared.topology.num_gpus,
        "fast_forwarded_layers": simulated.fast_forwarded_layers,
        "fast_forward_mode": simulated.fast_forward_mode,
        "backend": backend_params,
    }
    return RunResult(
        spec=spec, ranks=ranks, bottleneck_rank=bottleneck, backend=spec.backend, cc_model=cc_model,
        cc_policy=policy, version=__version__, parameters=parameters, diagnostics=simulated.diagnostics,
        sim_wallclock_s=simulated.sim_wallclock_s,
    )


def simulate_run(spec: RunSpec, diagnostics: bool = False, progress: Progress | None = None) -> RunResult:
    """Simulate one run. ``diagnostics`` keeps the backend's per-run diagnostics (disables fast-forward);
    ``progress`` is called as the simulation advances (see ``Progress``)."""
    prepared = prepare(spec)
    return result_of(prepared, simulate_prepared(prepared, diagnostics, progress))
