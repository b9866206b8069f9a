"""`moesim run`: simulate one configuration and print a summary or one JSON object."""

from __future__ import annotations

import json
import statistics
from typing import Any

import typer

from moesim.commands import completion as complete
from moesim.errors import MoesimError
from moesim.schema import default_of
from moesim.system.spec import RunSpec, algorithm_help

DEFAULT_JITTER_S = 1e-8
"""Start jitter of ``--seeds`` (10 ns); moesim.analysis.seeds.DEFAULT_JITTER_S, without importing it here."""


def normal_strategy(strategy: str) -> str:
    """A strategy as every output spells it (``tp2ep16`` → ``TP2EP16``); a malformed one is a one-line error."""
    from moesim.workload.layout import ParallelLayout

    return ParallelLayout.parse(strategy).name


def parse_set(items: list[str] | None) -> tuple[tuple[str, Any], ...]:
    """``--set key=value`` pairs; values are parsed as JSON when possible (numbers, booleans). A key given
    twice is a one-line error (which value was meant is not for moesim to guess)."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise MoesimError(f"--set '{item}': expected key=value")
        key, raw = item.split("=", 1)
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        if key.strip() in out:
            raise MoesimError(f"--set {key.strip()}: given twice ({out[key.strip()]!r} and {value!r}); give it once")
        out[key.strip()] = value
    return tuple(sorted(out.items()))


MAX_SEEDS = 1000
"""The most start-jitter seeds of ``--seeds`` (each is a whole run)."""


def check_seeds(seeds: int, jitter_s: float | None) -> float:
    """``--seeds N --jitter S``: N within MAX_SEEDS, S a valid ``start_jitter_s`` and only with seeds;
    returns the jitter to use (the default when not given)."""
    from moesim.system.run import check_override

    if seeds > MAX_SEEDS:
        raise MoesimError(f"--seeds: {seeds} runs is too many (allowed: 0..{MAX_SEEDS})")
    if jitter_s is None:
        return DEFAULT_JITTER_S
    if not seeds:
        raise MoesimError("--jitter: is the start jitter of --seeds; give --seeds N with it")
    return float(check_override("start_jitter_s", jitter_s, "--jitter"))


def with_flags(overrides: tuple[tuple[str, Any], ...], **flags: Any) -> tuple[tuple[str, Any], ...]:
    """``overrides`` plus the convenience flags that were given (``--phase`` → ``phase``, ...); a
    parameter given both ways is a one-line error."""
    out = dict(overrides)
    for name, value in flags.items():
        if value is None:
            continue
        if name in out:
            raise MoesimError(f"--set {name}: also given by its own flag; give it once")
        out[name] = value
    return tuple(sorted(out.items()))


ALGORITHM_HELP = algorithm_help()
"""``--algorithm``: the combinations of moesim.system.spec.ALGORITHMS; the default is RunSpec's."""
NETWORK_HELP = "network mode (docs/network.md; an unknown name, or tab completion, lists them)"
BACKEND_HELP = "network backend (moesim plugins backends lists them, each with what it models)"
"""``--network``, ``--backend``: their names live in registries of moesim.network, which ``moesim run -h``
does not import (it loads the simulator); a run checks the name against them and lists the allowed ones."""

PLACEMENT_HELP = ("rank → GPU: contiguous (default), ep-within-server, round-robin-nic, a comma-separated GPU "
                  "list or a YAML/JSON file (docs/topology.md, Placement)")


def seeded(spec: Any, seed: int, jitter_s: float) -> Any:
    """``spec`` with its ranks started at seeded uniform draws in [0, jitter_s) (seed ≥ 1)."""
    import dataclasses

    over = dict(spec.overrides)
    over.update(jitter_seed=seed, start_jitter_s=jitter_s)
    return dataclasses.replace(spec, overrides=tuple(sorted(over.items())))


