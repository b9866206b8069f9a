"""The Python API: one run, a sweep, a results store as a pandas DataFrame, topology and model loaders.

    import moesim

    out = moesim.run(model="deepseek-v4-flash", topology="1", strategy="TP2EP16", tokens=2048)
    out.wall_s, out.to_dict(), out.ranks                  # per-rank figures as a DataFrame
    out = moesim.run(..., layers=True); out.layers        # per-rank, per-layer intervals (no fast-forward)
    out.breakdown; out.to_chrome_trace("run.json")        # per rank, layer and kind; a Perfetto timeline
    summary = moesim.sweep("matrix.yaml", out="results/mine")
    df = moesim.load_results("results/mine")
    served = moesim.serve("deepseek-v4-flash", "hgx-h100:4", "TP4EP8", rate=20, slo_ttft="1s", slo_tpot="50ms")
    served.requests, served.summary                       # per request; the aggregates (DataFrames)

Every name here is also an attribute of ``moesim`` (loaded on first use). The command line and this API
run the same code (``moesim.system.run``, ``moesim.experiments``); see docs/api.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moesim.errors import MoesimError
from moesim.schema import default_of
from moesim.serving.config import DEFAULT_OUTPUT, DEFAULT_PROMPT, SchedulerConfig
from moesim.system.spec import RunSpec

if TYPE_CHECKING:
    import pandas as pd

    from moesim.experiments.matrix import Matrix
    from moesim.experiments.placement_search import SearchResult
    from moesim.experiments.runner import SweepSummary
    from moesim.models.spec import ModelSpec
    from moesim.serving import ServeResult
    from moesim.system.breakdown import Breakdown
    from moesim.system.run import NodeTime
    from moesim.system.spec import RunResult
    from moesim.topology.model import Topology

ALGORITHM, NETWORK, BACKEND = (default_of(RunSpec, name) for name in ("algorithm", "network", "backend"))
"""A run's defaults, declared once by ``RunSpec``."""
SCHED = {name: default_of(SchedulerConfig, name) for name in SchedulerConfig.__dataclass_fields__}
"""The scheduler's defaults, declared once by ``SchedulerConfig``."""

__all__ = ["RunOutput", "ServeOutput", "load_model", "load_results", "load_topology", "place", "run", "serve",
           "serve_search", "sweep"]


def _pandas() -> Any:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - a dependency; only a broken install lacks it
        raise MoesimError("the Python API's tables need pandas (pip install pandas)") from None
    return pd


