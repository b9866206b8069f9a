"""`moesim sweep study|run` and `moesim results`: run a matrix of simulations into a store, query it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from moesim.errors import MoesimError
from moesim.schema import default_of
from moesim.system.spec import RunSpec

sweep_app = typer.Typer(
    help="Run a matrix of simulations into DIR/results.duckdb (resumable: a rerun finishes what is missing).",
    no_args_is_help=True,
)

_FACTOR_HELP = "comma-separated levels (replace the matrix's)"
Models = Annotated[str | None, typer.Option("--models", "--model", help=f"models: {_FACTOR_HELP}")]
Topologies = Annotated[str | None, typer.Option("--topologies", "--topology", help=f"topologies: {_FACTOR_HELP}")]
Strategies = Annotated[str | None, typer.Option("--strategies", "--strategy", help=f"strategies: {_FACTOR_HELP}")]
Algorithms = Annotated[str | None, typer.Option("--algorithms", "--algorithm", help=f"algorithms: {_FACTOR_HELP}")]
Networks = Annotated[str | None, typer.Option("--networks", "--network", help=f"network modes: {_FACTOR_HELP}")]
Backends = Annotated[str | None, typer.Option(
    "--backend", "--backends", help=f"network backends (default fluid; flow is faster but blind to congestion "
                                    f"control): {_FACTOR_HELP}")]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="any factor or parameter override: NAME=LEVEL[,LEVEL...] (repeatable), e.g. tokens=2048,4096")]
Preset = Annotated[str | None, typer.Option("--preset", help="a named preset of the matrix (e.g. flash, smoke)")]
Out = Annotated[Path, typer.Option("--out", help="output folder (the store is DIR/results.duckdb)")]
ExecutorOpt = Annotated[str, typer.Option("--executor", help="local (process pool) | ray | dask")]
Workers = Annotated[int | None, typer.Option("--workers", help="worker processes (local: default one per CPU)")]
Address = Annotated[str | None, typer.Option("--address", help="cluster address for ray/dask, e.g. 10.0.0.1:6379")]
Diagnostics = Annotated[bool, typer.Option("--diagnostics", help="keep per-link bytes etc. as Parquet (slower)")]
BreakdownOpt = Annotated[str, typer.Option(
    "--breakdown", help="per-run breakdown kept in DIR/breakdown: layers (per rank, layer and kind) | nodes "
                        "(every node) | none")]
ProgressOpt = Annotated[str, typer.Option(
    "--progress", help="auto (a bar on a terminal, a status line every 10 s otherwise) | bar | periodic | plain "
                       "(a line per run) | none; on stderr")]
Retries = Annotated[int, typer.Option("--max-retries", min=0, help="retries of a run whose worker dies (0 or more)")]
Rerun = Annotated[bool, typer.Option("--rerun", help="run everything again, even runs found in the store")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="check the matrix and print its size; run nothing")]
Json = Annotated[bool, typer.Option("--json", help="with --dry-run: print the matrix's size and levels as JSON")]
Seeds = Annotated[int, typer.Option("--seeds", min=0, help="run every configuration N times with start-jitter "
                                                           "seeds 1..N (stored as rows; the report shows the spread)")]
Jitter = Annotated[float | None, typer.Option("--jitter", help="start jitter of --seeds, in seconds (default 1e-08)")]


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _apply_options(matrix: Any, preset: str | None, options: dict[str, str | None], sets: list[str] | None,
                   seeds: int = 0, jitter_s: float | None = None) -> Any:
    """Preset first, then the per-factor options, then ``--set``, then ``--seeds``; every level is validated.
    A factor given twice (``--set tokens=... --set tokens=...``, or ``--models`` and ``--set model=``) is a
    one-line error."""
    from moesim.commands.run import check_seeds
    from moesim.experiments.factors import SPEC_FACTORS, canonical_level, check_factor_name

    jitter = check_seeds(seeds, jitter_s)
    if preset:
        matrix = matrix.with_preset(preset)
    changes: list[tuple[str, str]] = [(f, v) for f, v in options.items() if v is not None]
    for item in sets or []:
        if "=" not in item:
            raise MoesimError(f"command line: --set '{item}': expected NAME=LEVEL[,LEVEL...]")
        name, raw = item.split("=", 1)
        factor = check_factor_name(name.strip(), "command line --set")
        if factor in dict(changes):
            raise MoesimError(f"command line: factor '{factor}': given twice; give its levels once")
        changes.append((factor, raw))
    for factor, raw in changes:
        items = _split(raw)
        if not items:
            raise MoesimError(f"command line: factor '{factor}': needs at least one level")
        values = items if factor in SPEC_FACTORS else [_parse_value(t) for t in items]
        levels = [canonical_level(factor, v, "command line", Path.cwd()) for v in values]
        matrix = matrix.with_levels(factor, levels)
    if seeds:
        matrix = matrix.with_levels("jitter_seed", list(range(1, seeds + 1))).with_levels("start_jitter_s", [jitter])
    return matrix


def check_options(executor: str, workers: int | None, progress: str, breakdown: str | None = None) -> None:
    """The options a sweep checks when it starts, checked up front, so ``--dry-run`` refuses them too."""
    from moesim.experiments.executors import EXECUTORS
    from moesim.experiments.executors.base import check_workers
    from moesim.experiments.progress import make_progress

    if executor not in EXECUTORS:
        raise MoesimError(f"--executor: unknown executor '{executor}' (allowed: {', '.join(EXECUTORS.names())})")
    check_workers(workers)
    make_progress(progress)
    if breakdown is not None:
        from moesim.system.breakdown import LEVELS

        if breakdown not in LEVELS:
            raise MoesimError(f"--breakdown: unknown level '{breakdown}' (allowed: {', '.join(LEVELS)})")


def _run(matrix: Any, out: Path, executor: str, workers: int | None, address: str | None, diagnostics: bool,
         progress: str, max_retries: int, dry_run: bool, rerun: bool, as_json: bool = False,
         breakdown: str = "layers") -> None:
    from moesim.experiments.inputs import check_matrix
    from moesim.experiments.runner import run_sweep

    check_options(executor, workers, progress, breakdown)
    if as_json and not dry_run:
        raise typer.BadParameter("goes with --dry-run (a sweep's results: moesim results DIR --json)", param_hint="--json")
    if dry_run:  # counted from the levels: nothing is built, however many runs the matrix has
        count = check_matrix(matrix)
        if as_json:
            typer.echo(json.dumps({
                "matrix": matrix.name, "source": matrix.source, "runs": count, "valid": True,
                "factors": {f: [str(v) for v in levels] for f, levels in matrix.factors}}, indent=1))
            return
        factors = ", ".join(f"{f} ({len(v)})" for f, v in matrix.factors)
        typer.echo(f"matrix {matrix.name}: {count} runs, all valid; factors: {factors}")
        return
    specs = matrix.runs()
    summary = run_sweep(specs, out, executor=executor, workers=workers, address=address,
                        diagnostics=diagnostics or matrix.diagnostics, progress=progress, max_retries=max_retries,
                        source=matrix.source, rerun=rerun, breakdown=breakdown)
    for line in summary.lines():
        typer.echo(line)
    if summary.failures:
        raise SystemExit(1)  # not typer.Exit: cli.main runs the app with standalone_mode=False


def _builtin(name: str, loader: str, doc: str) -> None:
    """Add ``moesim sweep NAME``: the built-in matrix ``moesim.experiments.matrix.<loader>()`` with the options."""

    def command(
        out: Out, models: Models = None, topologies: Topologies = None, strategies: Strategies = None,
        algorithms: Algorithms = None, networks: Networks = None, backend: Backends = None, set_: SetOpt = None,
        preset: Preset = None, executor: ExecutorOpt = "local", workers: Workers = None, address: Address = None,
        diagnostics: Diagnostics = False, progress: ProgressOpt = "auto", max_retries: Retries = 3,
        rerun: Rerun = False, dry_run: DryRun = False, seeds: Seeds = 0, jitter_s: Jitter = None,
        as_json: Json = False, breakdown: BreakdownOpt = "layers",
    ) -> None:
        from moesim.experiments import matrix as matrices

        opts = {"model": models, "topology": topologies, "strategy": strategies, "algorithm": algorithms,
                "network": networks, "backend": backend}
        matrix = _apply_options(getattr(matrices, loader)(), preset, opts, set_, seeds, jitter_s)
        _run(matrix, out, executor, workers, address, diagnostics, progress, max_retries, dry_run, rerun, as_json,
             breakdown)

    command.__doc__ = doc
    sweep_app.command(name)(command)


_builtin("study", "study_matrix", "The reference study (768 runs, docs/study.md), or the part selected by the options.")
_builtin("modern", "modern_matrix", "The modern study (216 runs, docs/modern-study.md): NVSwitch and mesh servers, "
         "rail and leaf/spine fabrics, prefill and decode.")


@sweep_app.command("run")
def run_cmd(
    matrix_file: Annotated[Path, typer.Argument(help="a matrix YAML (see docs/experiments.md)")],
    out: Out, models: Models = None, topologies: Topologies = None, strategies: Strategies = None,
    algorithms: Algorithms = None, networks: Networks = None, backend: Backends = None, set_: SetOpt = None,
    preset: Preset = None, executor: ExecutorOpt = "local", workers: Workers = None, address: Address = None,
    diagnostics: Diagnostics = False, progress: ProgressOpt = "auto", max_retries: Retries = 3,
    rerun: Rerun = False, dry_run: DryRun = False, seeds: Seeds = 0, jitter_s: Jitter = None,
    as_json: Json = False, breakdown: BreakdownOpt = "layers",
) -> None:
    """Run the matrix in MATRIX_FILE."""
    from moesim.experiments.matrix import load_matrix

    opts = {"model": models, "topology": topologies, "strategy": strategies, "algorithm": algorithms,
            "network": networks, "backend": backend}
    matrix = _apply_options(load_matrix(matrix_file), preset, opts, set_, seeds, jitter_s)
    _run(matrix, out, executor, workers, address, diagnostics, progress, max_retries, dry_run, rerun, as_json,
         breakdown)


@sweep_app.command("placement")
def placement_cmd(
    out: Out,
    model: Annotated[str, typer.Option("--model", help="the model of every run")] = "deepseek-v4-flash",
    topologies: Annotated[str, typer.Option("--topologies", "--topology", help="comma-separated topologies")]
    = "1,2,3,4,5,6",
    strategies: Annotated[str, typer.Option("--strategies", "--strategy", help="comma-separated strategies")]
    = "TP2EP16,TP4EP8,TP8EP4,TP16EP2",
    algorithm: Annotated[str, typer.Option("--algorithm", help="ring_direct | dbt_direct")] = default_of(RunSpec, "algorithm"),
    network: Annotated[str, typer.Option("--network", help="the network mode of every run")] = "roce_dcqcn",
    backend: Annotated[str, typer.Option("--backend", help="backend of the stored runs")] = default_of(RunSpec, "backend"),
    search_backend: Annotated[str, typer.Option("--search-backend", help="backend that scores the search")] = "flow",
    evaluations: Annotated[int, typer.Option("--evaluations", min=1, help="simulations per search")] = 16,
    seed: Annotated[int, typer.Option("--seed", min=0, help="seed of every search")] = 0,
    set_: Annotated[list[str] | None, typer.Option("--set", help="parameter override key=value (repeatable)")]
    = None,
    executor: ExecutorOpt = "local", workers: Workers = None, address: Address = None,
    progress: ProgressOpt = "auto", max_retries: Retries = 3,
) -> None:
    """Default against best-found rank → GPU mapping for every topology and strategy (docs/experiments.md)."""
    from moesim.commands.run import normal_strategy, parse_set
    from moesim.experiments.placement_study import PlacementStudy, run_placement_study

    check_options(executor, workers, progress)
    study = PlacementStudy(model=model, topologies=tuple(_split(topologies)),
                           strategies=tuple(normal_strategy(s) for s in _split(strategies)), algorithm=algorithm,
                           network=network, search_backend=search_backend, backend=backend,
                           evaluations=evaluations, seed=seed, overrides=parse_set(set_))
    summary = run_placement_study(study, out, executor=executor, workers=workers, address=address,
                                  progress=progress, max_retries=max_retries,
                                  say=lambda line: print(line, file=sys.stderr))
    for line in summary.lines():
        typer.echo(line)
    if summary.failures:
        raise SystemExit(1)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6f}"
    return str(value).splitlines()[0] if isinstance(value, str) else str(value)


def _json_cell(value: Any) -> Any:
    if isinstance(value, float) and value != value:  # NaN
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def results_cmd(
    directory: Annotated[Path, typer.Argument(help="an output folder of `moesim sweep`")],
    sql: Annotated[str | None, typer.Option("--sql", help="a SQL query on table `runs` (read-only)")] = None,
    export: Annotated[str | None, typer.Option("--export", help="parquet | csv: write the result to --to")] = None,
    to: Annotated[str | None, typer.Option("--to", help="the file --export writes (- for standard output)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the rows as a JSON list (every column)")] = False,
    breakdown: Annotated[str | None, typer.Option(
        "--breakdown", help="show where the time of run RUN goes, per layer (a run_id prefix or 'slowest')")] = None,
) -> None:
    """Show or export the results store of DIR (default: the main columns of every run)."""
    from moesim.experiments.store import export_results, query_results
    from moesim.experiments.store_schema import HIDDEN, SUMMARY_COLUMNS

    if breakdown is not None:
        if sql is not None or export is not None or to is not None:
            raise typer.BadParameter("shows one run; --sql and --export do not go with it", param_hint="--breakdown")
        _show_breakdown(directory, breakdown, as_json)
        return

    if export is not None or to is not None:
        if export is None or to is None:
            raise MoesimError("command line: --export and --to go together (e.g. --export csv --to runs.csv)")
        if as_json:
            raise typer.BadParameter("--json and --export are exclusive", param_hint="--json")
        n = export_results(directory, to, export, sql)
        if to != "-":  # standard output carries the data alone
            typer.echo(f"wrote {n} rows to {to}")
        return
    table = query_results(directory, sql)
    if as_json:
        rows = [{k: _json_cell(v) for k, v in row.items()} for row in table.to_pylist()]
        typer.echo(json.dumps(rows, indent=1, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    columns = table.column_names if sql else [c for c in SUMMARY_COLUMNS if c in table.column_names] + [
        c for c in table.column_names if c not in HIDDEN and c not in SUMMARY_COLUMNS]
    view = Table(title=None if sql else f"{directory}: {table.num_rows} runs")
    for c in columns:
        view.add_column(c, justify="right" if c.endswith("_s") else "left")
    data = {c: table.column(c).to_pylist() for c in columns}
    for i in range(table.num_rows):
        view.add_row(*(_cell(data[c][i]) for c in columns))
    Console(width=None if sys.stdout.isatty() else 200).print(view)


def _show_breakdown(directory: Path, run: str, as_json: bool) -> None:
    """Per layer of the run's bottleneck rank: span, busy time by kind, wait on other ranks (--json: every row)."""
    from moesim.analysis.breakdown import layer_breakdown
    from moesim.experiments.store import read_breakdown, resolve_run

    row = resolve_run(directory, run)
    table = read_breakdown(directory, row["run_id"])
    if as_json:
        typer.echo(json.dumps({"run_id": row["run_id"], "bottleneck_rank": row["bottleneck_rank"],
                               "rows": table.to_pylist()}, indent=1))
        return
    view_rows, kinds = layer_breakdown(table, row["bottleneck_rank"])
    from rich.console import Console
    from rich.table import Table

    label = "/".join(str(row[c]) for c in ("model", "topology", "strategy", "algorithm", "network", "backend"))
    view = Table(title=f"{label} (run {row['run_id'][:12]}): wall {row['wall_s']:.6f} s, bottleneck rank "
                       f"{row['bottleneck_rank']}; busy seconds per kind, wait on other ranks")
    columns = ["layer", "start_s", "end_s", *[f"{k}_s" for k in kinds], "wait_s", "copied"]
    for c in columns:
        view.add_column(c, justify="right")
    for r in view_rows:
        view.add_row(*(_cell(r[c]) for c in columns))
    if view_rows:
        total = {"layer": "all", "start_s": view_rows[0]["start_s"], "end_s": view_rows[-1]["end_s"],
                 "copied": sum(r["copied"] for r in view_rows)}
        total.update({c: sum(r[c] for r in view_rows) for c in columns if c.endswith("_s") and c not in total})
        view.add_row(*(_cell(total[c]) for c in columns), style="bold")
    Console(width=None if sys.stdout.isatty() else 200).print(view)


def register(app: typer.Typer) -> None:
    """Add ``moesim sweep ...`` and ``moesim results``."""
    app.add_typer(sweep_app, name="sweep")
    app.command("results")(results_cmd)
