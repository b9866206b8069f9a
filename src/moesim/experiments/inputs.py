"""Up-front checking of every run, its input hash (the simulation's key) and its run id (the store's key).

``plan_runs`` resolves each run's inputs with ``moesim.system.run.prepare`` before anything is
simulated, so an impossible combination (TP × EP ≠ the topology's GPUs, EP not dividing the experts,
a bad override) is reported at once. The input hash is a sha256 of the moesim version and what the
simulation reads (model spec — so an edited model file counts —, layout, topology links, the network
parameters its backend and CC algorithm read, system settings, tokens): runs whose hashes are equal are
simulated once (topology 6 has no inter-server flow, so its four network modes are one simulation). The
run id adds the canonical RunSpec: change any input and the run is redone; otherwise a rerun finds it in
the store. Editing the simulator's code without changing the version is not seen (a
source tree changes all the time); each row records ``source_sha256`` (:func:`code_hash`) in its
parameters, and ``moesim sweep ... --rerun`` redoes everything.

Each planned run also carries its legacy id (the network part of the key holding every section of every
algorithm); a sweep re-keys a row found under it (``ResultsStore.rekey``) instead of simulating the run
again.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError
from moesim.system.spec import RunSpec
from moesim.version import __version__

# Code outside the simulation path: editing it does not change a result, so it does not re-run a sweep.
_NOT_SIMULATION = ("analysis", "experiments", "commands", "cli.py")


@dataclass(frozen=True)
class PlannedRun:
    """A run that passed the up-front checks. ``input_hash`` keys its simulation (runs with equal
    inputs share one); ``run_id`` keys its row in the store (the spec and that hash); ``legacy_run_id``
    is the id a store written before the per-backend network key gave it (every section of every
    algorithm in the key), by which a sweep finds and re-keys such a row."""

    spec: RunSpec
    run_id: str
    input_hash: str = ""
    legacy_run_id: str = ""


@dataclass(frozen=True)
class WorkUnit:
    """Planned runs with equal input hashes: one simulation, stored once per run under its own labels.
    The first run is the one simulated; ``run_id``/``spec`` are its (executors retry and report by them)."""

    runs: tuple[PlannedRun, ...]
    breakdown: str = "layers"
    """How much of the breakdown each run keeps (``moesim.system.breakdown.LEVELS``)."""

    @property
    def run_id(self) -> str:
        return self.runs[0].run_id

    @property
    def spec(self) -> RunSpec:
        return self.runs[0].spec


def work_units(runs: Sequence[PlannedRun], breakdown: str = "layers") -> list[WorkUnit]:
    """Group runs by input hash, in the order of each group's first run; each keeps ``breakdown``."""
    groups: dict[str, list[PlannedRun]] = {}
    for run in runs:
        groups.setdefault(run.input_hash or run.run_id, []).append(run)
    return [WorkUnit(tuple(g), breakdown) for g in groups.values()]


@functools.cache
def code_hash() -> str:
    """sha256 over the simulator's source and data files (provenance recorded with every row)."""
    root = Path(__file__).resolve().parents[1]  # the moesim package
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if not path.is_file() or path.suffix not in (".py", ".yaml", ".yml", ".proto", ".json"):
            continue
        if rel.split("/")[0] in _NOT_SIMULATION or "__pycache__" in rel:
            continue
        h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


_TOPOLOGY_HASHES: dict[int, tuple[Any, str]] = {}


def _topology_hash(topology: Any) -> str:
    """Hash of what a simulation reads of a built topology: nodes, links and GPUs (not its descriptive
    metadata); cached per built instance."""
    cached = _TOPOLOGY_HASHES.get(id(topology))
    if cached is not None and cached[0] is topology:
        return cached[1]
    text = repr((topology.nodes, topology.links, topology.gpus))
    digest = hashlib.sha256(text.encode()).hexdigest()
    _TOPOLOGY_HASHES[id(topology)] = (topology, digest)  # keeps the instance alive so its id stays unique
    return digest


def _simulated_fields(spec: Any) -> dict[str, Any]:
    """A spec's fields as data without the descriptive ones (``compare=False``: notes, sources)."""
    data = dataclasses.asdict(spec)
    for f in dataclasses.fields(spec):
        if not f.compare:
            del data[f.name]
    return data


