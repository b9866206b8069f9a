"""The sweep runner with the local executor: identical results, resume, failures, killed workers and drivers."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from exp_helpers import (
    assert_same_values,
    cmdline,
    descendants,
    kill_and_reap,
    moesim_cmd,
    store_rows,
    values,
    wait_gone,
)

from moesim.errors import MoesimError
from moesim.experiments import input_hash, run_sweep
from moesim.experiments.inputs import run_id_of
from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves this module out: its fixtures take minutes


def test_sweep_with_two_workers_equals_each_run_alone(small_specs: list, alone_results: dict,
                                                      reference_store: Path) -> None:
    rows = {r["spec_key"]: r for r in store_rows(reference_store)}
    assert len(rows) == len(small_specs) == 24
    for spec in small_specs:
        row, alone = rows[spec.key()], alone_results[spec.key()]
        assert row["status"] == "ok"
        assert (row["wall_s"], row["gpu_s"], row["comm_s"], row["bottleneck_rank"]) == \
               (alone.wall_s, alone.gpu_s, alone.comm_s, alone.bottleneck_rank)
        assert (row["cc_model"], row["cc_policy"], row["version"]) == (alone.cc_model, alone.cc_policy, alone.version)
        assert row["input_hash"] == input_hash(spec) and row["run_id"] == run_id_of(spec, input_hash(spec))


def test_runs_with_equal_inputs_are_one_simulation_stored_under_their_own_labels(small_specs: list,
                                                                                tmp_path: Path) -> None:
    # topology 6 is one server: no flow carries CC, so ib_cc0 and roce_dcqcn read the same inputs
    t6 = [s for s in small_specs if s.topology == "6"]
    summary = run_sweep(t6 + [s for s in small_specs if s.topology == "1"], tmp_path, workers=2, progress="none")
    assert (summary.ran, summary.simulations) == (8, 6)
    assert "8 done now in 6 simulations" in summary.lines()[0]
    rows = {(r["topology"], r["strategy"], r["network"]): r for r in store_rows(tmp_path)}
    for strategy in ("TP2EP16", "TP4EP8"):
        cc0, dcqcn = rows[("6", strategy, "ib_cc0")], rows[("6", strategy, "roce_dcqcn")]
        assert cc0["input_hash"] == dcqcn["input_hash"] and cc0["run_id"] != dcqcn["run_id"]
        assert [cc0[k] for k in ("wall_s", "gpu_s", "comm_s", "bottleneck_rank")] == \
               [dcqcn[k] for k in ("wall_s", "gpu_s", "comm_s", "bottleneck_rank")]
        assert (cc0["cc_model"], dcqcn["cc_model"]) == ("none", "dcqcn")
        assert json.loads(dcqcn["params_json"])["network"]["name"] == "roce_dcqcn"
        # on topology 1 the two modes are different simulations
        one_cc0, one_dcqcn = rows[("1", strategy, "ib_cc0")], rows[("1", strategy, "roce_dcqcn")]
        assert one_cc0["input_hash"] != one_dcqcn["input_hash"]


def test_rerun_does_nothing_and_a_partial_store_is_completed(small_specs: list, reference_store: Path,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "s"
    first = run_sweep(small_specs[:10], out, workers=2, progress="none")
    assert (first.cached, first.ran) == (0, 10)
    stamps = {r["run_id"]: r["finished_at"] for r in store_rows(out)}
    again = run_sweep(small_specs, out, workers=2, progress="none")
    assert (again.total, again.cached, again.ran, again.failures) == (24, 10, 14, ())
    # the ten runs of the first sweep were not redone, and the store equals an uninterrupted sweep
    assert {r["run_id"]: r["finished_at"] for r in store_rows(out) if r["run_id"] in stamps} == stamps
    assert_same_values(out, reference_store)
    assert run_sweep(small_specs, out, workers=2, progress="none").ran == 0


# A run that passes every up-front check but cannot finish: no window, no PFC headroom and a small
# buffer drop packets in the all-to-all incast, and the reference model has no retransmission timeout,
# so the packet backend ends it with a MoesimError (docs/reference-runs.md, S1).
LOSSY = (("buffer_bytes", 300_000), ("has_win", False), ("headroom_factor", 0.0))


def test_a_run_that_raises_is_recorded_and_the_sweep_goes_on(small_specs: list, tmp_path: Path) -> None:
    good = small_specs[:3]
    bad = RunSpec(good[0].model, "1", "TP2EP16", "ring_direct", "ib_cc0", "packet", LOSSY)
    summary = run_sweep([good[0], bad, *good[1:]], tmp_path, workers=2, progress="none")
    assert (summary.ran, summary.succeeded, len(summary.failures)) == (4, 3, 1)
    label, error = summary.failures[0]
    assert "headroom_factor=0.0" in label and "cannot complete" in error
    assert any(label in line for line in summary.lines())
    rows = {r["spec_key"]: r for r in store_rows(tmp_path)}
    assert rows[bad.key()]["status"] == "error" and "cannot complete" in rows[bad.key()]["error"]
    assert all(rows[s.key()]["status"] == "ok" for s in good)
    # failed runs are tried again by the next sweep, the others are kept
    again = run_sweep([good[0], bad, *good[1:]], tmp_path, workers=2, progress="none")
    assert (again.cached, again.ran) == (3, 1)


def test_impossible_combination_is_reported_before_anything_runs(small_specs: list, tmp_path: Path) -> None:
    bad = RunSpec(small_specs[0].model, "6", "TP4EP4")  # 16 ranks on a 32-GPU topology
    with pytest.raises(MoesimError, match=r"1 of 3 runs are impossible.*TP × EP = 16 does not match 32"):
        run_sweep([small_specs[0], bad, small_specs[1]], tmp_path / "out", workers=2, progress="none")
    assert not (tmp_path / "out").exists()


def test_unknown_and_unavailable_executors(small_specs: list, tmp_path: Path) -> None:
    with pytest.raises(MoesimError, match=r"unknown executor 'slurm' \(allowed: dask, local, ray\)"):
        run_sweep(small_specs[:1], tmp_path, executor="slurm", progress="none")
    if importlib.util.find_spec("distributed") is None:  # the optional `dask` extra (dask.distributed)
        with pytest.raises(MoesimError, match=r"dask is not installed"):
            run_sweep(small_specs[:1], tmp_path, executor="dask", progress="none")
    with pytest.raises(MoesimError, match=r"field '--workers': 0 is not allowed"):
        run_sweep(small_specs[:1], tmp_path, workers=0, progress="none")


class _KillWorkerOnLine(io.StringIO):
    """A progress stream that SIGKILLs one of this process's pool workers when line ``n`` is written."""

    def __init__(self, n: int, settle_s: float = 0.0) -> None:
        super().__init__()
        self.n, self.settle_s, self.lines, self.killed = n, settle_s, 0, None

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        if self.killed is None and self.lines >= self.n:
            workers = [p for p in descendants(os.getpid()) if "spawn_main" in cmdline(p)]
            if workers:
                self.killed = workers[0]
                os.kill(workers[0], signal.SIGKILL)
                time.sleep(self.settle_s)  # long enough for the pool to notice before the next submit
        return super().write(text)