def _print_seeds(spec: Any, results: list[Any], jitter_s: float, as_json: bool, caveat: str | None) -> None:
    from moesim.analysis.seeds import SPREAD_FLAG, spread

    stats = {m: spread([getattr(r, m) for r in results]) for m in ("wall_s", "gpu_s", "comm_s", "exposed_comm_s")}
    if as_json:
        record: dict[str, Any] = {"seeds": list(range(1, len(results) + 1)), "start_jitter_s": jitter_s,
                                  "results": [r.summary() for r in results], **stats}
        if caveat:
            record["caveat"] = caveat
        typer.echo(json.dumps(record, sort_keys=True))
        return
    typer.echo(f"{spec.model}  topology {spec.topology}  {spec.strategy}  {spec.algorithm}  {spec.network}  "
               f"({len(results)} seeds of {jitter_s * 1e9:g} ns start jitter, backend {spec.backend})")
    for seed, r in enumerate(results, 1):
        typer.echo(f"  seed {seed}: wall {r.wall_s:.6f} s   GPU {r.gpu_s:.6f} s   comm {r.comm_s:.6f} s")
    w = stats["wall_s"]
    flag = f"  (more than {100 * SPREAD_FLAG:.0f} %: this result hangs on nanoseconds)" \
        if w["spread"] > SPREAD_FLAG else ""
    typer.echo(f"  wall median {w['median']:.6f} s, min {w['min']:.6f} s, max {w['max']:.6f} s, "
               f"spread {100 * w['spread']:.2f} %{flag}")
    if caveat:
        typer.echo(f"  {caveat}")


def _print_ensemble(spec: Any, results: list[Any], as_json: bool, caveat: str | None) -> None:
    """Each member's wall time, then median, min, max and whether the members fall into separate clusters."""
    from moesim.analysis.ensemble import CLUSTER_GAP, CLUSTER_SPACING, spread
    from moesim.system.ensemble import member

    s = spread([r.wall_s for r in results])
    if as_json:
        record: dict[str, Any] = {
            "members": [{"member": k, "perturbation": member(k).overrides(True), **r.summary()}
                        for k, r in enumerate(results)],
            "wall_median_s": s.median, "wall_min_s": s.min, "wall_max_s": s.max, "wall_spread": s.spread,
            "clusters": [list(c) for c in s.clusters], "bistable": s.bistable}
        if caveat:
            record["caveat"] = caveat
        typer.echo(json.dumps(record, sort_keys=True))
        return
    typer.echo(f"{spec.model}  topology {spec.topology}  {spec.strategy}  {spec.algorithm}  {spec.network}  "
               f"(ensemble of {len(results)}, backend {spec.backend})")
    for k, r in enumerate(results):
        typer.echo(f"  {member(k).describe()}: wall {r.wall_s:.6f} s")
    typer.echo(f"  wall median {s.median:.6f} s, min {s.min:.6f} s, max {s.max:.6f} s, spread {100 * s.spread:.2f} %")
    if s.bistable:
        parts = [f"member{'s' if len(c) > 1 else ''} {', '.join(map(str, c))} near "
                 f"{statistics.median(results[i].wall_s for i in c):.6f} s" for c in s.clusters]
        typer.echo(f"  bistable: the members fall into {len(s.clusters)} separate clusters (gaps over "
                   f"{100 * CLUSTER_GAP:.0f} % of the median and {CLUSTER_SPACING:g}x the usual spacing): "
                   + "; ".join(parts))
    else:
        typer.echo("  one cluster: the answer does not hang on start skew, packet size or ECN draws")
    if caveat:
        typer.echo(f"  {caveat}")


