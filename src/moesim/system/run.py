"""One study run as a library call: RunSpec → workload, topology, backend → simulate → RunResult."""

from __future__ import annotations

import dataclasses
import difflib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from moesim.errors import MoesimError
from moesim.models.catalog import get_model
from moesim.models.spec import ModelSpec
from moesim.network import BACKENDS
from moesim.network.base import NetworkBackend
from moesim.network.diagnostics import DiagnosticsSpec
from moesim.network.params import PARAMS as NETWORK_PARAMS
from moesim.network.params import NetworkParams, network_mode
from moesim.schema import MAX_DURATION_S, Constraint, Param
from moesim.system import ensemble, fast_forward
from moesim.system.breakdown import LEVELS, Breakdown, Recorder
from moesim.system.collectives import COLLECTIVES, expert_all_to_all_algorithms
from moesim.system.collectives.base import resolve
from moesim.system.engine import Simulation, SystemSettings, full_collections_paused
from moesim.system.spec import ALGORITHMS, RankTimes, RunResult, RunSpec
from moesim.topology.builder import LINK_KINDS
from moesim.topology.catalog import TopologyRef, parse_topology
from moesim.topology.gpus import gpu_choices, gpu_roofline, resolve_gpu
from moesim.topology.model import Topology
from moesim.topology.placement import (
    DEFAULT_PLACEMENT,
    PLACEMENT_RULES,
    Placement,
    check_ep_nodes,
    resolve_placement,
)
from moesim.topology.templates import SERVER_TEMPLATES
from moesim.topology.units import BANDWIDTH_RANGE_BPS
from moesim.version import __version__
from moesim.workload import mtp
from moesim.workload.generator import generate, pass_tokens, routing_imbalance
from moesim.workload.graph import Workload
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import TOKENS, WorkloadOptions

LINK_BANDWIDTH_KEYS = {f"{kind}_bandwidth_bps": kind for kind in LINK_KINDS}
"""Topology overrides: every link of one kind gets this bandwidth (e.g. ``fabric_bandwidth_bps``)."""

ALL_TO_ALL_ALGORITHMS = expert_all_to_all_algorithms()
"""What the ``all_to_all_algorithm`` override may pick: the registered collective algorithms marked
``expert_all_to_all`` (``moesim.system.collectives``)."""

MAX_TOKENS = TOKENS.allowed.high
"""The largest token count a run accepts: every message size stays an exact float64 below it."""
NODES_PER_LAYER = 7
"""Nodes of one layer in one rank's graph (per decode step and micro-batch), at most: a MoE layer's
attention, TP all-reduce, dispatch, experts, combine, shared FFN, TP all-reduce."""
MAX_RANK_NODES = 2 ** 24
"""The most graph nodes a run may hold over all ranks (ranks × layers × steps × micro-batches ×
NODES_PER_LAYER): each
costs about BYTES_PER_RANK_NODE of memory while the run is simulated, so this bound keeps a run below
about 9 GB."""
BYTES_PER_RANK_NODE = 550
"""Memory per node and rank of a simulation, measured on a V4 Flash decode run (64 steps, 32 ranks)."""


def _override_params() -> dict[str, Param]:
    """Every parameter a run may override, by name (its layer's dataclass field, or a topology link
    bandwidth), with type, unit and allowed range: the one schema of ``--set``, matrices and the API."""
    out: dict[str, Param] = {"tokens": TOKENS}
    for p in Param.of(WorkloadOptions, "workload"):
        out[p.name] = p
    impls = frozenset({"all_reduce", "all_to_all", "all_gather", "reduce_scatter"})
    for p in Param.of(SystemSettings, "system", skip=impls):
        out[p.name] = p
    out.update(NETWORK_PARAMS)
    for key in LINK_BANDWIDTH_KEYS:
        out[key] = Param(key, "topology", float, "bit/s", Constraint(low=BANDWIDTH_RANGE_BPS[0], high=BANDWIDTH_RANGE_BPS[1]))
    out["all_to_all_algorithm"] = Param("all_to_all_algorithm", "system", str, "",
                                        Constraint(choices=ALL_TO_ALL_ALGORITHMS),
                                        note="the EP all-to-all algorithm instead of the --algorithm combination's: "
                                             + ", ".join(ALL_TO_ALL_ALGORITHMS))
    out[ensemble.ENSEMBLE] = Param(ensemble.ENSEMBLE, "system", int, "",
                                   Constraint(low=0, high=ensemble.MAX_MEMBERS - 1),
                                   note="an ensemble member: k ≥ 1 sets " + ", ".join(ensemble.PERTURBED)
                                        + " by a fixed rule (docs/system.md, Ensembles)")
    # a rule name or the path of a rank → GPU file; the path is checked when the run is prepared
    out["placement"] = Param("placement", "placement", str, "", Constraint(),
                             note=f"a rule ({', '.join(PLACEMENT_RULES.names())}), a comma-separated GPU list "
                                  "or a .yaml/.json rank → GPU file")
    # a GPU model whose data-sheet peak and HBM bandwidth the roofline takes (topology/gpus.py)
    out["gpu"] = Param("gpu", "system", str, "", Constraint(choices=tuple(gpu_choices())),
                       note=f"one of {', '.join(gpu_choices())}: the roofline's peak_flops and mem_bw_bytes_per_s "
                            "from that GPU model's data sheet (topology: the server template's)")
    return out


