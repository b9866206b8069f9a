"""Chrome trace export: the JSON Trace Event Format's structure, totals that match the run, the size bound,
and `moesim run --trace`."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections import defaultdict

import pytest

from moesim.errors import MoesimError
from moesim.system.run import prepare, result_of, simulate_prepared
from moesim.system.spec import RunSpec
from moesim.system.trace import (
    CHUNK_TID,
    COLLECTIVE_TID,
    COMPUTE_TID,
    TRACK_TID,
    chrome_trace,
    write_chrome_trace,
)


def _run(fast_forward: bool, topology: str = "1", strategy: str = "TP2EP16", overrides=()):
    p = prepare(RunSpec("deepseek-v4-flash", topology, strategy, "dbt_direct", "ib_cc0", "flow", overrides))
    p = dataclasses.replace(p, settings=dataclasses.replace(p.settings, fast_forward=fast_forward))
    sim = simulate_prepared(p, detail=True)
    return result_of(p, sim), sim.breakdown


@pytest.fixture(scope="module")
def full():
    return _run(False)


@pytest.fixture(scope="module")
def fast():
    return _run(True)


def _check_structure(trace, result):
    events = trace["traceEvents"]
    assert json.loads(json.dumps(trace)) == trace
    ranks = range(len(result.ranks))
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(names) == list(ranks) and "bottleneck" in names[result.bottleneck_rank]
    last_ts: dict[tuple[int, int], float] = defaultdict(float)
    for e in events:
        assert {"ph", "ts", "pid", "tid", "name"} <= e.keys() and e["pid"] in ranks
        if e["ph"] == "M":
            continue
        key = (e["pid"], e["tid"])
        assert e["ts"] >= last_ts[key]  # ordered per rank and thread
        last_ts[key] = e["ts"]
        if e["ph"] == "X":
            assert e["dur"] >= 0
    _check_nesting(events)
    return events


def _check_nesting(events):
    """Slices on one track (rank, tid) nest: each one starts after the enclosing ones' starts and ends before
    their ends (1e-6 µs of rounding)."""
    open_ends: dict[tuple[int, int], list[float]] = defaultdict(list)
    for e in sorted((e for e in events if e["ph"] == "X"), key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"])):
        stack = open_ends[(e["pid"], e["tid"])]
        while stack and stack[-1] <= e["ts"] + 1e-6:
            stack.pop()
        end = e["ts"] + e["dur"]
        assert not stack or end <= stack[-1] + 1e-6, f"slice {e['name']} on rank {e['pid']} track {e['tid']} overlaps"
        stack.append(end)


def _busy_us(events, thread):
    """Per rank, the time of a thread's nodes: simulated slices and fast-forward summaries."""
    out: dict[int, float] = defaultdict(float)
    tid = COMPUTE_TID if thread == "compute" else COLLECTIVE_TID
    for e in events:
        if e["ph"] == "X" and e["cat"] == "summary" and e["args"]["thread"] == thread:
            out[e["pid"]] += e["args"]["busy_s"] * 1e6
        elif e["ph"] == "X" and e["tid"] == tid:
            out[e["pid"]] += e["dur"]
    return out


@pytest.mark.parametrize("which", ["full", "fast"])
@pytest.mark.slow
def test_trace_structure_and_totals_match_the_run(which, request):
    result, breakdown = request.getfixturevalue(which)
    trace = chrome_trace(result, breakdown)
    events = _check_structure(trace, result)
    compute, comm = _busy_us(events, "compute"), _busy_us(events, "collectives")
    for r, t in enumerate(result.ranks):
        assert compute[r] == pytest.approx(t.gpu_s * 1e6, rel=1e-6)
        assert comm[r] == pytest.approx(t.comm_s * 1e6, rel=1e-6)
        ends = [e["ts"] + e["dur"] for e in events if e["ph"] == "X" and e["pid"] == r]
        assert max(ends) == pytest.approx(t.wall_s * 1e6, rel=1e-9)
    assert trace["otherData"]["wall_s"] == result.wall_s
    chunks = [e for e in events if e["ph"] == "X" and CHUNK_TID <= e["tid"] < CHUNK_TID + TRACK_TID]
    assert chunks and all(e["name"].startswith("chunk ") for e in chunks)


