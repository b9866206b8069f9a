"""Markdown, CSV, LaTeX and HTML renderings of a small table, number formatting by column kind, and atomic writes."""

from __future__ import annotations

import csv
import io

import pyarrow as pa
import pytest

from moesim.analysis.tables import (
    COUNT,
    NUMBER,
    PERCENT,
    RATIO,
    SECONDS,
    TEXT,
    column_kind,
    format_value,
    significant,
    to_csv,
    to_html,
    to_latex,
    to_markdown,
    write_table,
)

T = pa.table({"model": ["a_b", "c|d"], "n": [3, 12], "wall_s": [0.1 + 0.2, float("nan")]})


def test_markdown():
    md = to_markdown(T).splitlines()
    assert md[0] == "| model | n | wall_s |"
    assert md[1] == "|---|---:|---:|"
    assert md[2] == "| a_b | 3 | 300 ms |"
    assert md[3] == "| c\\|d | 12 |  |"


def test_csv_keeps_full_precision():
    rows = list(csv.reader(io.StringIO(to_csv(T))))
    assert rows[0] == ["model", "n", "wall_s"]
    assert float(rows[1][2]) == 0.1 + 0.2  # 0.30000000000000004 round-trips exactly
    assert rows[2] == ["c|d", "12", ""]


def test_latex_escapes_and_aligns():
    tex = to_latex(T, caption="50% of runs")
    assert r"\begin{tabular}{lrr}" in tex
    assert r"a\_b & 3 & 300 ms \\" in tex
    assert r"\caption{50\% of runs}" in tex
    assert tex.count(r"\begin{table}") == 1 and tex.count(r"\end{table}") == 1


def test_html_is_sortable_with_raw_values():
    h = to_html(T, "t-x")
    assert h.startswith('<table class="sortable" id="t-x">')
    assert 'data-v="0.30000000000000004">300 ms<' in h
    assert h.count("<tr>") == 3


def test_write_table(tmp_path):
    paths = write_table(T, tmp_path / "tables", "x", caption="cap")
    assert sorted(p.name for p in paths) == ["x.csv", "x.md", "x.tex"]
    assert (tmp_path / "tables" / "x.md").read_text().startswith("**cap**")
    assert not [p for p in (tmp_path / "tables").iterdir() if p.name.startswith(".")]  # no temp files left


@pytest.mark.parametrize("name,dtype,kind", [
    ("wall_s", pa.float64(), SECONDS), ("wall_mean_s", pa.float64(), SECONDS), ("comm_fraction", pa.float64(), PERCENT),
    ("comm_fraction_mean", pa.float64(), PERCENT), ("vs_best", pa.float64(), PERCENT), ("wall_spread", pa.float64(), PERCENT),
    ("comm_mean_rel", pa.float64(), PERCENT), ("ratio", pa.float64(), RATIO), ("normalized", pa.float64(), RATIO),
    ("n", pa.int64(), COUNT), ("mean_rank", pa.float64(), NUMBER), ("model", pa.string(), TEXT),
])
def test_column_kinds(name, dtype, kind):
    assert column_kind(name, dtype) == kind


@pytest.mark.parametrize("value,kind,text", [
    # seconds: the largest unit that keeps the rounded value >= 1, 3 significant digits
    (0.00252022, SECONDS, "2.52 ms"), (5.27565, SECONDS, "5.28 s"), (0.9996, SECONDS, "1.00 s"),
    (0.0009996, SECONDS, "1.00 ms"), (2.5e-7, SECONDS, "250 ns"), (1234.5, SECONDS, "1234 s"), (0.0, SECONDS, "0 s"),
    # fractions as percent, ratios with ×, counts as grouped integers
    (0.123, PERCENT, "12.3 %"), (-0.0345, PERCENT, "-3.45 %"), (1.0, PERCENT, "100 %"),
    (1.0345, RATIO, "1.03×"), (0.95, RATIO, "0.950×"), (12, COUNT, "12"), (5275650, COUNT, "5,275,650"),
    (5.27565e+06, NUMBER, "5,275,650"), (2.3333333, NUMBER, "2.333"), (float("nan"), SECONDS, ""), (None, RATIO, ""),
    ("TP2EP16", TEXT, "TP2EP16"),
])
def test_format_value(value, kind, text):
    assert format_value(value, kind) == text


def test_significant_digits_and_rounding_carry():
    assert [significant(x) for x in (9.996, 99.96, 0.012345, 123456.7)] == ["10.0", "100", "0.0123", "123457"]


def test_kinds_override_and_latex_units():
    t = pa.table({"roce_dcqcn": [0.0123], "ratio": [1.2]})
    assert to_markdown(t).splitlines()[2] == "| 0.0123 | 1.20× |"  # a level name says nothing: plain number
    assert to_markdown(t, {"roce_dcqcn": SECONDS}).splitlines()[2] == "| 12.3 ms | 1.20× |"
    tex = to_latex(pa.table({"gpu_s": [2.5e-6], "ratio": [1.2]}))
    assert r"2.50 \textmu{}s & 1.20$\times$ \\" in tex