@dataclass(frozen=True)
class RunOutput:
    """The outcome of ``moesim.run``: the run's figures (those of its bottleneck rank) and its tables."""

    result: RunResult
    """The library's record of the run (``moesim.system.spec.RunResult``)."""
    timeline: tuple[NodeTime, ...] = ()
    """Every node's interval, when the run was made with ``layers=True``."""
    recording: Breakdown | None = None
    """What the breakdown recorder saw (every node, chunk and flow; ``moesim.system.breakdown``)."""

    @property
    def spec(self) -> RunSpec:
        return self.result.spec

    @property
    def wall_s(self) -> float:
        """End-to-end time of the prefill pass (or of all decode steps): the bottleneck rank's last node end."""
        return self.result.wall_s

    @property
    def step_s(self) -> float | None:
        """A decode run's time per step (``wall_s / decode_steps``); None for a prefill."""
        return self.result.summary().get("step_s")

    @property
    def tokens_per_s(self) -> float | None:
        """A decode run's tokens per second (``batch · decode_steps / wall_s``); None for a prefill."""
        return self.result.summary().get("tokens_per_s")

    @property
    def gpu_s(self) -> float:
        return self.result.gpu_s

    @property
    def comm_s(self) -> float:
        return self.result.comm_s

    @property
    def exposed_comm_s(self) -> float:
        """Communication not hidden by compute on the bottleneck rank (wall − GPU time; docs/system.md)."""
        return self.result.exposed_comm_s

    @property
    def bottleneck_rank(self) -> int:
        return self.result.bottleneck_rank

    @property
    def backend(self) -> str:
        return self.result.backend

    def to_dict(self) -> dict[str, Any]:
        """One flat JSON-able record, the same as ``moesim run --json`` prints."""
        return self.result.summary()

    @property
    def ranks(self) -> pd.DataFrame:
        """One row per rank: ``rank, wall_s, gpu_s, comm_s, exposed_comm_s, bottleneck`` (ASTRA-sim's
        per-rank figures and the communication not hidden by compute)."""
        pd = _pandas()
        rows = [{"rank": r, "wall_s": t.wall_s, "gpu_s": t.gpu_s, "comm_s": t.comm_s, "exposed_comm_s": t.exposed_comm_s,
                 "bottleneck": r == self.result.bottleneck_rank} for r, t in enumerate(self.result.ranks)]
        return pd.DataFrame(rows, columns=["rank", "wall_s", "gpu_s", "comm_s", "exposed_comm_s", "bottleneck"])

    @property
    def nodes(self) -> pd.DataFrame:
        """One row per executed node: ``rank, node_id, name, layer, kind, start_s, end_s, duration_s``
        (``layers=True`` only)."""
        self._need_timeline("nodes")
        pd = _pandas()
        df = pd.DataFrame([t.__dict__ for t in self.timeline],
                          columns=["rank", "node_id", "name", "layer", "kind", "start_s", "end_s"])
        df["duration_s"] = df["end_s"] - df["start_s"]
        return df

    @property
    def layers(self) -> pd.DataFrame:
        """One row per rank and model layer: ``rank, layer, start_s, end_s, duration_s`` (first node start to last
        node end), ``compute_s`` and ``comm_s`` (summed node durations by kind), ``nodes`` (``layers=True`` only)."""
        self._need_timeline("layers")
        nodes = self.nodes
        nodes = nodes[nodes["layer"] >= 0].assign(
            compute_s=lambda d: d["duration_s"].where(d["kind"] == "compute", 0.0),
            comm_s=lambda d: d["duration_s"].where(d["kind"] != "compute", 0.0))
        out = nodes.groupby(["rank", "layer"], as_index=False).agg(
            start_s=("start_s", "min"), end_s=("end_s", "max"), compute_s=("compute_s", "sum"),
            comm_s=("comm_s", "sum"), nodes=("node_id", "count"))
        out.insert(4, "duration_s", out["end_s"] - out["start_s"])
        return out

    def breakdown(self, level: str = "layers") -> pd.DataFrame:
        """The run's breakdown (docs/system.md): ``level="layers"`` one row per rank, layer and kind (``rank, layer,
        kind, nodes, size_bytes, start_s, end_s, busy_s, wait_s, copied``), ``"nodes"`` one row per node. Layer
        fast-forward stays on; the layers it jumps over are copied from the layer before (``copied``)."""
        if level not in ("layers", "nodes"):
            raise MoesimError(f"RunOutput.breakdown: unknown level '{level}' (allowed: layers, nodes)")
        return self._recording("breakdown").table(level).to_pandas()

    def to_chrome_trace(self, path: str | Path, *, links: bool = False, max_events: int | None = None) -> Path:
        """Write the run as a Chrome trace JSON file (Perfetto, chrome://tracing), as ``moesim run --trace``:
        a process per rank; ``links`` adds each rank's send rate as a counter; at most ``max_events`` events
        (default ``moesim.system.trace.MAX_EVENTS``). Returns ``path``."""
        from moesim.system.trace import MAX_EVENTS, write_chrome_trace

        return write_chrome_trace(path, self.result, self._recording("to_chrome_trace"), links,
                                  MAX_EVENTS if max_events is None else max_events)

    def _recording(self, what: str) -> Breakdown:
        if self.recording is None:
            raise MoesimError(f"RunOutput.{what}: this output has no recording (build it with moesim.run)")
        return self.recording

    def _need_timeline(self, what: str) -> None:
        if not self.timeline:
            raise MoesimError(f"RunOutput.{what}: run with layers=True to record every node's interval "
                              "(it turns the engine's layer fast-forward off, so the run is slower)")

    def __repr__(self) -> str:
        s = self.spec
        return (f"RunOutput({s.model} topology {s.topology} {s.strategy} {s.algorithm} {s.network} "
                f"[{self.backend}]: wall {self.wall_s:.6f} s, GPU {self.gpu_s:.6f} s, comm {self.comm_s:.6f} s, "
                f"exposed comm {self.exposed_comm_s:.6f} s)")


def _strategy(strategy: str) -> str:
    from moesim.workload.layout import ParallelLayout

    return ParallelLayout.parse(strategy).name