OVERRIDES: dict[str, Param] = _override_params()


def check_override(name: str, value: Any, source: str = "overrides") -> Any:
    """``value`` checked and converted for the override ``name``; an unknown name or a bad value is a
    one-line error naming ``source``."""
    param = OVERRIDES.get(name)
    if param is None:
        close = difflib.get_close_matches(name, OVERRIDES, n=3)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise MoesimError(f"{source}: field '{name}': unknown parameter ({hint}allowed: {', '.join(sorted(OVERRIDES))})")
    return param.check(value, source)


def split_overrides(overrides: dict[str, Any], source: str = "overrides") -> tuple[dict, dict, dict, dict]:
    """Check every override and sort them into (workload, system, network, link bandwidth by kind) parts."""
    parts: dict[str, dict[str, Any]] = {"workload": {}, "system": {}, "network": {}, "topology": {}}
    for key, value in overrides.items():
        checked = check_override(key, value, source)
        if OVERRIDES[key].section not in parts:
            raise MoesimError(f"{source}: field '{key}': not accepted here (allowed: {', '.join(sorted(parts))} "
                              "parameters)")
        parts[OVERRIDES[key].section][key] = checked
    links = {LINK_BANDWIDTH_KEYS[k]: float(v) for k, v in parts["topology"].items()}
    return parts["workload"], parts["system"], parts["network"], links


@dataclass(frozen=True)
class PreparedRun:
    """Every input of a run, resolved and checked; the workload graphs are built on demand
    (``workload()``), so planning and hashing a sweep never builds them."""

    spec: RunSpec
    model: ModelSpec
    layout: ParallelLayout
    params: NetworkParams
    topology_ref: TopologyRef
    """The topology as the spec names it, looked up once (template, servers, fabric; ``with_servers``)."""
    topology: Topology
    """The built topology, with the link bandwidth overrides."""
    settings: SystemSettings
    backend_cls: type[NetworkBackend]
    tokens: int
    workload_options: WorkloadOptions
    placement: Placement
    """Rank → GPU (``placement`` override: a rule of ``PLACEMENT_RULES`` or a file; default contiguous)."""
    ep_imbalance: tuple[float, float] | None = None
    """Skewed routing only: (after, before expert balancing) max/mean token rows per EP rank."""

    def workload(self) -> Workload:
        """The per-rank execution graphs (built anew on each call)."""
        return generate(self.model, self.layout, self.tokens, self.workload_options)

    def cc_flows_possible(self) -> bool:
        """Whether any flow of this run can carry congestion control (the per-flow policy): all flows when
        ``intra_server_cc``, else only flows between servers, so a run on one server has none."""
        if self.params.transport.intra_server_cc:
            return True
        return len({self.topology.gpus[g].server for g in self.placement.rank_to_gpu}) > 1


def run_label_of(spec: RunSpec) -> str:
    """``model/topology/strategy/algorithm/network`` (paths shortened to their file name)."""
    from pathlib import Path

    short = [Path(x).stem if "/" in x else x for x in (spec.model, spec.topology)]
    return "/".join([*short, spec.strategy, spec.algorithm, spec.network])


