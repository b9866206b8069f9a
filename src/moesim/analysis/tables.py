"""Render analysis tables (small ``pyarrow.Table``s) as Markdown, CSV, LaTeX and sortable, filterable HTML.

Markdown, LaTeX and HTML show each number by the kind of its column (``column_kind``): seconds in
ns/µs/ms/s, fractions and relative differences in %, ratios with ×, counts as integers, each with 3
significant digits (``0.00252022`` → ``2.52 ms``, ``0.123`` → ``12.3 %``). CSV keeps
full precision (Python's shortest round-trip repr) and HTML cells carry it in ``data-v``, so sorting
and downstream tools lose nothing.
"""

from __future__ import annotations

import csv
import html
import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from moesim.fileio import atomic_write

SECONDS, PERCENT, RATIO, COUNT, NUMBER, TEXT = "seconds", "percent", "ratio", "count", "number", "text"
KINDS = (SECONDS, PERCENT, RATIO, COUNT, NUMBER, TEXT)
PERCENT_COLUMNS = frozenset({"vs_best", "rel_diff", "comm_fraction"})
RATIO_COLUMNS = frozenset({"ratio", "normalized", "sensitivity"})


def column_kind(name: str, dtype: pa.DataType) -> str:
    """What a column holds, from its name and type: ``*_s`` seconds; ``*_fraction*``, ``*_rel``, ``*_spread``,
    ``vs_best``, ``rel_diff`` percent; ``ratio``, ``normalized``, ``sensitivity`` ratios; integers counts."""
    if not (pa.types.is_integer(dtype) or pa.types.is_floating(dtype)):
        return TEXT
    if name.endswith("_s"):
        return SECONDS
    if name in PERCENT_COLUMNS or "_fraction" in name or name.endswith(("_rel", "_spread")):
        return PERCENT
    if name in RATIO_COLUMNS:
        return RATIO
    return COUNT if pa.types.is_integer(dtype) else NUMBER


def significant(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` significant digits in fixed notation (all integer digits kept: 1234.5 → 1234);
    below 0.001 in scientific notation."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    exp = math.floor(math.log10(abs(x)))
    if exp < -3:
        return f"{x:.{digits - 1}e}"
    decimals = max(0, digits - 1 - exp)
    rounded = round(x, decimals)
    if rounded != 0 and math.floor(math.log10(abs(rounded))) > exp:  # 9.996 → 10.0, not 10.00
        decimals = max(0, decimals - 1)
    return f"{x:.{decimals}f}"


SECOND_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))


def format_seconds(x: float) -> str:
    """A duration in the largest unit that keeps it ≥ 1 once rounded: ``0.00252022`` → ``2.52 ms``."""
    if x == 0:
        return "0 s"
    for scale, unit in SECOND_UNITS:
        text = significant(x / scale)
        if abs(float(text)) >= 1 or unit == SECOND_UNITS[-1][1]:
            return f"{text} {unit}"
    raise AssertionError("unreachable")


def format_value(value: Any, kind: str = NUMBER) -> str:
    """Human-readable cell text for a value of column kind ``kind``; NaN/None as an empty cell."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool) or not isinstance(value, int | float) or kind == TEXT:
        return str(value)
    if not math.isfinite(value):
        return "∞" if value > 0 else "−∞"
    if kind == SECONDS:
        return format_seconds(float(value))
    if kind == PERCENT:
        return f"{significant(100.0 * value)} %"
    if kind == RATIO:
        return f"{significant(float(value))}×"
    if isinstance(value, int) or kind == COUNT or (float(value).is_integer() and abs(value) >= 1e3):
        return f"{round(value):,}"
    if abs(value) >= 1e4:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def column_kinds(table: pa.Table, kinds: Mapping[str, str] | None = None) -> list[str]:
    """The kind of each column: ``kinds`` where given, else ``column_kind``."""
    return [(kinds or {}).get(f.name) or column_kind(f.name, f.type) for f in table.schema]



def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _rows(table: pa.Table) -> list[list[Any]]:
    cols = [table.column(c).to_pylist() for c in table.column_names]
    return [list(r) for r in zip(*cols, strict=True)] if cols else []


def to_markdown(table: pa.Table, kinds: Mapping[str, str] | None = None) -> str:
    """GitHub-flavoured Markdown; numbers formatted by column kind and right-aligned."""
    ks = column_kinds(table, kinds)
    head = "| " + " | ".join(table.column_names) + " |"
    align = "|" + "|".join("---:" if _is_numeric(f.type) else "---" for f in table.schema) + "|"
    body = ["| " + " | ".join(format_value(v, k).replace("|", "\\|") for v, k in zip(row, ks, strict=True)) + " |"
            for row in _rows(table)]
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
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "×": r"$\times$", "µ": r"\textmu{}", "−": "$-$", "∞": r"$\infty$"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(c, c) for c in text)


def to_latex(table: pa.Table, caption: str = "", kinds: Mapping[str, str] | None = None) -> str:
    """A booktabs ``tabular`` (wrapped in a ``table`` float when a caption is given); numbers as in Markdown."""
    ks = column_kinds(table, kinds)
    spec = "".join("r" if _is_numeric(f.type) else "l" for f in table.schema)
    lines = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(latex_escape(c) for c in table.column_names) + r" \\", r"\midrule"]
    lines += [" & ".join(latex_escape(format_value(v, k)) for v, k in zip(row, ks, strict=True)) + r" \\"
              for row in _rows(table)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if caption:
        lines = [r"\begin{table}[htbp]", r"\centering", rf"\caption{{{latex_escape(caption)}}}", *lines, r"\end{table}"]
    return "\n".join(lines) + "\n"


LONG_CELL = 160
"""Text cells up to this many characters stay on one line in HTML (the table scrolls in its box); longer ones
wrap at a readable width (class ``long``)."""


def to_html(table: pa.Table, table_id: str, kinds: Mapping[str, str] | None = None) -> str:
    """A ``<table class="sortable">``: numbers formatted by column kind, each numeric cell carrying its exact
    value in ``data-v`` for sorting; text longer than ``LONG_CELL`` in a cell of class ``long``."""
    numeric = [_is_numeric(f.type) for f in table.schema]
    ks = column_kinds(table, kinds)
    head = "".join(f'<th class="{"num" if n else "txt"}">{html.escape(c)}</th>'
                   for c, n in zip(table.column_names, numeric, strict=True))
    body = []
    for row in _rows(table):
        cells = []
        for v, n, k in zip(row, numeric, ks, strict=True):
            if n:
                raw = "" if v is None or (isinstance(v, float) and math.isnan(v)) else repr(v)
                cells.append(f'<td class="num" data-v="{raw}">{html.escape(format_value(v, k))}</td>')
            else:
                text = format_value(v, k)
                cells.append(f"<td>{html.escape(text)}</td>" if len(text) <= LONG_CELL else
                             f'<td class="long">{html.escape(text)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<table class="sortable" id="{html.escape(table_id)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def write_table(table: pa.Table, out_dir: str | Path, name: str, caption: str = "",
                kinds: Mapping[str, str] | None = None) -> list[Path]:
    """Write ``name.md``, ``name.csv`` and ``name.tex`` into ``out_dir`` (atomically)."""
    out = Path(out_dir)
    md = (f"**{caption}**\n\n" if caption else "") + to_markdown(table, kinds)
    return [atomic_write(out / f"{name}.md", md), atomic_write(out / f"{name}.csv", to_csv(table)),
            atomic_write(out / f"{name}.tex", to_latex(table, caption, kinds))]