def run(model: str | Path, topology: str | int | Path, strategy: str, algorithm: str = ALGORITHM,
        network: str = NETWORK, backend: str = BACKEND, *, layers: bool = False, diagnostics: bool = False,
        progress: Callable[[float, int, int], None] | None = None, trace: str | Path | None = None,
        **overrides: Any) -> RunOutput:
    """Simulate one configuration, as ``moesim run`` does.

    ``model``: a catalog key (``moesim models list``), a model YAML or a Hugging Face config.json;
    ``topology``: 1..6 or a topology YAML; ``strategy``: ``TP<n>EP<m>``; ``overrides``: any parameter of
    ``moesim run --set`` (``tokens=2048``, ``fabric_bandwidth_bps=800e9``, ...). ``layers=True`` records every
    node's interval (``.layers``, ``.nodes``). ``progress(simulated_s, layers_done, layers_total)`` is called
    as the simulation advances. ``trace``: also write the run as a Chrome trace to this path
    (``RunOutput.to_chrome_trace``). Every run records its breakdown (``.breakdown()``).
    """
    from moesim.system.run import prepare, result_of, simulate_prepared

    spec = RunSpec(str(model), str(topology), _strategy(strategy), algorithm, network, backend,
                   tuple(sorted(overrides.items())))
    if trace is not None:
        from moesim.fileio import output_file

        output_file(trace, "trace")
    prepared = prepare(spec)
    simulated = simulate_prepared(prepared, diagnostics=diagnostics, progress=progress, timeline=layers, detail=True)
    out = RunOutput(result_of(prepared, simulated), simulated.timeline, simulated.breakdown)
    if trace is not None:
        out.to_chrome_trace(trace)
    return out


def place(model: str | Path, topology: str | int | Path, strategy: str, algorithm: str = ALGORITHM,
          network: str = NETWORK, backend: str = "flow", *, evaluations: int = 64, time_s: float | None = None,
          seed: int = 0, rescore: str | None = BACKEND, top: int = 3, workers: int | None = 1,
          executor: str = "local", address: str | None = None, **overrides: Any) -> SearchResult:
    """Search rank → GPU mappings, as ``moesim place`` does (docs/experiments.md, "Placement search").

    Returns a ``SearchResult``: ``.default`` and ``.best`` (``.rank_to_gpu``, ``.wall_s``, ``.inline``),
    ``.gain``, ``.rescored``, and the traffic of both (``.traffic_best.nic_bytes()``). ``rescore``: the
    backend that re-scores the best few, or ``None`` / ``"none"`` for no re-scoring (checked before the
    search). ``workers=1`` simulates in this process; more use the sweep executors.
    """
    from moesim.experiments.placement_search import SearchSpec, search_placement

    spec = RunSpec(str(model), str(topology), _strategy(strategy), algorithm, network, backend,
                   tuple(sorted(overrides.items())))
    search = SearchSpec(spec, evaluations=evaluations, time_s=time_s, seed=seed,
                        rescore_backend=None if rescore == "none" else rescore, rescore_top=top)
    return search_placement(search, executor=executor, workers=workers, address=address)


def _matrix(what: Any) -> Matrix | None:
    """``what`` as a matrix if it is one: a ``Matrix``, ``"study"`` or the path of a matrix YAML."""
    from moesim.experiments.matrix import Matrix, load_matrix, study_matrix

    if isinstance(what, Matrix):
        return what
    if isinstance(what, str) and what == "study":
        return study_matrix()
    if isinstance(what, str | Path):
        return load_matrix(what)
    return None


def _runs(items: Iterable[Any]) -> list[RunSpec]:
    """RunSpecs from RunSpecs or dicts (keys other than the RunSpec fields are parameter overrides)."""
    fields = ("model", "topology", "strategy", "algorithm", "network", "backend")
    specs = []
    for item in items:
        if isinstance(item, RunSpec):
            specs.append(item)
            continue
        if not isinstance(item, dict):
            raise MoesimError("moesim.sweep: expected a Matrix, a matrix file, 'study' or an iterable of runs "
                              f"(RunSpec or dict), got an item of type {type(item).__name__}")
        missing = [f for f in fields[:3] if f not in item]
        if missing:
            raise MoesimError(f"moesim.sweep: run {item!r}: missing {', '.join(missing)}")
        given = {k: str(item[k]) for k in fields if k in item}
        given["strategy"] = _strategy(given["strategy"])
        overrides = tuple(sorted((k, v) for k, v in item.items() if k not in fields))
        specs.append(RunSpec(**given, overrides=overrides))
    return specs