def prepare(spec: RunSpec) -> PreparedRun:
    """Resolve every input of a run, so errors surface before anything is simulated."""
    if spec.algorithm not in ALGORITHMS:
        raise MoesimError(f"unknown algorithm '{spec.algorithm}' (allowed: {', '.join(ALGORITHMS)})")
    source = f"run {run_label_of(spec)}"
    overrides = spec.override_dict()
    placement_value = check_override("placement", overrides.pop("placement", DEFAULT_PLACEMENT), source)
    a2a = overrides.pop("all_to_all_algorithm", None)
    gpu_value = check_override("gpu", overrides.pop("gpu"), source) if "gpu" in overrides else None
    backend_cls = BACKENDS.get(spec.backend)
    if ensemble.ENSEMBLE in overrides:
        index = check_override(ensemble.ENSEMBLE, overrides.pop(ensemble.ENSEMBLE), source)
        overrides = ensemble.expand(overrides, index, backend_cls.capabilities.packet_level, source)
    wl_over, sys_over, net_over, link_bw = split_overrides(overrides, source)
    model = get_model(spec.model)
    layout = ParallelLayout.parse(spec.strategy)
    params = network_mode(spec.network).with_overrides(net_over)
    # TP × EP against the GPU count of the spec, before paying for building a large topology
    topology_ref = parse_topology(spec.topology)
    layout.validate(num_ranks=topology_ref.num_gpus, routed_experts=model.routed_experts,
                    source=f"run {spec.model}/{spec.topology}",
                    redundant_experts=int(wl_over.get("redundant_experts", 0)))
    topology = topology_ref.resolve(params.transport.nic_switch_delay_s)
    if link_bw:
        topology = topology.with_link_bandwidths(link_bw)
    tokens = int(wl_over.pop("tokens", 4096))
    options = WorkloadOptions(**wl_over)
    if options.phase == "decode":  # tokens = what the steps generate; the prefill length does not apply
        if "tokens" in spec.override_dict():
            raise MoesimError(f"run {run_label_of(spec)}: field 'tokens': a prefill length; a decode run "
                              f"takes batch, context_tokens and decode_steps")
        tokens = options.batch * options.decode_steps  # type: ignore[operator]
    elif options.prompt_lengths is not None:  # a batch of prompts: its tokens, on every attention group
        if "tokens" in spec.override_dict():
            raise MoesimError(f"{source}: field 'tokens': a batch of prompts has the tokens of its prompt_lengths")
        tokens = pass_tokens(layout, tokens, options)
    _check_size(source, layout.num_ranks * model.num_layers * (options.decode_steps or 1) * (options.micro_batches or 1))
    tp_impl, ep_impl = ALGORITHMS[spec.algorithm]
    if a2a is not None:
        ep_impl = check_override("all_to_all_algorithm", a2a, source)
    settings = SystemSettings(all_reduce=(tp_impl, tp_impl), all_to_all=(ep_impl, ep_impl),
                              intra_server_cc=params.transport.intra_server_cc)
    if COLLECTIVES.get(resolve(ep_impl)[0]).placed is not None and "expert_routing" not in sys_over:
        # an all-to-all placed per server (hierarchical) reads the routing: plain top-k over the model's experts
        sys_over["expert_routing"] = (model.routed_experts, model.top_k, 1, 1)
    settings = dataclasses.replace(settings, **sys_over)
    if gpu_value is not None:
        settings = _with_gpu(settings, gpu_value, topology_ref, sys_over, source)
    placement = resolve_placement(placement_value, topology, *layout.grid, source)
    experts = layout.experts
    if options.eplb_nodes > 1 and experts.ep % options.eplb_nodes == 0:  # EPLB's nodes are the run's servers
        check_ep_nodes(topology, placement, experts.tp, experts.ep, options.eplb_nodes, source)
    imbalance = routing_imbalance(model, layout, tokens, options)  # reads a routing table / placement file
    return PreparedRun(spec=spec, model=model, layout=layout, params=params, topology_ref=topology_ref,
                       topology=topology, settings=settings, backend_cls=backend_cls, tokens=tokens,
                       workload_options=options, placement=placement, ep_imbalance=imbalance)


def _with_gpu(settings: SystemSettings, value: str, ref: TopologyRef, sys_over: dict[str, Any],
              source: str) -> SystemSettings:
    """``settings`` with the roofline of GPU model ``value`` (``topology``: the server template's), which an
    explicit ``peak_flops`` or ``mem_bw_bytes_per_s`` would contradict (a one-line error)."""
    template_gpu = SERVER_TEMPLATES.get(ref.template).gpu if ref.template and ref.template in SERVER_TEMPLATES else None
    roofline = gpu_roofline(resolve_gpu(value, template_gpu, source), source)
    for name in roofline:
        if name in sys_over:
            raise MoesimError(f"{source}: field '{name}': gpu={value} sets it; leave one of them out")
    return dataclasses.replace(settings, peak_flops=roofline["peak_flops"],
                               mem_bw_bytes_per_s=roofline["mem_bw_bytes_per_s"])