def test_fast_forwarded_layers_are_summarised_not_expanded(full, fast):
    events_full = chrome_trace(*full)["traceEvents"]
    events_fast = chrome_trace(*fast)["traceEvents"]
    summaries = [e for e in events_fast if e.get("cat") == "summary"]
    assert not any(e.get("cat") == "summary" for e in events_full)
    assert {e["pid"] for e in summaries} == set(range(len(fast[0].ranks)))
    assert all(e["name"].startswith("fast-forwarded layers") for e in summaries)
    assert all(e["tid"] >= 3 * TRACK_TID for e in summaries)  # on summary tracks, apart from what ran
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events_fast if e["name"] == "thread_name"}
    assert all(names[(e["pid"], e["tid"])].endswith("(summary)") for e in summaries)
    assert len(events_fast) < len(events_full) / 3


def test_the_event_bound_drops_detail_then_summarises_per_layer(full):
    result, breakdown = full
    everything = chrome_trace(result, breakdown, links=True)["traceEvents"]
    assert any(e["ph"] == "C" for e in everything)
    assert all(e["args"]["Gbit/s"] >= 0 for e in everything if e["ph"] == "C")
    nodes = breakdown.nodes.num_rows
    bound = sum(e["ph"] != "M" for e in everything) - 1  # metadata events do not count
    no_counters = chrome_trace(result, breakdown, links=True, max_events=bound)["traceEvents"]
    assert not any(e["ph"] == "C" for e in no_counters) and any(e.get("cat") == "chunk" for e in no_counters)
    per_layer = chrome_trace(result, breakdown, max_events=nodes - 1)["traceEvents"]
    xs = [e for e in per_layer if e["ph"] != "M"]
    assert len(xs) <= nodes - 1 and all(e["name"].startswith("layer ") for e in xs)
    _check_structure({"traceEvents": per_layer}, result)
    with pytest.raises(MoesimError, match="raise max_events"):
        chrome_trace(result, breakdown, max_events=10)


def test_write_is_atomic_and_bad_paths_are_one_line_errors(full, tmp_path):
    result, breakdown = full
    path = write_chrome_trace(tmp_path / "sub" / "run.json", result, breakdown)
    assert json.loads(path.read_text())["traceEvents"]
    assert [p.name for p in path.parent.iterdir()] == ["run.json"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(MoesimError, match="file"):
        write_chrome_trace(tmp_path / "file" / "run.json", result, breakdown)


def _moesim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moesim.cli", *args], capture_output=True, text=True, check=False)


RUN = ["run", "--model", "deepseek-v4-flash", "--topology", "1", "--strategy", "TP2EP16", "--backend", "flow",
       "--progress", "none"]


def test_cli_trace_writes_the_same_figures_as_the_run(tmp_path):
    out = tmp_path / "t.json"
    proc = _moesim(*RUN, "--trace", str(out), "--trace-links", "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    trace = json.loads(out.read_text())
    assert trace["otherData"]["wall_s"] == record["wall_s"]
    assert any(e["ph"] == "C" for e in trace["traceEvents"])
    plain = json.loads(_moesim(*RUN, "--json").stdout)
    assert plain == record  # the trace changes no figure


@pytest.mark.parametrize("extra,needle", [
    (["--trace", "{tmp}"], "is a folder"),
    (["--trace", "{tmp}/f/x.json"], "is a file, not a folder"),
    (["--trace-links"], "goes with --trace"),
    (["--trace", "-"], "name a file"),
])
def test_cli_trace_errors_are_one_line(tmp_path, extra, needle):
    (tmp_path / "f").write_text("x")
    proc = _moesim(*RUN, *[a.format(tmp=tmp_path) for a in extra])
    assert proc.returncode != 0 and needle in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_slices_nest_on_every_track_with_overlapping_micro_batches():
    """Two-batch overlap runs compute beside communication and several chunks at once: every track still
    holds slices that nest (here: never overlap), with fast-forward on and off."""
    for fast_forward in (False, True):
        result, breakdown = _run(fast_forward, "hgx-h100:4", "TP4EP8", (("overlap", "two-batch"),))
        events = _check_structure(chrome_trace(result, breakdown), result)
        compute, comm = _busy_us(events, "compute"), _busy_us(events, "collectives")
        assert compute[0] == pytest.approx(result.ranks[0].gpu_s * 1e6, rel=1e-6)
        assert comm[0] == pytest.approx(result.ranks[0].comm_s * 1e6, rel=1e-6)