def register(app: typer.Typer) -> None:
    """Add ``moesim run``."""

    @app.command("run")
    def run(
        model: str = typer.Option(..., "--model", help="model key (moesim models list) or a YAML/config.json path",
                                  autocompletion=complete.models),
        topology: str = typer.Option(..., "--topology", help="study topology 1..6, a server template (hgx-h100:4, mi300x:4:ls3, gb200-nvl72) or a topology YAML path",
                                     autocompletion=complete.topologies),
        strategy: str = typer.Option(..., "--strategy", help="TP<n>EP<m>, e.g. TP2EP16"),
        algorithm: str = typer.Option(default_of(RunSpec, "algorithm"), "--algorithm", help=ALGORITHM_HELP),
        network: str = typer.Option(default_of(RunSpec, "network"), "--network", help=NETWORK_HELP,
                                    autocompletion=complete.networks),
        backend: str = typer.Option(default_of(RunSpec, "backend"), "--backend", help=BACKEND_HELP,
                                    autocompletion=complete.backends),
        set_: list[str] = typer.Option(None, "--set", help="parameter override key=value (repeatable)",
                                       autocompletion=complete.set_keys),
        placement: str = typer.Option(None, "--placement", help=PLACEMENT_HELP),
        seeds: int = typer.Option(0, "--seeds", min=0, help="run N times with start-jitter seeds 1..N and print "
                                                           "the spread (0: one deterministic run)"),
        ensemble: int = typer.Option(0, "--ensemble", min=0, help="run K ensemble members (member 0 as given, then "
                                                               "start skew, packet size and ECN stream varied; "
                                                               "docs/system.md) and print the spread"),
        jitter_s: float = typer.Option(None, "--jitter", help=f"start jitter of --seeds, in seconds (default "
                                                             f"{DEFAULT_JITTER_S:g})"),
        phase: str = typer.Option(None, "--phase", help="prefill (default) | decode (= --set phase=...)"),
        batch: int = typer.Option(None, "--batch", help="decode: sequences per step (= --set batch=N)"),
        context: int = typer.Option(None, "--context", help="decode: KV-cache tokens at the first step "
                                                             "(= --set context_tokens=N)"),
        steps: int = typer.Option(None, "--steps", help="decode: steps (= --set decode_steps=N)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
        progress: str = typer.Option("auto", "--progress",
                                     help="auto (a live line on a terminal, periodic lines otherwise) | bar | "
                                          "periodic | plain | none; on stderr"),
        trace: str | None = typer.Option(None, "--trace", help="also write the run as a Chrome trace JSON file "
                                                              "(Perfetto, chrome://tracing)"),
        trace_links: bool = typer.Option(False, "--trace-links", help="with --trace: add each rank's send rate "
                                                                      "as a counter"),
    ) -> None:
        """Simulate one configuration (one deterministic prefill pass, or decode steps with --phase decode)."""
        from moesim.experiments.inputs import run_label
        from moesim.experiments.progress import run_progress
        from moesim.fileio import output_file
        from moesim.network.base import congestion_control_backends, models_congestion_control
        from moesim.network.params import network_mode
        from moesim.system.run import simulate_run
        from moesim.system.spec import RunSpec

        if seeds and ensemble:
            raise typer.BadParameter("members vary the start skew themselves; give --seeds or --ensemble",
                                     param_hint="--ensemble")
        if trace is not None:
            if seeds or ensemble:
                raise typer.BadParameter("goes with one run, not --seeds or --ensemble", param_hint="--trace")
            if trace == "-":
                raise MoesimError("--trace -: name a file (the trace is JSON, often large)")
            output_file(trace, "--trace")
        elif trace_links:
            raise typer.BadParameter("goes with --trace FILE", param_hint="--trace-links")
        jitter_s = check_seeds(seeds, jitter_s)
        display = run_progress(progress)
        overrides = with_flags(parse_set(set_), phase=phase, batch=batch, context_tokens=context, decode_steps=steps,
                               placement=placement)
        spec = RunSpec(model, topology, normal_strategy(strategy), algorithm, network, backend, overrides)
        caveat = None
        if network_mode(network).cc_algorithm.controls_rate and not models_congestion_control(backend):
            caveat = (f"note: the {backend} backend does not model congestion control: {network} differs from "
                      f"other modes here only in delays and header bytes (use --backend "
                      f"{' or '.join(congestion_control_backends())} to compare network modes)")
        if ensemble:
            from moesim.system.ensemble import members

            results = []
            for k, s in enumerate(members(spec, ensemble)):
                with display.run(f"member {k}/{ensemble - 1}") as tick:
                    results.append(simulate_run(s, progress=tick))
            _print_ensemble(spec, results, as_json, caveat)
            return
        if seeds:
            specs = [seeded(spec, seed, jitter_s) for seed in range(1, seeds + 1)]
            results = []
            for seed, s in enumerate(specs, 1):
                with display.run(f"seed {seed}/{seeds}") as tick:
                    results.append(simulate_run(s, progress=tick))
            _print_seeds(spec, results, jitter_s, as_json, caveat)
            return
        with display.run(run_label(spec)) as tick:
            if trace is None:
                result = simulate_run(spec, progress=tick)
            else:
                from moesim.system.run import prepare, result_of, simulate_prepared
                from moesim.system.trace import write_chrome_trace

                prepared = prepare(spec)
                simulated = simulate_prepared(prepared, progress=tick, detail=True)
                result = result_of(prepared, simulated)
        if trace is not None and simulated.breakdown is not None:
            write_chrome_trace(trace, result, simulated.breakdown, links=trace_links)
        record = result.summary()
        if as_json:
            if caveat:
                record["caveat"] = caveat
            typer.echo(json.dumps(record, sort_keys=True))
            return
        typer.echo(f"{model}  topology {topology}  {spec.strategy}  {algorithm}  {network}"
                   + ("  " + " ".join(f"{k}={v}" for k, v in spec.overrides) if spec.overrides else ""))
        hidden = max(result.comm_s - result.exposed_comm_s, 0.0)
        typer.echo(f"  wall {result.wall_s:.6f} s   GPU {result.gpu_s:.6f} s   comm {result.comm_s:.6f} s"
                   f" (exposed {result.exposed_comm_s:.6f} s, hidden {hidden:.6f} s)"
                   f"   (bottleneck rank {result.bottleneck_rank})")
        if "step_s" in record:
            typer.echo(f"  decode: {record['step_s'] * 1e3:.6f} ms per step   {record['tokens_per_s']:.1f} tokens/s")
        if "ep_imbalance" in record:
            rule = result.spec.override_dict().get("expert_placement", "contiguous")
            after = "" if rule == "contiguous" else f" (after {rule}: {record['ep_imbalance']:.4f})"
            typer.echo(f"  EP imbalance max/mean tokens per rank: {record['ep_imbalance_before']:.4f}{after}")
        typer.echo(f"  backend {result.backend}; congestion control: {result.cc_model}; policy: {result.cc_policy}")
        typer.echo(f"  simulated in {result.sim_wallclock_s:.2f} s (moesim {result.version})")
        if trace is not None:
            typer.echo(f"  trace: {trace} (open in https://ui.perfetto.dev or chrome://tracing)")
        if caveat:
            typer.echo(f"  {caveat}")

    @app.command("export")
    def export(
        model: str = typer.Option(..., "--model"),
        topology: str = typer.Option(..., "--topology", help="study topology 1..6, a server template (hgx-h100:4, mi300x:4:ls3, gb200-nvl72) or a topology YAML path"),
        strategy: str = typer.Option(..., "--strategy"),
        algorithm: str = typer.Option(default_of(RunSpec, "algorithm"), "--algorithm", help=ALGORITHM_HELP),
        network: str = typer.Option(default_of(RunSpec, "network"), "--network", help=NETWORK_HELP),
        set_: list[str] = typer.Option(None, "--set", help="parameter override key=value (repeatable)"),
        placement: str = typer.Option(None, "--placement", help=PLACEMENT_HELP),
        out: str = typer.Option(..., "--out", help="output directory"),
    ) -> None:
        """Write one run as an ASTRA-sim 2.0 input directory (ET files, system/network configs, README)."""
        from moesim.fileio import check_output_folder
        from moesim.system.export import export_run
        from moesim.system.spec import RunSpec

        spec = RunSpec(model, topology, normal_strategy(strategy), algorithm, network, "flow",
                       with_flags(parse_set(set_), placement=placement))
        check_output_folder(out)
        files = export_run(spec, out)
        typer.echo(f"wrote {len(files)} files to {out} (see {out}/README.md for the ASTRA-sim command)")
