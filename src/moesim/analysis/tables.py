"""Render analysis tables (small ``pyarrow.Table``s) as Markdown, CSV, LaTeX and sortable HTML.

Numbers are shown with 6 significant digits in Markdown, LaTeX and HTML; CSV keeps full precision
(Python's shortest round-trip repr), so downstream tools lose nothing.
"""

from __future__ import annotations

import csv
import html
import io
import math
from pathlib import Path
from typing import Any

import pyarrow as pa

from moesim.fileio import atomic_write


def fmt(value: Any, digits: int = 6) -> str:
    """Human-readable cell text: floats to ``digits`` significant digits, NaN/None as an empty cell."""
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.{digits}g}"
    return str(value)


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _rows(table: pa.Table) -> list[list[Any]]:
    cols = [table.column(c).to_pylist() for c in table.column_names]
    return [list(r) for r in zip(*cols, strict=True)] if cols else []


def to_markdown(table: pa.Table) -> str:
    """GitHub-flavoured Markdown; numeric columns right-aligned."""
    head = "| " + " | ".join(table.column_names) + " |"
    align = "|" + "|".join("---:" if _is_numeric(f.type) else "---" for f in table.schema) + "|"
    body = ["| " + " | ".join(fmt(v).replace("|", "\\|") for v in row) + " |" for row in _rows(table)]
    return "\n".join([head, align, *body]) + "\n"


def to_csv(table: pa.Table) -> str:
    """CSV with a header row; floats at full precision, NaN and None as empty fields."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(table.column_names)
    for row in _rows(table):
        w.writerow(["" if v is None or (isinstance(v, float) and math.isnan(v)) else repr(v) if isinstance(v, float) else v
                    for v in row])
    return buf.getvalue()


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(c, c) for c in text)


def to_latex(table: pa.Table, caption: str = "") -> str:
    """A booktabs ``tabular`` (wrapped in a ``table`` float when a caption is given)."""
    spec = "".join("r" if _is_numeric(f.type) else "l" for f in table.schema)
    lines = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(latex_escape(c) for c in table.column_names) + r" \\", r"\midrule"]
    lines += [" & ".join(latex_escape(fmt(v)) for v in row) + r" \\" for row in _rows(table)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if caption:
        lines = [r"\begin{table}[htbp]", r"\centering", rf"\caption{{{latex_escape(caption)}}}", *lines, r"\end{table}"]
    return "\n".join(lines) + "\n"


def to_html(table: pa.Table, table_id: str) -> str:
    """A ``<table class="sortable">``; numeric cells carry their exact value in ``data-v`` for sorting."""
    numeric = [_is_numeric(f.type) for f in table.schema]
    head = "".join(f'<th class="{"num" if n else "txt"}">{html.escape(c)}</th>'
                   for c, n in zip(table.column_names, numeric, strict=True))
    body = []
    for row in _rows(table):
        cells = []
        for v, n in zip(row, numeric, strict=True):
            if n:
                raw = "" if v is None or (isinstance(v, float) and math.isnan(v)) else repr(v)
                cells.append(f'<td class="num" data-v="{raw}">{html.escape(fmt(v))}</td>')
            else:
                cells.append(f"<td>{html.escape(fmt(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<table class="sortable" id="{html.escape(table_id)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def write_table(table: pa.Table, out_dir: str | Path, name: str, caption: str = "") -> list[Path]:
    """Write ``name.md``, ``name.csv`` and ``name.tex`` into ``out_dir`` (atomically)."""
    out = Path(out_dir)
    md = (f"**{caption}**\n\n" if caption else "") + to_markdown(table)
    return [atomic_write(out / f"{name}.md", md), atomic_write(out / f"{name}.csv", to_csv(table)),
            atomic_write(out / f"{name}.tex", to_latex(table, caption))]