def sweep(matrix_or_specs: Matrix | str | Path | Iterable[RunSpec | dict[str, Any]], out: str | Path, *,
          preset: str | None = None, executor: str = "local", workers: int | None = None,
          address: str | None = None, diagnostics: bool = False, progress: str = "none", rerun: bool = False,
          max_retries: int = 3, breakdown: str = "layers") -> SweepSummary:
    """Run a sweep into the results store ``out`` (resumable), as ``moesim sweep`` does.

    ``matrix_or_specs``: a ``Matrix``, the path of a matrix YAML, ``"study"`` (the built-in study), or an
    iterable of ``RunSpec`` or dicts (``{"model": ..., "topology": ..., "strategy": ..., "tokens": 2048}``:
    keys other than the RunSpec fields are parameter overrides). ``preset`` applies to a matrix.
    From a script, call it under ``if __name__ == "__main__":`` (the local pool starts its workers with spawn).
    ``breakdown`` is how much of each run's breakdown the store keeps: ``layers``, ``nodes`` or ``none``.
    Returns the summary (``.lines()`` prints as the command does); ``load_results(out)`` reads the store.
    """
    from moesim.experiments.runner import run_sweep

    matrix = _matrix(matrix_or_specs)
    if preset is not None:
        if matrix is None:
            raise MoesimError("moesim.sweep: preset= needs a matrix (a Matrix, a matrix file or 'study')")
        matrix = matrix.with_preset(preset)
    if matrix is not None:
        specs, source, diagnostics = matrix.runs(), matrix.source, diagnostics or matrix.diagnostics
    else:
        specs, source = _runs(matrix_or_specs), "moesim.sweep"  # type: ignore[arg-type]
    return run_sweep(specs, out, executor=executor, workers=workers, address=address, diagnostics=diagnostics,
                     progress=progress, max_retries=max_retries, source=source, rerun=rerun, breakdown=breakdown)


def load_results(directory: str | Path, *, include_failed: bool = False) -> pd.DataFrame:
    """The results of ``directory`` (``results.duckdb`` or ``runs.parquet``) as a DataFrame, one row per run.

    By default the successful runs, ordered by the factors (what ``moesim report`` analyses);
    ``include_failed=True`` gives every stored row and column. The run factors (model, topology, strategy,
    algorithm, network, backend) are text, the figures floats, and a parameter a sweep varied (``tokens``,
    ``buffer_bytes``, ...) has its own type: pandas' nullable ``Int64``, ``Float64`` or ``boolean``, with
    ``<NA>`` in the runs that left it at its default.
    """
    from moesim.analysis.results import load_results as load_table

    return _typed_parameters(load_table(directory, include_failed=include_failed).to_pandas())


def _typed_parameters(df: pd.DataFrame) -> pd.DataFrame:
    """The parameter columns of a results table (stored as text, e.g. ``"2048"``) in their declared type."""
    from moesim.analysis.results import DEFAULT_LEVEL
    from moesim.system.run import OVERRIDES

    pd = _pandas()
    dtypes = {int: "Int64", float: "Float64", bool: "boolean"}
    for name in df.columns:
        param = OVERRIDES.get(name)
        if param is None or param.is_list or param.item not in dtypes or param.allowed.choices:
            continue
        text = df[name].astype("string").where(~df[name].isin([DEFAULT_LEVEL, "none"]))
        if param.item is bool:
            df[name] = text.map({"true": True, "false": False}, na_action="ignore").astype("boolean")
        else:
            df[name] = pd.to_numeric(text).astype(dtypes[param.item])
    return df


def load_topology(name_or_path: str | int | Path, network: str = NETWORK) -> Topology:
    """A built-in topology (1..6) or a topology YAML, built with ``network``'s NIC–switch delay."""
    from moesim.network.params import network_mode
    from moesim.topology.catalog import get_topology

    return get_topology(str(name_or_path), network_mode(network).transport.nic_switch_delay_s)


def load_model(key_or_path: str | Path) -> ModelSpec:
    """A catalog model (``moesim models list``), a model YAML or a Hugging Face config.json."""
    from moesim.models.catalog import get_model

    return get_model(str(key_or_path))


