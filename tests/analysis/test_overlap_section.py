"""Report section "Overlap" on a real sweep: per model and server, the best split without and with two-batch
overlap, its exposed and hidden communication."""

from __future__ import annotations

import pytest

import moesim
from moesim.analysis.overlap import overlap_table
from moesim.analysis.report import build_report
from moesim.analysis.results import load_results


def test_overlap_section_lists_the_best_split_per_level_and_what_it_hides(tmp_path):
    runs = [{"model": "qwen3-30b-a3b", "topology": "hgx-h100:1", "strategy": s, "backend": "flow", "tokens": 256,
             "overlap": o} for s in ("TP1EP8", "TP2EP4") for o in ("none", "two-batch")]
    moesim.sweep(runs, tmp_path / "s", workers=1)
    table = load_results(tmp_path / "s")
    section = overlap_table(table)
    assert section is not None and section.num_rows == 1
    row = section.to_pylist()[0]
    for level in ("none", "two-batch"):
        mine = [r for r in table.to_pylist() if r["overlap"] == level]
        best = min(mine, key=lambda r: r["wall_s"])
        assert (row[f"{level}_best"], row[f"{level}_wall_s"]) == (best["strategy"], best["wall_s"])
        assert row[f"{level}_exposed_comm_s"] == best["wall_s"] - best["gpu_s"]
        assert row[f"{level}_hidden_comm_s"] == pytest.approx(best["comm_s"] - best["exposed_comm_s"], abs=1e-15)
    assert row["none_hidden_comm_s"] == pytest.approx(0.0, abs=1e-12)  # one batch hides nothing
    assert row["two-batch_hidden_comm_s"] > 0
    assert row["gain"] == pytest.approx(1 - row["two-batch_wall_s"] / row["none_wall_s"])
    page = build_report(tmp_path / "s", tmp_path / "o").html.read_text()
    assert '<section id="overlap"><h2>Overlap</h2>' in page