def _check_size(source: str, rank_layers: int) -> None:
    """Refuse, before anything is built, a run whose graphs would not fit in memory (an up-front estimate
    from its ranks, layers and decode steps)."""
    nodes = rank_layers * NODES_PER_LAYER
    if nodes > MAX_RANK_NODES:
        raise MoesimError(f"{source}: about {nodes:.3g} graph nodes (ranks × layers × decode steps × micro-batches × "
                          f"{NODES_PER_LAYER}), about {nodes * BYTES_PER_RANK_NODE / 1e9:.3g} GB to simulate; at most "
                          f"{MAX_RANK_NODES:.3g} (allowed: fewer ranks, layers, decode_steps or micro_batches)")


def _check_horizon(source: str, ranks: list[RankTimes]) -> None:
    """A one-line error when the simulated time outgrew the clock's exact range: times are integer ns in
    float64, so beyond MAX_DURATION_S communication (ns to ms) would round away into a wrong result."""
    longest = max((r.wall_s for r in ranks), default=0.0)
    if not longest <= MAX_DURATION_S:
        raise MoesimError(f"{source}: the run lasts {longest:.3g} simulated seconds, beyond the {MAX_DURATION_S:.3g} s "
                          "in which the simulator's nanosecond clock is exact, so its communication times would be "
                          "lost (check the size of the run: tokens, batch, decode_steps; then peak_flops, mem_bw_bytes_per_s and the "
                          "model's sizes)")


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
    breakdown: Breakdown | None = None
    """What the breakdown recorder saw (``simulate_prepared(breakdown=...)``)."""
    breakdown_level: str = "none"
    """How much of it the run's result keeps (``moesim.system.breakdown.LEVELS``)."""
    fluid_steps: int = 0
    """The backend's integration steps (``NetworkBackend.steps``: the fluid backend's steps, else 0)."""
    engine_events: int = 0
    """Events the engine handled (``Simulation.events_handled``)."""


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


def simulate(workload: Workload, topology: Topology, backend: NetworkBackend, settings: SystemSettings | None = None,
             placement: tuple[int, ...] | None = None) -> list[RankTimes]:
    """Execute ``workload`` (with layer fast-forward when the settings ask for it) and return per-rank
    wall/GPU/comm times (ASTRA-sim's report, docs/reference-semantics.md B.7)."""
    sim = Simulation(workload, topology, backend, settings or SystemSettings(), placement)
    fast_forward.attach(sim)
    return sim.run()


def _watch(sim: Simulation, workload: Workload, progress: Progress) -> None:
    """Call ``progress`` after engine steps, at most every PROGRESS_EVERY_S of wall time. A rank's layers
    done are those before its first unfinished node (nodes are ordered by layer)."""
    total = 1 + max((n.layer for g in workload.graphs for n in g.nodes), default=-1)
    next_call = [time.monotonic() + PROGRESS_EVERY_S]

    def layers_done() -> int:
        done = total
        for st in sim.ranks:
            if st.completed < len(st.nodes):
                done = min(done, max(0, st.nodes[st.done.index(False)].layer))
        return done

    def report() -> None:
        now = time.monotonic()
        if now >= next_call[0]:
            next_call[0] = now + PROGRESS_EVERY_S
            progress(sim.now, layers_done(), total)

    sim.hooks.step_finished.append(report)


def _record_timeline(sim: Simulation, workload: Workload) -> list[NodeTime]:
    """Every node's (start, end) as the simulation runs, through the engine's hooks."""
    started: dict[tuple[int, int], float] = {}
    out: list[NodeTime] = []

    def on_start(r: int, i: int) -> None:
        started[(r, i)] = sim.now

    def on_finish(r: int, i: int) -> None:
        node = workload.graphs[r].nodes[i]
        kind = node.collective.name if node.collective is not None else node.kind.value
        out.append(NodeTime(r, node.id, node.name, node.layer, kind, started.pop((r, i), sim.now), sim.now))

    sim.hooks.node_started.append(on_start)
    sim.hooks.node_finished.append(on_finish)
    return out