@pytest.mark.slow
@pytest.mark.parametrize("settle_s", [0.0, 2.0], ids=["death-seen-by-wait", "death-seen-by-submit"])
def test_a_killed_worker_is_replaced_and_its_run_retried(small_specs: list, reference_store: Path,
                                                         tmp_path: Path, settle_s: float) -> None:
    stream = _KillWorkerOnLine(3, settle_s)  # the header, then two finished runs
    summary = run_sweep(small_specs, tmp_path, workers=2, progress="plain", stream=stream)
    assert stream.killed is not None
    assert (summary.ran, summary.failures) == (24, ())
    assert_same_values(tmp_path, reference_store)


@pytest.mark.slow
def test_kill_9_of_the_driver_leaves_a_consistent_store_and_the_rerun_finishes(
        small_dir: Path, small_specs: list, reference_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    proc = subprocess.Popen(moesim_cmd("sweep", "run", str(small_dir / "small.yaml"), "--out", str(out),
                                       "--workers", "2", "--progress", "plain"),
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        seen = []
        deadline = time.monotonic() + 300
        for line in proc.stderr:
            seen.append(line)
            if re.match(r"\[\s*4/24\]", line) or time.monotonic() > deadline:
                break
        workers = descendants(proc.pid)
    finally:
        kill_and_reap(proc)
    assert proc.returncode == -signal.SIGKILL, "".join(seen)
    wait_gone(workers)
    rows = store_rows(out)  # opens (replaying DuckDB's log) and holds complete rows only
    assert 4 <= len(rows) < 24
    assert all(r["status"] == "ok" and r["wall_s"] is not None and r["params_json"] for r in rows)
    reference = {v[0]: v for v in values(reference_store)}
    assert all(reference[v[0]] == v for v in values(out))
    summary = run_sweep(small_specs, out, workers=2, progress="none")
    assert (summary.cached, summary.ran, summary.failures) == (len(rows), 24 - len(rows), ())
    assert_same_values(out, reference_store)
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    assert con.execute("SELECT count(*), count(DISTINCT spec_key) FROM runs").fetchone() == (24, 24)
    con.close()


def test_sweep_with_diagnostics_writes_parquet(small_specs: list, tmp_path: Path) -> None:
    import numpy as np
    import pyarrow.parquet as pq

    spec = next(s for s in small_specs if s.topology == "6" and s.strategy == "TP4EP8" and s.network == "ib_cc0")
    summary = run_sweep([spec], tmp_path, workers=1, diagnostics=True, progress="none")
    assert summary.ran == 1 and not summary.failures
    (row,) = store_rows(tmp_path)
    alone = simulate_run(spec, diagnostics=True)
    got = pq.read_table(tmp_path / row["diagnostics_path"] / "link_bytes.parquet").column("link_bytes").to_numpy()
    np.testing.assert_array_equal(got, alone.diagnostics["link_bytes"])
    assert row["input_hash"] == input_hash(spec, diagnostics=True) != input_hash(spec)


@pytest.mark.slow
def test_kills_at_random_moments_leave_rows_and_diagnostics_consistent(small_dir: Path, small_specs: list,
                                                                     tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    out, rng, counts = tmp_path / "d", random.Random(7), []
    for _ in range(2):
        proc = subprocess.Popen(moesim_cmd("sweep", "run", str(small_dir / "small.yaml"), "--out", str(out),
                                           "--workers", "2", "--progress", "plain", "--diagnostics"),
                                stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        try:
            for line in proc.stderr:
                if re.match(r"\[\s*\d+/24\]", line):
                    break
            time.sleep(rng.uniform(0.0, 0.3))  # somewhere in the middle of writing, simulating or waiting
            workers = descendants(proc.pid)
        finally:
            kill_and_reap(proc)
        wait_gone(workers)
        rows = store_rows(out)
        counts.append(len(rows))
        for r in rows:
            assert r["status"] == "ok"
            assert pq.read_table(out / r["diagnostics_path"] / "link_bytes.parquet").num_rows > 0
            assert pq.read_table(out / "breakdown" / f"{r['run_id']}.parquet").num_rows > 0
    assert 1 <= counts[0] < 24 and counts == sorted(counts)
    summary = run_sweep(small_specs, out, workers=2, diagnostics=True, progress="none")
    assert (summary.cached, summary.failures) == (counts[-1], ())
    rows = store_rows(out)
    assert len(rows) == 24
    assert sorted(p.name for p in (out / "diagnostics").iterdir()) == sorted(r["run_id"] for r in rows)
    assert sorted(p.name for p in (out / "breakdown").iterdir()) == sorted(f"{r['run_id']}.parquet" for r in rows)
    for r in rows[:6]:
        spec = next(s for s in small_specs if s.key() == r["spec_key"])
        alone = simulate_run(spec, diagnostics=True)
        assert (r["wall_s"], r["gpu_s"], r["comm_s"]) == (alone.wall_s, alone.gpu_s, alone.comm_s)


def test_a_sweep_from_a_script_without_a_main_guard_stops_with_one_error(tmp_path: Path) -> None:
    """Spawned workers import the script again; without ``if __name__ == "__main__":`` that starts the sweep
    in every worker. The workers exit at once, quietly, and the sweep stops with one MoesimError."""
    script = tmp_path / "unguarded.py"
    script.write_text("import moesim\n"
                      f"moesim.sweep([{{'model': 'deepseek-v4-flash', 'topology': 6, 'strategy': 'TP2EP16', "
                      f"'backend': 'flow', 'tokens': 64}}], {str(tmp_path / 'out')!r}, workers=1)\n"
                      "print('finished')\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode != 0 and "finished" not in res.stdout
    assert res.stderr.count("Traceback") == 1 and "WorkerDied" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("moesim.errors.MoesimError: ") \
        and 'if __name__ == "__main__":' in res.stderr
