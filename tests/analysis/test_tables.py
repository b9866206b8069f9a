"""Markdown, CSV, LaTeX and HTML renderings of a small table, and atomic writes to disk."""

from __future__ import annotations

import csv
import io

import pyarrow as pa

from moesim.analysis.tables import to_csv, to_html, to_latex, to_markdown, write_table

T = pa.table({"model": ["a_b", "c|d"], "n": [3, 12], "wall_s": [0.1 + 0.2, float("nan")]})


def test_markdown():
    md = to_markdown(T).splitlines()
    assert md[0] == "| model | n | wall_s |"
    assert md[1] == "|---|---:|---:|"
    assert md[2] == "| a_b | 3 | 0.3 |"
    assert md[3] == "| c\\|d | 12 |  |"


def test_csv_keeps_full_precision():
    rows = list(csv.reader(io.StringIO(to_csv(T))))
    assert rows[0] == ["model", "n", "wall_s"]
    assert float(rows[1][2]) == 0.1 + 0.2  # 0.30000000000000004 round-trips exactly
    assert rows[2] == ["c|d", "12", ""]


def test_latex_escapes_and_aligns():
    tex = to_latex(T, caption="50% of runs")
    assert r"\begin{tabular}{lrr}" in tex
    assert r"a\_b & 3 & 0.3 \\" in tex
    assert r"\caption{50\% of runs}" in tex
    assert tex.count(r"\begin{table}") == 1 and tex.count(r"\end{table}") == 1


def test_html_is_sortable_with_raw_values():
    h = to_html(T, "t-x")
    assert h.startswith('<table class="sortable" id="t-x">')
    assert 'data-v="0.30000000000000004">0.3<' in h
    assert h.count("<tr>") == 3


def test_write_table(tmp_path):
    paths = write_table(T, tmp_path / "tables", "x", caption="cap")
    assert sorted(p.name for p in paths) == ["x.csv", "x.md", "x.tex"]
    assert (tmp_path / "tables" / "x.md").read_text().startswith("**cap**")
    assert not [p for p in (tmp_path / "tables").iterdir() if p.name.startswith(".")]  # no temp files left
