"""`moesim refine DIR`: rerun on packet level the runs that settle the report's unresolved orderings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from moesim.errors import MoesimError


def refine(
    directory: Annotated[Path, typer.Argument(help="Results folder (results.duckdb) of a sweep.")],
    backend: Annotated[str | None, typer.Option(
        "--backend", help="the more exact backend to rerun on (default: packet, the bands' reference)")] = None,
    budget: Annotated[str, typer.Option(
        "--budget", help="estimated wall time to spend, e.g. 90s, 30m, 2h, 1h30m, or none")] = "30m",
    executor: Annotated[str, typer.Option("--executor", help="local (process pool) | ray | dask")] = "local",
    workers: Annotated[int | None, typer.Option(
        "--workers", min=1, help="worker processes (local: default one per CPU)")] = None,
    address: Annotated[str | None, typer.Option("--address", help="cluster address for ray/dask")] = None,
    progress: Annotated[str, typer.Option(
        "--progress", help="auto | bar | periodic | plain (a line per run) | none; on stderr")] = "auto",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the runs it would do; run nothing")] = False,
    ensemble: Annotated[int, typer.Option(
        "--ensemble", min=0, help="with each run, its ensemble members 1..K-1 (start skew, packet size and ECN "
                                  "draws varied; docs/system.md): the report then says which orderings hold in "
                                  "every member")] = 0,
    reuse: Annotated[list[Path] | None, typer.Option(
        "--reuse", help="Parquet results tables (repeatable) whose packet rows with a run's exact input hash are "
                        "copied instead of simulated (default: benchmarks/reference/*.parquet of a source "
                        "checkout)")] = None,
    no_reuse: Annotated[bool, typer.Option("--no-reuse", help="simulate every run, copy no stored row")] = False,
) -> None:
    """Rerun on a more exact backend the runs that settle the orderings left unresolved at this fidelity,
    into the same store (resumable; docs/confidence.md)."""
    from moesim.analysis.bands import load_bands
    from moesim.analysis.refine import check_options, parallelism, parse_budget, plan
    from moesim.analysis.refine import refine as run_refine
    from moesim.analysis.refine_reuse import NONE, load_stored, reference_files
    from moesim.experiments.inputs import run_label
    from moesim.experiments.store import store_path

    check_options(backend, executor, progress)  # before anything is read or run
    if ensemble:
        from moesim.system.ensemble import MAX_MEMBERS

        if not 2 <= ensemble <= MAX_MEMBERS:
            raise MoesimError(f"--ensemble: {ensemble} members (allowed: 0 for none, or 2..{MAX_MEMBERS})")
    budget_s = parse_budget(budget)
    store_path(directory)  # a folder without a store is a one-line error
    bands = load_bands()
    target = backend or bands.reference
    stored = NONE if no_reuse else load_stored(reuse if reuse else reference_files(), target)
    if dry_run:
        parallel = parallelism(executor, workers)
        p = plan(directory, target, budget_s, parallel, bands, announce=typer.echo, ensemble=ensemble, stored=stored)
        for line in p.lines(target, parallel):
            typer.echo(line)
        for spec, key, _ in p.reused:
            typer.echo(f"  {run_label(spec)}  (stored in {p.reuse_source[key]})")
        for c in p.runs:
            typer.echo(f"  {run_label(c.spec)}  (~{c.cost_s:.1f} s)")
        return
    summary = run_refine(directory, backend, budget_s, executor, workers, address, progress, bands=bands,
                         announce=typer.echo, ensemble=ensemble, stored=stored)
    typer.echo(f"{summary.remaining or 'no'} ordering{'' if summary.remaining == 1 else 's'} unresolved now; "
               f"`moesim report {directory}` uses each configuration's most exact backend")
    if summary.failures:
        raise SystemExit(1)


def register(app: typer.Typer) -> None:
    """Add ``refine`` to the root app."""
    app.command("refine")(refine)
