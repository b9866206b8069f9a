"""`--seeds N`: every configuration N times with seeded start jitter, each seed a stored row."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from exp_helpers import moesim_cmd, sigint_default, store_rows


@pytest.mark.slow
def test_run_with_seeds_returns_every_result_and_their_spread(small_dir: Path) -> None:
    cmd = moesim_cmd("run", "--model", str(small_dir / "tiny.yaml"), "--topology", "4", "--strategy", "TP16EP2",
                     "--network", "roce_hpcc", "--seeds", "3", "--json")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["seeds"] == [1, 2, 3] and out["start_jitter_s"] == 1e-8 and len(out["results"]) == 3
    walls = [r["wall_s"] for r in out["results"]]
    assert [r["overrides"]["jitter_seed"] for r in out["results"]] == [1, 2, 3]
    w = out["wall_s"]
    assert (w["min"], w["max"]) == (min(walls), max(walls)) and w["median"] == sorted(walls)[1]
    assert w["spread"] == (w["max"] - w["min"]) / w["median"]
    # the same command gives the same numbers (seeded, deterministic)
    again = json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout)
    assert [r["wall_s"] for r in again["results"]] == walls


def test_run_on_a_cc_blind_backend_says_so(small_dir: Path) -> None:
    base = ["run", "--model", str(small_dir / "tiny.yaml"), "--topology", "1", "--strategy", "TP2EP16"]
    blind = subprocess.run(moesim_cmd(*base, "--network", "roce_dcqcn", "--backend", "flow"), capture_output=True,
                           text=True, timeout=600)
    assert blind.returncode == 0 and "the flow backend does not model congestion control" in blind.stdout
    for args in (("--network", "roce_dcqcn"), ("--network", "ib_cc0", "--backend", "flow")):
        ok = subprocess.run(moesim_cmd(*base, *args), capture_output=True, text=True, timeout=600)
        assert ok.returncode == 0 and "does not model congestion control" not in ok.stdout


def _sweep(small_dir: Path, out: Path) -> list[str]:
    return moesim_cmd("sweep", "run", str(small_dir / "small.yaml"), "--out", str(out), "--seeds", "2",
                      "--networks", "roce_hpcc", "--workers", "1", "--progress", "plain")


@pytest.mark.slow
def test_sweep_with_seeds_stores_each_seed_and_resumes_after_an_interruption(small_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "seeds"
    proc = subprocess.Popen(_sweep(small_dir, out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=sigint_default)
    assert proc.stdout is not None
    done = 0
    deadline = time.monotonic() + 600
    for line in proc.stdout:  # interrupt after a few runs are stored
        done += line.startswith("[")
        if done >= 3 or time.monotonic() > deadline:
            break
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    partial = store_rows(out)
    assert 3 <= len(partial) < 24
    rerun = subprocess.run(_sweep(small_dir, out), capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"24 runs: {len(partial)} already in the store" in rerun.stdout
    rows = store_rows(out)
    assert len(rows) == 24 and all(r["status"] == "ok" for r in rows)  # 6 topologies × 2 strategies × 2 seeds
    configs: dict[tuple, list[str]] = {}
    for r in rows:
        configs.setdefault((r["topology"], r["strategy"]), []).append(r["jitter_seed"])
        assert r["start_jitter_s"] == "1e-08"
    assert len(configs) == 12 and all(sorted(s) == ["1", "2"] for s in configs.values())


@pytest.mark.slow
def test_report_of_a_seeded_sweep(small_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "seeded"
    sweep = subprocess.run(_sweep(small_dir, out), capture_output=True, text=True, timeout=900)
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    rep = subprocess.run(moesim_cmd("report", str(out)), capture_output=True, text=True, timeout=600)
    assert rep.returncode == 0, rep.stderr
    findings = (out / "findings.md").read_text().split("\n## Summary\n\n", 1)[1].split("\n\n## ", 1)[0]
    assert findings.count("Holds in ") == len(findings.splitlines()) and "of 2 seeds." in findings
    assert all(line.startswith("- [fluid] ") for line in findings.splitlines())
    page = (out / "report.html").read_text()
    assert "Sensitivity to start jitter" in page and "2 seeds of start jitter" in page
    assert (out / "tables" / "seed_spread.csv").is_file()
    # provenance names the seeds and the jitter; the All runs table has a row per seed
    assert "2 start-jitter seeds per configuration (1–2); ranks start at seeded uniform draws in [0, 10.0 ns)" in page
    runs = page.split('id="t-runs">', 1)[1].split("</table>", 1)[0]
    assert "<th class=\"txt\">jitter_seed</th>" in runs and runs.count("<tr>") - 1 == 24
