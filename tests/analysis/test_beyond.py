"""The placement and prefill/decode report sections: their tables from stored runs, and the report pages
that show them only when the runs carry those factors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from analysis_data import write_store
from test_report import chromium, console_lines, needs_chromium

from moesim.analysis import beyond
from moesim.analysis.report import build_report
from moesim.analysis.results import as_table


def _run(topology: str, strategy: str, wall_s: float, **factors: object) -> dict[str, object]:
    params = {}
    if factors.get("phase") == "decode":
        params["decode"] = {"batch": factors["batch"], "context_tokens": 4096, "decode_steps": factors.pop("steps")}
    return {"model": "deepseek-v4-flash", "topology": topology, "strategy": strategy, "network": "roce_dcqcn",
            "wall_s": wall_s, "gpu_s": wall_s / 4, "comm_s": 3 * wall_s / 4, "status": "ok",
            "params_json": json.dumps(params), **factors}


PLACEMENT_ROWS = [
    _run("4", "TP16EP2", 0.8, placement="contiguous"), _run("4", "TP16EP2", 0.4, placement="0,2,4"),
    _run("4", "TP4EP8", 0.25, placement="contiguous"),  # the search kept the default: no second run
    _run("1", "TP4EP8", 0.3, placement="contiguous"), _run("1", "TP4EP8", 0.3, placement="3,2,1"),
]


def test_placement_table_pairs_default_and_best() -> None:
    rows = {(r["topology"], r["strategy"]): r for r in beyond.placement_table(as_table(PLACEMENT_ROWS)).to_pylist()}
    assert rows[("4", "TP16EP2")]["gain"] == pytest.approx(0.5) and rows[("4", "TP16EP2")]["best_placement"] == "0,2,4"
    assert rows[("4", "TP4EP8")]["gain"] == 0.0 and rows[("4", "TP4EP8")]["best_placement"] == "contiguous"
    assert rows[("1", "TP4EP8")]["gain"] == 0.0  # a tie keeps the default


def test_phase_table_from_decode_parameters() -> None:
    """Time per step = wall / steps, tokens/s = batch × steps / wall; the prefill run's batch is 'default'."""
    rows = [_run("hgx-h100:4", "TP4EP8", 0.08, phase="prefill", batch=None),  # a store's NULL
            _run("hgx-h100:4", "TP4EP8", 0.02, phase="decode", batch=4, steps=2),
            _run("hgx-h100:4", "TP8EP4", 0.10, phase="prefill", batch=None),
            _run("hgx-h100:4", "TP8EP4", 0.01, phase="decode", batch=4, steps=2)]
    table = as_table(rows)
    assert set(table.column("batch").to_pylist()) == {"default", "4"}
    phases = {r["strategy"]: r for r in beyond.phase_table(table).to_pylist()}
    assert phases["TP4EP8"]["prefill_wall_s"] == 0.08
    assert phases["TP4EP8"]["decode_b4_step_s"] == pytest.approx(0.01)
    assert phases["TP4EP8"]["decode_b4_tokens_per_s"] == pytest.approx(4 * 2 / 0.02)
    best = beyond.best_strategy_table(beyond.phase_table(table)).to_pylist()[0]
    assert best["prefill_wall_best"] == "TP4EP8" and best["decode_b4_step_best"] == "TP8EP4"


def test_report_shows_a_section_only_for_its_runs(tmp_path: Path) -> None:
    with_placement = build_report(write_store(tmp_path / "p", PLACEMENT_ROWS), tmp_path / "po").html.read_text()
    assert '<section id="placement">' in with_placement and 'id="f-placement_gains"' in with_placement
    assert '<section id="phases">' not in with_placement
    plain = [_run("1", "TP4EP8", 0.3), _run("2", "TP4EP8", 0.4)]
    page = build_report(write_store(tmp_path / "s", plain), tmp_path / "so").html.read_text()
    assert '<section id="placement">' not in page and '<section id="phases">' not in page


@needs_chromium
@pytest.mark.slow
def test_modern_smoke_sweep_report_renders_in_chromium(tmp_path: Path) -> None:
    """``moesim sweep modern --preset smoke`` end to end on the default backend, then its report in a browser."""
    out = tmp_path / "modern"
    proc = subprocess.run([sys.executable, "-m", "moesim", "sweep", "modern", "--preset", "smoke", "--out", str(out),
                           "--workers", "1", "--progress", "none"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    page = build_report(out).html
    text = page.read_text()
    assert '<section id="phases">' in text and 'id="f-phases"' in text and "decode_b256_tokens_per_s" in text
    shown = chromium(tmp_path, page.as_uri(), "--dump-dom")
    assert shown.returncode == 0 and console_lines(shown) == []
    assert f'data-sortable-tables="{text.count(chr(34) + "sortable" + chr(34))}"' in shown.stdout