KEYED_WHEN_SET: dict[str, dict[str, Any]] = {
    "model": {"mtp_layers": 0},
    "workload_options": {"phase": "prefill", "batch": None, "context_tokens": None, "decode_steps": None,
                         "overlap": "none", "micro_batches": None, "expert_dtype": None, "dense_dtype": None,
                         "attention_dtype": None, "kv_dtype": None, "dispatch_dtype": None, "combine_dtype": None,
                         "mtp_draft_tokens": None, "mtp_acceptance": None, "compute_model": "roofline",
                         "prompt_lengths": None, "prompt_counts": None,
                         "redundant_experts": 0, "eplb_groups": 1, "eplb_nodes": 1, "routing_draws": False},
    "layout": {"dp_attention": False},
    "system": {"collective_optimization": "localBWAware", "logical_dims": (), "comm_sms": 0.0, "expert_routing": (),
               "fast_forward_noise": 0.0, "astra_receives": False},
    "network": {"analytical_model": "rdma", "nic_model": "fast", "ecn_seed": 1, "fluid_drain_step_s": 0.0},
}
"""Parameters whose default is the simulation without them (prefill, no micro-batch overlap, the study's
precision model, the [TP, EP] dimensions, no GPU share for communication, no per-server all-to-all, no
noisy-period fast-forward, moesim's receives, the RDMA analytical model, moesim's NIC bookkeeping, the first ECN
stream, exact fluid drains, no redundant experts, expected rather than drawn routing): left out of the key at
that default, so existing stores keep their keys."""


def _keyed(section: str, data: dict[str, Any]) -> dict[str, Any]:
    neutral = KEYED_WHEN_SET[section]
    return {k: v for k, v in data.items() if not (k in neutral and v == neutral[k])}


ROUTING_FIELDS = ("routing", "routing_zipf_exponent", "routing_hot_fraction", "routing_hot_share", "routing_table",
                  "routing_seed", "expert_placement", "expert_slots")


