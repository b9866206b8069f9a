"""`moesim refine` end to end on a CI-sized store: a tiny model (2 layers, 128 tokens) on topologies 2 and 5 ×
TP2EP16 and TP4EP8, ring, roce_dcqcn, fluid. Topologies 2 and 5 lie 0.9 % apart at TP2EP16 on fluid, far inside
fluid's band there, so the findings call that ordering unresolved; refine reruns the runs on packet level into the
same store, and the report then uses and names the packet rows. Also: the plan's order and budget, kill -9."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import duckdb
import pytest
import yaml
from analysis_data import write_store

from moesim import __version__
from moesim.analysis.bands import BackendBands, Band, ErrorBands
from moesim.analysis.refine import parse_budget, plan, refine
from moesim.analysis.report import build_report
from moesim.errors import MoesimError
from moesim.experiments import load_matrix, run_sweep

MATRIX = """\
name: tiny-refine
factors:
  model: tiny.yaml
  topology: [2, 5]
  strategy: [TP2EP16, TP4EP8]
  algorithm: ring_direct
  network: roce_dcqcn
  tokens: 128
"""
SWEEP = "moesim sweep run tiny-refine.yaml --out store"


def _moesim(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moesim", *args], capture_output=True, text=True, timeout=timeout)


def _rows(store: Path) -> list[dict]:
    con = duckdb.connect(str(store / "results.duckdb"), read_only=True)
    try:
        cur = con.execute("SELECT * FROM runs ORDER BY backend, topology, strategy")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


@pytest.fixture(scope="module")
def fluid_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("refine")
    data = yaml.safe_load((resources.files("moesim.models") / "data" / "deepseek-v4-flash.yaml").read_text())
    data.update(key="tiny-refine", name="Tiny MoE (2 layers, for tests)", num_layers=2)
    data.pop("notes", None)
    (folder / "tiny.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (folder / "tiny-refine.yaml").write_text(MATRIX)
    summary = run_sweep(load_matrix(folder / "tiny-refine.yaml").runs(), folder / "store", workers=1,
                        progress="none", command=SWEEP)
    assert summary.ran == 4 and not summary.failures
    return folder / "store"


@pytest.fixture(scope="module")
def refined_store(fluid_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store refined in this process without interruption (the reference of the kill -9 test)."""
    out = tmp_path_factory.mktemp("refined") / "store"
    shutil.copytree(fluid_store, out)
    summary = refine(out, "packet", None, workers=1, progress="none")
    assert summary.ran == 4 and summary.failures == () and summary.remaining == 0
    return out


def _copy(store: Path, tmp_path: Path) -> Path:
    shutil.copytree(store, tmp_path / "store")
    return tmp_path / "store"


def test_refine_on_packet_settles_the_ordering_the_fluid_band_leaves_open(fluid_store: Path, tmp_path: Path):
    store = _copy(fluid_store, tmp_path)
    build_report(store)
    md = (store / "findings.md").read_text()
    # provenance first: version, date, the command that made the store, the backend of the rows
    head = md.split("## Summary")[0]
    assert f"- moesim version: {__version__}\n" in head and re.search(r"- date \(runs finished, UTC\): 20\d\d-", head)
    assert f"- command: `{SWEEP}`\n" in head and "- backend: fluid\n" in head
    given = re.search(r"^- (\S+) topology given strategy = TP2EP16: 2 < 5\. 2 vs 5: 0\.\d % apart, inside the "
                      r"combined band of [\d.]+ %\. Settle with 2 runs: topology=any, strategy=TP2EP16\.$", md, re.M)
    assert given, md
    reversal = next(line for line in md.splitlines() if "The best topology depends on the strategy" in line)
    assert reversal.startswith("- [fluid] ") and "Unresolved at this fidelity: 2 vs 5: 0." in reversal
    assert "moesim refine" in md

    done = _moesim("refine", str(store), "--backend", "packet", "--workers", "1", "--progress", "none")
    assert done.returncode == 0, done.stderr
    assert "4 packet runs settle" in done.stdout and "no orderings unresolved now" in done.stdout
    rows = _rows(store)
    assert [r["backend"] for r in rows] == ["fluid"] * 4 + ["packet"] * 4  # the fluid rows are kept
    assert all(r["status"] == "ok" for r in rows)

    build_report(store)
    md = (store / "findings.md").read_text()
    assert "- backend: packet\n" in md and "`moesim refine " in md.split("## Summary")[0]  # the refine's command line
    assert "None: all 16 orderings are resolved." in md and "Unresolved at this fidelity:" not in md
    reversal = next(line for line in md.splitlines() if "The best topology depends on the strategy" in line)
    assert reversal.startswith("- [packet] ")
    page = (store / "report.html").read_text()
    assert "Per configuration the most exact backend stored is used (packet): packet runs; 4 runs of less exact " \
           "backends for the same configurations are left out." in page
    runs = (store / "tables" / "runs.csv").read_text().splitlines()
    assert runs[0].endswith(",backend") and all(line.endswith(",packet") for line in runs[1:]) and len(runs) == 5