@dataclass(frozen=True)
class ServeOutput:
    """The outcome of ``moesim.serve``: one row per request, the aggregates, and how the step costs were got."""

    result: ServeResult
    """The library's record (``moesim.serving.ServeResult``)."""

    @property
    def requests(self) -> pd.DataFrame:
        """One row per request: ``request, arrival_s, prompt_tokens, output_tokens, replica, decode_replica,
        scheduled_s, first_token_s, finish_s, kv_sent_s, kv_transfer_s, ttft_s, tpot_s, e2e_s, slo_met``."""
        return self.result.table.to_pandas()

    @property
    def summary(self) -> pd.DataFrame:
        """One row: throughput, goodput, SLO attainment, TTFT/TPOT/E2E mean and percentiles, Little's law."""
        pd = _pandas()
        return pd.DataFrame([{k: v for k, v in self.result.summary.items() if not isinstance(v, list)}])

    @property
    def interpolation(self) -> pd.DataFrame:
        """The grid cells checked against a simulation: interpolated and simulated step times, relative error."""
        pd = _pandas()
        return pd.DataFrame(self.result.interpolation, columns=["strategy", "topology", "phase", "tokens_or_batch",
                                                                "context_tokens", "simulated_s", "interpolated_s",
                                                                "error"])

    def to_dict(self) -> dict[str, Any]:
        """One flat JSON-able record, the same as ``moesim serve --json`` prints."""
        return self.result.record()