def _workload_options(options: Any) -> dict[str, Any]:
    """The workload options as data: decode knobs only in decode; MTP's acceptance never (it does not change
    the step's cost, only its tokens, ``mtp.py``); routing fields only for skewed routing
    (uniform, Zipf 0 included, keeps its key), with a routing table or placement file keyed by its contents."""
    data = _keyed("workload_options", dataclasses.asdict(options))
    data.pop("mtp_acceptance", None)  # only the result's tokens per step reads it, not the simulation
    if not options.per_expert:
        for name in ROUTING_FIELDS:
            data.pop(name, None)
    else:
        for name in ("routing_table", "expert_placement"):
            path = Path(str(data.get(name) or ""))
            if path.is_file():
                data[f"{name}_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return data


def resolved_inputs(spec: RunSpec, diagnostics: bool = False) -> dict[str, Any]:
    """Everything a run's simulation reads, as JSON-able data, and nothing that only labels it (the
    network mode's name, network sections its backend does not read, the parameters of CC algorithms it
    does not run, CC parameters when no flow carries CC): runs with equal inputs are one simulation.
    Raises MoesimError for an impossible run; never builds the workload graphs."""
    return _inputs(_prepare(spec), diagnostics)


def _prepare(spec: RunSpec) -> Any:
    from moesim.system.run import prepare

    return prepare(spec)


def _inputs(p: Any, diagnostics: bool, legacy: bool = False) -> dict[str, Any]:
    from moesim.network.params import effective_params

    # with diagnostics every counter is kept (a CNP counted on a flow without CC still shows there)
    cc_flows = diagnostics or p.cc_flows_possible()
    capabilities = p.backend_cls.capabilities
    network = _legacy_network(p.params, cc_flows) if legacy else \
        effective_params(p.params, capabilities.sections, capabilities.congestion_control, cc_flows)
    inputs: dict[str, Any] = {
        "version": __version__,
        "model": _keyed("model", _simulated_fields(p.model)),
        "layout": _keyed("layout", dataclasses.asdict(p.layout)),
        "network": _keyed("network", network),
        "topology": _topology_hash(p.topology),
        "system": _keyed("system", dataclasses.asdict(p.settings)),
        "backend": f"{p.backend_cls.__module__}.{p.backend_cls.__qualname__}",
        "tokens": p.tokens,
        "workload_options": _workload_options(p.workload_options),
        "diagnostics": diagnostics,
    }
    if not p.placement.is_contiguous():  # the default placement leaves the keys of existing stores as they were
        inputs["placement"] = list(p.placement.rank_to_gpu)
    return inputs


def _legacy_network(params: Any, cc_flows: bool) -> dict[str, Any]:
    """The network part of the key before it followed the backend and the algorithm: every section of
    every algorithm (CC-only fields dropped without CC flows)."""
    from moesim.network.params import without_cc_only

    out = {k: v for k, v in params.as_dict().items() if k not in ("name", "nic_switch_delay_s")}
    return out if cc_flows else without_cc_only(out)


def _digest(inputs: dict[str, Any]) -> str:
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def input_hash(spec: RunSpec, diagnostics: bool = False) -> str:
    """sha256 (hex) of :func:`resolved_inputs` in canonical JSON: the simulation's key."""
    return _digest(resolved_inputs(spec, diagnostics))


def run_id_of(spec: RunSpec, simulation_key: str) -> str:
    """A run's id in the store: its spec (the labels it is stored under) and its simulation's inputs."""
    return hashlib.sha256((spec.key() + "\0" + simulation_key).encode()).hexdigest()


def run_label(spec: RunSpec) -> str:
    """A short human label: ``deepseek-v4-flash/1/TP2EP16/ring_direct/ib_cc0`` (+ backend, overrides)."""
    parts = [Path(spec.model).stem if "/" in spec.model else spec.model,
             Path(spec.topology).stem if "/" in spec.topology else spec.topology,
             spec.strategy, spec.algorithm, spec.network]
    label = "/".join(parts)
    if spec.backend != RunSpec.__dataclass_fields__["backend"].default:
        label += f" [{spec.backend}]"
    if spec.overrides:
        label += " " + ",".join(f"{k}={v}" for k, v in spec.overrides)
    return label


def plan_runs(specs: Sequence[RunSpec], diagnostics: bool = False, source: str = "matrix") -> list[PlannedRun]:
    """Check every run and hash its inputs; all impossible runs are reported in one error, before any runs."""
    planned: list[PlannedRun] = []
    failures: list[tuple[RunSpec, str]] = []
    for spec in specs:
        try:
            prepared = _prepare(spec)
            key = _digest(_inputs(prepared, diagnostics))
            legacy = run_id_of(spec, _digest(_inputs(prepared, diagnostics, legacy=True)))
            planned.append(PlannedRun(spec, run_id_of(spec, key), key, legacy))
        except MoesimError as exc:
            failures.append((spec, str(exc)))
    if failures:
        by_message = Counter(msg for _, msg in failures)
        examples = []
        for msg, count in by_message.most_common(3):
            first = next(s for s, m in failures if m == msg)
            examples.append(f"{run_label(first)}: {msg}" + (f" (and {count - 1} more like it)" if count > 1 else ""))
        more = len(by_message) - len(examples)
        raise MoesimError(
            f"{source}: {len(failures)} of {len(specs)} runs are impossible combinations, nothing was run; "
            + "; ".join(examples) + (f"; {more} other problems" if more > 0 else "")
            + " (change the levels or add an exclude entry)"
        )
    return planned


def check_matrix(matrix: Any) -> int:
    """The number of runs of ``matrix`` (a ``moesim.experiments.matrix.Matrix``), counted from its levels,
    after the checks that need no build: every level was validated when the matrix was read; here each
    (topology, strategy) pair that occurs is checked for TP × EP against the topology's GPU count (read
    from its spec) and each (model, strategy) pair for EP dividing the routed experts. Impossible pairs
    are reported in one error with the number of runs they take, as ``plan_runs`` does. What only a
    built run shows (a topology whose GPUs cannot reach each other) is reported when the sweep starts."""
    from moesim.models.catalog import get_model
    from moesim.topology.catalog import topology_gpu_count
    from moesim.workload.layout import ParallelLayout

    total = matrix.count_runs()
    bad: list[dict[str, list[Any]]] = []
    problems: list[str] = []
    checks = [("topology", lambda t, lay: lay.validate(num_ranks=topology_gpu_count(t))),
              ("model", lambda m, lay: lay.validate(routed_experts=get_model(m).routed_experts))]
    if any("redundant_experts" in dict(block) for block in (matrix.factors, *matrix.include)):
        checks = checks[:1]  # replicas change which EP sizes fit: each run's preparation checks them
    for factor, check in checks:
        for level, strategy in matrix.level_pairs(factor, "strategy"):
            try:
                check(level, ParallelLayout.parse(strategy))
            except MoesimError as exc:
                bad.append({factor: [level], "strategy": [strategy]})
                problems.append(f"{factor} {level}, {exc}")
    if bad:
        impossible = total - matrix.count_runs(bad)
        shown = "; ".join(problems[:3]) + (f"; {len(problems) - 3} other problems" if len(problems) > 3 else "")
        raise MoesimError(f"{matrix.source}: {impossible} of {total} runs are impossible combinations, nothing was "
                          f"run; {shown} (change the levels or add an exclude entry)")
    return total