def test_the_plan_takes_whole_orderings_cheapest_first_within_the_budget(tmp_path: Path):
    # fluid runs of V4 Flash; fluid costs half of packet, so a packet run is estimated at 2 × its stored time
    walls = {("1", "TP2EP16"): (1.0, 1.0), ("2", "TP2EP16"): (1.2, 1.0), ("1", "TP4EP8"): (2.1, 3.0),
             ("2", "TP4EP8"): (2.0, 3.0)}
    rows = [{"run_id": f"r{i}", "model": "deepseek-v4-flash", "topology": t, "strategy": s, "algorithm": "ring_direct",
             "network": "roce_dcqcn", "backend": "fluid", "overrides_json": "{}", "wall_s": w, "gpu_s": 0.0,
             "comm_s": w, "status": "ok", "sim_wallclock_s": c} for i, ((t, s), (w, c)) in enumerate(walls.items())]
    store = write_store(tmp_path / "store", rows)
    bands = ErrorBands("packet", {"fluid": BackendBands(Band(0.1, 100), relative_cost=0.5)})
    # TP2EP16 (1.0 vs 1.2) and TP4EP8 (2.1 vs 2.0) orderings are both open; settling the first costs 2 × 2 × 1 s
    small = plan(store, "packet", 5.0, 1, bands)
    assert [(c.spec.topology, c.spec.strategy, c.spec.backend) for c in small.runs] == \
        [("1", "TP2EP16", "packet"), ("2", "TP2EP16", "packet")]
    assert small.estimated_s == pytest.approx(4.0) and small.settled < small.unresolved
    full = plan(store, "packet", None, 1, bands)
    assert [c.spec.strategy for c in full.runs] == ["TP2EP16", "TP2EP16", "TP4EP8", "TP4EP8"]
    assert full.estimated_s == pytest.approx(16.0) and full.settled == full.unresolved
    assert plan(store, "packet", 16.0 / 2, 2, bands).runs == full.runs  # the budget is wall time over 2 workers
    assert plan(store, "fluid", None, 1, bands).runs == ()  # nothing is more exact on fluid than fluid


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("90s", 90),
                                               ("90", 90), ("none", None)])
def test_budgets(text: str, seconds: float | None):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "30x", "-5m", "m"])
def test_a_bad_budget_is_one_line(text: str):
    with pytest.raises(MoesimError, match="--budget: .* is not a duration"):
        parse_budget(text)


def test_kill_9_during_refine_loses_nothing_and_the_rerun_finishes(fluid_store: Path, refined_store: Path,
                                                                   tmp_path: Path):
    store = _copy(fluid_store, tmp_path)
    cmd = [sys.executable, "-m", "moesim", "refine", str(store), "--workers", "1", "--progress", "plain"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 240
        for line in proc.stderr:
            if line.startswith("[1/4]") or time.monotonic() > deadline:
                break
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    rows = _rows(store)  # DuckDB replays its log: complete rows only
    packet = [r for r in rows if r["backend"] == "packet"]
    assert len([r for r in rows if r["backend"] == "fluid"]) == 4 and 1 <= len(packet) < 4
    assert all(r["status"] == "ok" and r["wall_s"] for r in packet)
    again = refine(store, workers=1, progress="none")  # the same command again (here in this process)
    assert again.ran == 4 - len(packet) and again.failures == ()
    want = {r["run_id"]: r["wall_s"] for r in _rows(refined_store)}
    got = {r["run_id"]: r["wall_s"] for r in _rows(store)}
    assert got == want  # the same 8 rows, the same values as the uninterrupted refine
