"""`moesim refine` end to end on a CI-sized store: a tiny model (2 layers, 128 tokens) on topologies 2 and 5 ×
TP2EP16 and TP4EP8, ring, roce_dcqcn, fluid. Topologies 2 and 5 lie 0.9 % apart at TP2EP16 on fluid, far inside
fluid's band there, so the findings call that ordering unresolved; refine reruns the runs on packet level into the
same store, and the report then uses and names the packet rows. Also: the plan's order and budget, the cost
estimate against the measured packet time, the option checks, the provenance, the heartbeat and kill -9."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from importlib import resources
from pathlib import Path

import duckdb
import pytest
import yaml
from analysis_data import write_store

from moesim import __version__
from moesim.analysis.bands import BackendBands, Band, ErrorBands, load_bands, row_spec
from moesim.analysis.refine import Candidate, choose, parse_budget, plan, refine
from moesim.analysis.refine_cost import CostModel, calibrate, cost_model, simulated_share, work
from moesim.analysis.report import build_report
from moesim.analysis.results import load_store_meta
from moesim.errors import MoesimError
from moesim.experiments import load_matrix, run_sweep
from moesim.experiments import progress as progress_module
from moesim.experiments.store_schema import COMMAND_KEY
from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves this module out: its fixtures take minutes

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
    # fluid runs of V4 Flash; a packet run costs hop_s × its packet-hops (no ranks × layers term, no fast-forward)
    walls = {("1", "TP2EP16"): 1.0, ("2", "TP2EP16"): 1.2, ("1", "TP4EP8"): 2.1, ("2", "TP4EP8"): 2.0}
    rows = [{"run_id": f"r{i}", "model": "deepseek-v4-flash", "topology": t, "strategy": s, "algorithm": "ring_direct",
             "network": "roce_dcqcn", "backend": "fluid", "overrides_json": "{}", "wall_s": w, "gpu_s": 0.0,
             "comm_s": w, "status": "ok", "sim_wallclock_s": 1.0} for i, ((t, s), w) in enumerate(walls.items())]
    store = write_store(tmp_path / "store", rows)
    bands = ErrorBands("packet", {"fluid": BackendBands(Band(0.1, 100), relative_cost=0.5)})
    model = CostModel(hop_s=1e-8, rank_layer_s=0.0, source="test")
    cost = {k: 1e-8 * work(RunSpec("deepseek-v4-flash", *k, "ring_direct", "roce_dcqcn", "packet")).packet_hops
            for k in walls}
    by_strategy = {s: cost[("1", s)] + cost[("2", s)] for s in ("TP2EP16", "TP4EP8")}
    cheap, dear = sorted(by_strategy, key=by_strategy.__getitem__)
    # TP2EP16 (1.0 vs 1.2) and TP4EP8 (2.1 vs 2.0) orderings are both open; the budget fits the cheaper one only
    small = plan(store, "packet", by_strategy[cheap] * 1.01, 1, bands, model=model)
    assert [(c.spec.topology, c.spec.strategy, c.spec.backend) for c in small.runs] == \
        [("1", cheap, "packet"), ("2", cheap, "packet")]
    assert small.estimated_s == pytest.approx(by_strategy[cheap]) and small.settled < small.unresolved
    assert small.cheapest_s == pytest.approx(by_strategy[cheap] + by_strategy[dear])  # the budget that takes both
    more = small.lines("packet", 1)[1]
    assert more.startswith("--budget ") and more.endswith(" would also settle the cheapest ordering left out "
                                                          f"(about {round(small.cheapest_s)} s on 1 worker in all)")
    assert parse_budget(more.split()[1]) >= small.cheapest_s  # type: ignore[operator]
    full = plan(store, "packet", None, 1, bands, model=model)
    assert [c.spec.strategy for c in full.runs] == [cheap, cheap, dear, dear]
    assert full.estimated_s == pytest.approx(sum(cost.values())) and full.settled == full.unresolved
    assert full.cheapest_s is None
    total = sum(cost.values())
    assert plan(store, "packet", total / 2 * 1.001, 2, bands, model=model).runs == full.runs  # wall time, 2 workers
    assert plan(store, "fluid", None, 1, bands, model=model).runs == ()  # nothing is more exact on fluid than fluid
    # a budget below every ordering plans nothing and names the smallest one that settles the cheapest ordering
    none = plan(store, "packet", by_strategy[cheap] / 2, 1, bands, model=model)
    assert none.runs == () and none.cheapest_s == pytest.approx(by_strategy[cheap])
    hint = none.lines("packet", 1)[1]
    assert hint.startswith("the cheapest unresolved ordering needs about ") and "settle it with --budget " in hint
    enough = parse_budget(hint.split("--budget ")[1].split()[0])
    assert enough is not None and enough >= by_strategy[cheap]
    assert plan(store, "packet", enough, 1, bands, model=model).runs == small.runs


def test_the_plan_counts_a_run_shared_by_two_orderings_once_and_takes_the_most_orderings_per_second():
    # orderings: one needs run a (6 s); two needs a and b (1 s more); three needs c (4 s). In 7 s, taking two's
    # runs settles one and two (3.5 s per ordering); three alone (4 s) leaves no room for a, settling one ordering
    run = {k: Candidate(RunSpec("deepseek-v4-flash", t, "TP2EP16", backend="packet"), k, cost)
           for k, t, cost in (("a", "1", 6.0), ("b", "2", 1.0), ("c", "3", 4.0))}
    todo = {"one": [run["a"]], "two": [run["a"], run["b"]], "three": [run["c"]]}
    runs, spent, settled, cheapest = choose(todo, 7.0)
    assert [c.key for c in runs] == ["a", "b"] and spent == 7.0 and settled == 2 and cheapest == 11.0
    runs, spent, settled, cheapest = choose(todo, None)
    assert [c.key for c in runs] == ["a", "b", "c"] and spent == 11.0 and settled == 3 and cheapest is None
    # two runs of one simulation (topology 6 under two network modes) are both taken, and paid once
    twin = Candidate(RunSpec("deepseek-v4-flash", "1", "TP2EP16", network="ib_hpcc", backend="packet"), "a", 6.0)
    runs, spent, settled, _ = choose({"one": [run["a"]], "four": [twin]}, 6.0)
    assert [c.spec.network for c in runs] == ["ib_cc0", "ib_hpcc"] and spent == 6.0 and settled == 2


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("90s", 90),
                                               ("90", 90), ("none", None)])
def test_budgets(text: str, seconds: float | None):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "30x", "-5m", "m"])
def test_a_bad_budget_is_one_line(text: str):
    with pytest.raises(MoesimError, match="--budget: .* is not a duration"):
        parse_budget(text)


def _kill_9_at(store: Path, progress_line: str, *more: str) -> None:
    """Start `moesim refine STORE` and SIGKILL it once it prints ``progress_line`` (or after 240 s)."""
    cmd = [sys.executable, "-m", "moesim", "refine", str(store), "--workers", "1", "--progress", "plain", *more]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 240
        for line in proc.stderr:
            if line.startswith(progress_line) or time.monotonic() > deadline:
                break
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_kill_9_during_refine_loses_nothing_and_the_rerun_finishes(fluid_store: Path, refined_store: Path,
                                                                   tmp_path: Path):
    store = _copy(fluid_store, tmp_path)
    _kill_9_at(store, "[1/1]")  # the first run goes alone
    rows = _rows(store)  # DuckDB replays its log: complete rows only
    packet = [r for r in rows if r["backend"] == "packet"]
    assert len([r for r in rows if r["backend"] == "fluid"]) == 4 and 1 <= len(packet) < 4
    assert all(r["status"] == "ok" and r["wall_s"] for r in packet)
    again = refine(store, workers=1, progress="none")  # the same command again (here in this process)
    assert again.ran == 4 - len(packet) and again.failures == ()
    want = {r["run_id"]: r["wall_s"] for r in _rows(refined_store)}
    got = {r["run_id"]: r["wall_s"] for r in _rows(store)}
    assert got == want  # the same 8 rows, the same values as the uninterrupted refine


def test_the_estimate_is_within_2x_of_the_measured_packet_time(fluid_store: Path, refined_store: Path):
    # the plan before any packet run (calibrated on this machine) against the packet runs' simulation times
    before = plan(fluid_store, "packet", None, 1, load_bands())
    measured = sum(r["sim_wallclock_s"] for r in _rows(refined_store) if r["backend"] == "packet")
    assert len(before.runs) == 4 and before.cost_source.startswith("packet cost calibrated on this machine")
    assert 0.5 <= before.estimated_s / measured <= 2.0, (before.estimated_s, measured)
    # once the store holds packet rows, the cost per packet-hop is theirs: the estimate of the same runs follows
    model = cost_model("packet", _rows(refined_store))
    assert model.source == "packet cost measured from 4 packet runs of this store" and model.families
    again = sum(c.cost_s for c in plan(fluid_store, "packet", None, 1, load_bands(), model=model).runs)
    assert 0.5 <= again / measured <= 2.0, (again, measured)


def test_packet_hops_grow_with_the_tokens_and_the_share_counts_the_layers_not_fast_forwarded():
    spec = RunSpec("deepseek-v4-flash", "2", "TP2EP16", "ring_direct", "roce_dcqcn", "packet")
    small, large = (work(replace(spec, overrides=(("tokens", t),))) for t in (64, 256))
    # every collective's bytes are proportional to the tokens of a prefill pass: 4 × the tokens, 4 × the packets
    assert large.packet_hops == pytest.approx(4 * small.packet_hops) and small.packet_hops > 0
    assert (small.ranks, small.layers) == (32, 43)
    assert simulated_share({"params_json": '{"fast_forwarded_layers": 38}'}, 43) == pytest.approx(5 / 43)
    assert simulated_share({"params_json": None}, 43) == 1.0  # not recorded: every layer simulated


def test_the_calibration_is_measured_once_per_machine_and_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    lines: list[str] = []
    hop_s, rank_layer_s = calibrate("packet", lines.append)
    assert hop_s > 0 and rank_layer_s >= 0 and len(lines) == 1 and "calibration runs" in lines[0]
    cache = tmp_path / "moesim" / "run-cost.json"
    assert list(json.loads(cache.read_text()).values()) == [[hop_s, rank_layer_s]]
    assert calibrate("packet", lines.append) == (hop_s, rank_layer_s) and len(lines) == 1  # read back, not rerun


@pytest.mark.parametrize(("args", "option", "allowed"), [
    (("--executor", "bogus", "--budget", "1m"), "--executor", "dask, local, ray"),
    (("--backend", "nonsense", "--dry-run"), "--backend", "analytical, flow, fluid, packet"),
    (("--progress", "loud"), "--progress", "auto, bar, none, periodic, plain"),
])
def test_a_bad_option_is_one_line_naming_it_before_any_work(args: tuple[str, ...], option: str, allowed: str,
                                                           tmp_path: Path):
    done = _moesim("refine", str(tmp_path / "no-store"), *args)  # checked before the store is even looked for
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and option in done.stderr and f"(allowed: {allowed})" in done.stderr


def test_a_refine_is_listed_in_the_provenance_only_when_it_stored_a_row(fluid_store: Path, tmp_path: Path):
    store = _copy(fluid_store, tmp_path)
    cmd = [sys.executable, "-m", "moesim", "refine", str(store), "--workers", "1", "--progress", "plain"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:  # killed as its first round starts: the worker has not even started, nothing is stored
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("sweep refine on packet"):
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert [r["backend"] for r in _rows(store)] == ["fluid"] * 4
    assert json.loads(load_store_meta(store)[COMMAND_KEY]) == [SWEEP]
    # the same refine run through: now listed once, after the sweep
    done = _moesim("refine", str(store), "--workers", "1", "--budget", "none", "--progress", "none")
    assert done.returncode == 0, done.stderr
    commands = json.loads(load_store_meta(store)[COMMAND_KEY])
    assert len(commands) == 2 and commands[0] == SWEEP and commands[1].startswith("moesim refine ")
    # nothing left to refine: planned 0 runs, not listed again (a third, different command line)
    done = _moesim("refine", str(store), "--workers", "1", "--budget", "2h", "--progress", "none")
    assert done.returncode == 0 and "0 packet runs" in done.stdout
    assert json.loads(load_store_meta(store)[COMMAND_KEY]) == commands


def test_periodic_progress_beats_while_a_run_is_in_progress(fluid_store: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]):
    monkeypatch.setattr(progress_module, "PERIODIC_S", 0.2)
    store = _copy(fluid_store, tmp_path)
    refine(store, "packet", None, workers=1, progress="periodic")
    err = capsys.readouterr().err.splitlines()
    # the first round is one run (spawning its worker alone takes seconds): status lines while it runs
    first = err[err.index(next(line for line in err if line.startswith("sweep refine on packet: 1 runs"))) + 1:]
    waiting = [line for line in first if line.startswith("[0/1] 0 % done")]
    assert len(waiting) >= 3, err


def test_refine_with_an_ensemble_survives_kill_9_and_stores_every_member(fluid_store: Path, tmp_path: Path):
    """`refine --ensemble 2`: each packet run comes with its member 1, in the same round; killed after the
    first round, the same command stores the rest, and a member's row is what that member gives when run alone."""
    store = _copy(fluid_store, tmp_path)
    _kill_9_at(store, "[2/2]", "--ensemble", "2")  # the first run and its member
    stored = [r for r in _rows(store) if r["backend"] == "packet"]
    assert 2 <= len(stored) < 8 and all(r["status"] == "ok" for r in stored)
    again = refine(store, workers=1, progress="none", ensemble=2)
    assert again.ran == 8 - len(stored) and again.failures == () and again.remaining == 0
    packet = [r for r in _rows(store) if r["backend"] == "packet"]
    members = [r for r in packet if r["ensemble_member"] == "1"]
    assert len(packet) == 8 and len(members) == 4
    assert {(r["topology"], r["strategy"]) for r in members} == {(r["topology"], r["strategy"])
                                                                  for r in packet if r["ensemble_member"] is None}
    one = members[0]
    alone = simulate_run(row_spec(one))
    assert alone.wall_s == one["wall_s"]
    assert alone.parameters["network"]["packet_payload_bytes"] == 1024


def test_an_ensemble_of_one_is_a_one_line_error(fluid_store: Path):
    out = _moesim("refine", str(fluid_store), "--ensemble", "1", "--dry-run")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--ensemble: 1 members (allowed: 0" in out.stderr