def simulate_prepared(prepared: PreparedRun, diagnostics: bool = False, progress: Progress | None = None,
                      timeline: bool = False, breakdown: str = "none", detail: bool = False) -> Simulated:
    """Simulate a prepared run. ``diagnostics`` keeps the backend's per-run diagnostics and ``timeline`` every
    node's interval (both disable layer fast-forward); ``breakdown`` records the per-node breakdown and the
    result keeps it at that level (``LEVELS``; fast-forward stays as it is), ``detail`` also records chunks
    and flows (a timeline's); ``progress`` is called as the simulation advances."""
    if breakdown not in LEVELS:
        raise MoesimError(f"breakdown: unknown level '{breakdown}' (allowed: {', '.join(LEVELS)})")
    t0 = time.perf_counter()
    settings = prepared.settings
    if diagnostics or timeline:
        settings = dataclasses.replace(settings, fast_forward=False)
    backend_cls = prepared.backend_cls
    backend = backend_cls(prepared.topology, prepared.params,
                          diagnostics=DiagnosticsSpec.everything() if diagnostics else None)
    with full_collections_paused():
        workload = prepared.workload()
        sim = Simulation(workload, prepared.topology, backend, settings, prepared.placement.rank_to_gpu)
        ff = fast_forward.attach(sim)
        if progress is not None:
            _watch(sim, workload, progress)
        nodes = _record_timeline(sim, workload) if timeline else []
        recorder = Recorder(sim, detail, ff) if breakdown != "none" or detail else None
        ranks = sim.run()
    _check_horizon(f"run {run_label_of(prepared.spec)}", ranks)
    return Simulated(prepared.spec, tuple(ranks), backend.parameters(), ff.layers_skipped if ff else 0,
                     fast_forward.mode(ff),
                     backend.diagnostics() if diagnostics else {}, time.perf_counter() - t0,
                     tuple(sorted(nodes, key=lambda t: (t.rank, t.start_s, t.node_id))),
                     recorder.result() if recorder is not None else None, breakdown, backend.steps,
                     sim.events_handled)


def result_of(prepared: PreparedRun, simulated: Simulated) -> RunResult:
    """The RunResult of ``prepared`` from a simulation of it (or of a run with the same effective inputs)."""
    spec, params, settings = prepared.spec, prepared.params, prepared.settings
    ranks = simulated.ranks
    bottleneck = max(range(len(ranks)), key=lambda r: (ranks[r].wall_s, -r))
    cc_model = params.cc_name if prepared.backend_cls.capabilities.congestion_control else "none (backend is blind to CC)"
    policy = "all flows" if params.transport.intra_server_cc else "inter-server flows only (intra-server flows: no CC)"
    backend_params = simulated.backend_parameters
    if spec != simulated.spec:  # a twin: its own parameters
        backend_params = prepared.backend_cls(prepared.topology, params).parameters()
    parameters = {
        "tokens": prepared.tokens,
        "network": params.as_dict(),
        "system": dataclasses.asdict(settings),
        "topology_gpus": prepared.topology.num_gpus,
        "fast_forwarded_layers": simulated.fast_forwarded_layers,
        "fast_forward_mode": simulated.fast_forward_mode,
        "backend": backend_params,
    }
    if not prepared.placement.is_contiguous():
        parameters["placement"] = list(prepared.placement.rank_to_gpu)
    options = prepared.workload_options
    if options.phase == "decode":
        parameters["decode"] = {"batch": options.batch, "context_tokens": options.context_tokens,
                                "decode_steps": options.decode_steps,
                                **mtp.result_fields(options.mtp_draft_tokens, options.mtp_acceptance)}
    if prepared.ep_imbalance is not None:  # skewed routing only: uniform records keep their keys
        parameters["routing"] = {"ep_imbalance": prepared.ep_imbalance[0],
                                 "ep_imbalance_before": prepared.ep_imbalance[1]}
    return RunResult(
        spec=spec, ranks=ranks, bottleneck_rank=bottleneck, backend=spec.backend, cc_model=cc_model,
        cc_policy=policy, version=__version__, parameters=parameters, diagnostics=simulated.diagnostics,
        sim_wallclock_s=simulated.sim_wallclock_s,
        breakdown=None if simulated.breakdown is None or simulated.breakdown_level == "none"
        else simulated.breakdown.table(simulated.breakdown_level),
    )


def simulate_run(spec: RunSpec, diagnostics: bool = False, progress: Progress | None = None,
                 breakdown: str = "none") -> RunResult:
    """Simulate one run. ``diagnostics`` keeps the backend's per-run diagnostics (disables fast-forward);
    ``breakdown`` its per-layer or per-node breakdown; ``progress`` is called as the simulation advances."""
    prepared = prepare(spec)
    return result_of(prepared, simulate_prepared(prepared, diagnostics, progress, breakdown=breakdown))
