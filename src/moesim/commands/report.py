"""`moesim report DIR` and `moesim compare DIR --reference FILE.yaml`: the analysis layer on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from moesim.analysis.reference import compare_dir
from moesim.analysis.report import build_report
from moesim.analysis.tables import to_markdown


def report(
    directory: Annotated[Path, typer.Argument(help="Results folder (results.duckdb or runs.parquet).")],
    out: Annotated[Path | None, typer.Option("--out", help="Output folder (default: DIR).")] = None,
) -> None:
    """Write tables (md/csv/tex), figures (png/svg), findings.md and a self-contained report.html."""
    files = build_report(directory, out)
    for f in files.findings:
        typer.echo(f"- [{f.backend}] {f.text}")
    typer.echo(f"wrote {len(files.tables)} table files, {len(files.figures)} figure files and {files.html}")


def compare(
    directory: Annotated[Path, typer.Argument(help="Results folder (results.duckdb or runs.parquet).")],
    reference: Annotated[str, typer.Option("--reference", help="Reference YAML, or a built-in name (v4_flash).")],
    out: Annotated[Path | None, typer.Option("--out", help="Output folder (default: DIR/compare).")] = None,
) -> None:
    """Print our statistics next to a reference's and render them side by side (compare.html)."""
    comp, page = compare_dir(directory, reference, out)
    typer.echo(f"{comp.name} ({comp.source}); our numbers from the {comp.backend or 'unknown'} backend\n")
    typer.echo(to_markdown(comp.table()))
    if comp.orders:
        typer.echo(to_markdown(comp.order_table()))
    for x in comp.skipped:
        typer.echo(f"not compared: {x}")
    if comp.caveat:
        typer.echo(f"note: {comp.caveat}")
    typer.echo(f"wrote {page}")


def register(app: typer.Typer) -> None:
    """Add ``report`` and ``compare`` to the root app."""
    app.command("report")(report)
    app.command("compare")(compare)