def _serving_inputs(model: str | Path, topology: str | int | Path, strategy: str, algorithm: str, network: str,
                    backend: str, overrides: dict[str, Any], serving: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(deployment, scheduler, SLO) of ``serve``'s keyword arguments (``serving`` holds the serving ones)."""
    from moesim.serving import Deployment, SchedulerConfig, Slo, parse_duration_s

    template = RunSpec(str(model), str(topology), _strategy(strategy), algorithm, network, backend,
                       tuple(sorted(overrides.items())))
    deployment = Deployment(template, disaggregate=serving.pop("disaggregate", None),
                            prefill_strategy=serving.pop("prefill_strategy", None))
    slo = Slo(*(parse_duration_s(v, k) if v is not None else None
                for k, v in (("slo_ttft", serving.pop("slo_ttft", None)), ("slo_tpot", serving.pop("slo_tpot", None)))))
    names = {f for f in SchedulerConfig.__dataclass_fields__}
    config = SchedulerConfig(**{k: serving.pop(k) for k in list(serving) if k in names})
    return deployment, config, slo


def serve(model: str | Path, topology: str | int | Path, strategy: str, algorithm: str = ALGORITHM,
          network: str = NETWORK, backend: str = BACKEND, *, trace: str | Path | None = None,
          rate: float | None = None, requests: int = 1000, prompt: str | None = None, output: str | None = None,
          seed: int = 0, arrivals: str = "poisson", disaggregate: tuple[int, int] | None = None,
          prefill_strategy: str | None = None,
          slo_ttft: str | float | None = None, slo_tpot: str | float | None = None,
          token_budget: int = SCHED["token_budget"], max_seqs: int = SCHED["max_seqs"], chunk_tokens: int | None = None,
          policy: str = SCHED["policy"], kv_tokens: int | None = None,
          gpu_memory_bytes: float = SCHED["gpu_memory_bytes"], memory_fraction: float = SCHED["memory_fraction"],
          kv_backend: str = "flow", check_points: int = 2, cache: str | Path | None = None,
          executor: str = "local", workers: int = 1, address: str | None = None, out: str | Path | None = None,
          **overrides: Any) -> ServeOutput:
    """Serve requests on a deployment, as ``moesim serve`` does (docs/serving.md).

    Requests: ``trace`` (a CSV/Parquet file) or ``rate`` requests/s (``requests`` of them, ``arrivals``
    ``poisson`` or ``gamma:CV``, lengths from ``prompt``/``output``: ``fixed:N``, ``uniform:LO:HI``,
    ``lognormal:MEDIAN:SIGMA[:MAX]``, ``trace:FILE``; ``seed``). ``disaggregate=(P, D)`` puts prefill replicas
    (``prefill_strategy``) on the first P servers and decode replicas (``strategy``) on the next D. ``slo_ttft``/``slo_tpot``: seconds or text
    (``"1s"``, ``"50ms"``). Scheduler knobs as ``moesim.serving.SchedulerConfig``; ``overrides`` are the step
    runs' parameters (as ``moesim.run``). ``out`` also stores the result (``moesim report`` shows it).
    """
    from moesim.serving import Executor, StepCache, make_requests
    from moesim.serving import serve as simulate

    serving = dict(disaggregate=disaggregate, prefill_strategy=prefill_strategy, slo_ttft=slo_ttft, slo_tpot=slo_tpot,
                   token_budget=token_budget, max_seqs=max_seqs, chunk_tokens=chunk_tokens, policy=policy,
                   kv_tokens=kv_tokens, gpu_memory_bytes=gpu_memory_bytes, memory_fraction=memory_fraction)
    deployment, config, slo = _serving_inputs(model, topology, strategy, algorithm, network, backend, overrides, serving)
    reqs = make_requests(trace, rate, requests, prompt or DEFAULT_PROMPT, output or DEFAULT_OUTPUT, seed, arrivals)
    result = simulate(deployment, reqs, config, slo, cache=StepCache(cache), executor=Executor(executor, workers, address),
                      check_points=check_points, kv_backend=kv_backend)
    if out is not None:
        from moesim.serving.store import record_serving

        record_serving(out, [(result.record(), result.table)], command="moesim.serve(...)")
    return ServeOutput(result)


def serve_search(model: str | Path, topology: str | int | Path, strategies: Iterable[str] | None = None,
                 algorithm: str = ALGORITHM, network: str = NETWORK, backend: str = BACKEND, *,
                 servers: Iterable[int] = (), modes: Iterable[str] = ("colocated", "disaggregated"),
                 ratios: Iterable[tuple[int, int]] | None = None, trace: str | Path | None = None,
                 rate: float | None = None, requests: int = 4000, prompt: str | None = None,
                 output: str | None = None, seed: int = 0, arrivals: str = "poisson",
                 slo_ttft: str | float | None = None, slo_tpot: str | float | None = None, attainment: float = 0.9, iterations: int = 6,
                 token_budget: int = SCHED["token_budget"], max_seqs: int = SCHED["max_seqs"],
                 chunk_tokens: int | None = None, policy: str = SCHED["policy"], kv_tokens: int | None = None,
                 gpu_memory_bytes: float = SCHED["gpu_memory_bytes"], memory_fraction: float = SCHED["memory_fraction"], kv_backend: str = "flow", cache: str | Path | None = None,
                 executor: str = "local", workers: int | None = None, address: str | None = None,
                 out: str | Path | None = None, **overrides: Any) -> pd.DataFrame:
    """The deployments with the most goodput per GPU under the SLO, as ``moesim serve search`` does: one row per
    candidate, best first (``mode, strategy, prefill_strategy, disaggregate, gpus, capacity_rps, goodput_rps,
    goodput_per_gpu_rps`` and the latency percentiles at that rate). ``rate`` is the first rate tried."""
    from moesim.serving import Executor, SearchSpace, StepCache, make_requests, search
    from moesim.workload.options import STUDY_STRATEGIES

    serving = dict(slo_ttft=slo_ttft, slo_tpot=slo_tpot, token_budget=token_budget, max_seqs=max_seqs,
                   chunk_tokens=chunk_tokens, policy=policy, kv_tokens=kv_tokens, gpu_memory_bytes=gpu_memory_bytes,
                   memory_fraction=memory_fraction)
    splits = tuple(_strategy(s) for s in (strategies or STUDY_STRATEGIES))
    _, config, slo = _serving_inputs(model, topology, splits[0], algorithm, network, backend, overrides, serving)
    reqs = make_requests(trace, None if trace is not None else 1.0, requests, prompt or DEFAULT_PROMPT,
                         output or DEFAULT_OUTPUT, seed, arrivals)
    space = SearchSpace(str(model), str(topology), splits, tuple(servers), tuple(modes),
                        tuple((int(p), int(d)) for p, d in ratios) if ratios is not None else None,
                        algorithm, network, backend, tuple(sorted(overrides.items())))
    result = search(space, reqs, config, slo, attainment=attainment, start_rps=rate, iterations=iterations,
                    cache=StepCache(cache), executor=Executor(executor, workers, address), kv_backend=kv_backend)
    if out is not None:
        from moesim.serving.store import record_serving

        record_serving(out, result.records(), search_id=result.search_id, command="moesim.serve_search(...)")
    rows = []
    for c in result.candidates:
        d = c.deployment
        best = dict(c.best.summary) if c.best is not None else {}
        rows.append({"mode": d.mode, "strategy": d.strategy, "prefill_strategy": d.prefill_split if d.disaggregate
                     else None, "disaggregate": d.disaggregate, "topology": d.topology, "gpus": d.num_gpus,
                     "capacity_rps": best.get("offered_rate_rps"), "goodput_rps": best.get("goodput_rps"),
                     "goodput_per_gpu_rps": c.goodput_per_gpu_rps,
                     **{k: best.get(k) for k in ("slo_attainment", "ttft_p90_s", "tpot_p90_s", "e2e_p90_s")}})
    return _pandas().DataFrame(rows)
