"""`moesim report DIR` and `moesim compare DIR --reference FILE.yaml`: the analysis layer on the command line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer


def _plain(value: Any) -> Any:
    """A table cell as JSON (NaN becomes null)."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _results_folder(directory: Path) -> None:
    """A one-line error unless ``directory`` is a folder (the results of ``moesim sweep``)."""
    from moesim.errors import MoesimError

    if directory.exists() and not directory.is_dir():
        raise MoesimError(f"DIR {directory}: is a file; expected a results folder (the --out of moesim sweep, "
                          "holding results.duckdb or runs.parquet)")


def report(
    directory: Annotated[Path, typer.Argument(help="Results folder (results.duckdb or runs.parquet).")],
    out: Annotated[Path | None, typer.Option("--out", help="Output folder (default: DIR).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings and the files written as JSON.")] = False,
) -> None:
    """Write tables (md/csv/tex), figures (png/svg), findings.md and a self-contained report.html."""
    from moesim.analysis.report import build_report
    from moesim.fileio import check_output_folder

    _results_folder(directory)
    check_output_folder(out if out is not None else directory, "--out" if out is not None else "DIR")
    files = build_report(directory, out)
    if as_json:
        typer.echo(json.dumps({
            "findings": [{"backend": f.backend, "text": f.text} for f in files.findings],
            "html": str(files.html), "tables": [str(p) for p in files.tables],
            "figures": [str(p) for p in files.figures]}, indent=1))
        return
    for f in files.findings:
        typer.echo(f"- [{f.backend}] {f.text}")
    typer.echo(f"wrote {len(files.tables)} table files, {len(files.figures)} figure files and {files.html}")


def compare(
    directory: Annotated[Path, typer.Argument(help="Results folder (results.duckdb or runs.parquet).")],
    reference: Annotated[str, typer.Option("--reference", help="Reference YAML, or a built-in name (v4_flash).")],
    out: Annotated[Path | None, typer.Option("--out", help="Output folder (default: DIR/compare).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Print our statistics next to a reference's and render them side by side (compare.html)."""
    from moesim.analysis.reference import compare_dir
    from moesim.analysis.tables import to_markdown
    from moesim.fileio import check_output_folder

    _results_folder(directory)
    check_output_folder(out if out is not None else directory / "compare", "--out" if out is not None else "DIR/compare")
    comp, page = compare_dir(directory, reference, out)
    if as_json:
        typer.echo(json.dumps({
            "reference": comp.name, "source": comp.source, "backend": comp.backend,
            "tolerance_rel": comp.tolerance_rel,
            "checks": [{k: _plain(v) for k, v in row.items()} for row in comp.table().to_pylist()],
            "orders": comp.order_table().to_pylist(), "skipped": list(comp.skipped),
            "caveat": comp.caveat or None, "html": str(page)}, indent=1))
        return
    which = comp.backend or "unknown"
    typer.echo(f"{comp.name} ({comp.source}); our numbers from the {which} backend\n" if "," not in which else
               f"{comp.name} ({comp.source}); our numbers from each configuration's most exact backend stored "
               f"({which} runs)\n")
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
