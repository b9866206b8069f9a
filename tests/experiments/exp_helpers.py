"""Helpers of the experiments tests (reading a store, finding and killing processes we started)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def store_rows(directory: Path, columns: str = "*") -> list[dict]:
    """All rows of a store, opened read-only the way the analysis opens it."""
    import duckdb

    con = duckdb.connect(str(directory / "results.duckdb"), read_only=True)
    try:
        cur = con.execute(f"SELECT {columns} FROM runs ORDER BY run_id")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


VALUE_COLUMNS = ("run_id", "spec_key", "model", "topology", "strategy", "tp", "ep", "algorithm", "network",
                 "backend", "overrides_json", "wall_s", "gpu_s", "comm_s", "bottleneck_rank", "cc_model",
                 "cc_policy", "status", "version", "params_json", "input_hash")
"""Columns that must be identical between two sweeps of the same runs (not timings or timestamps)."""


def _comparable(column: str, value: object) -> object:
    """``params_json`` without ``source_sha256`` (the simulator's files may be edited between two sweeps of a
    test session by other work on this tree; the parameters themselves must be equal)."""
    if column == "params_json" and value:
        params = json.loads(str(value))
        params.pop("source_sha256", None)
        return json.dumps(params, sort_keys=True)
    return value


def values(directory: Path) -> list[tuple]:
    return [tuple(_comparable(c, r[c]) for c in VALUE_COLUMNS) for r in store_rows(directory)]


def moesim_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "moesim.cli", *args]


def descendants(pid: int) -> list[int]:
    """Process ids whose parent chain leads to ``pid`` (read from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        frontier += kids
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def sigint_default() -> None:
    """``preexec_fn`` for a child we Ctrl-C: a shell starts background jobs with SIGINT ignored, and a
    Python started so never raises KeyboardInterrupt; the child gets the default disposition back."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def kill_and_reap(proc: subprocess.Popen) -> None:
    """SIGKILL a process we started and wait for it."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def wait_gone(pids: list[int], timeout_s: float = 20.0) -> None:
    """Wait until the given processes (orphaned workers of a killed driver) have exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() and "spawn_main" in cmdline(p)
                                              for p in pids):
        time.sleep(0.2)


def assert_same_values(directory: Path, reference: Path) -> None:
    """Same runs with the same values; on failure, name the first differing run and columns."""
    got, want = values(directory), values(reference)
    assert [g[0] for g in got] == [w[0] for w in want], "different run_ids"
    for g, w in zip(got, want, strict=True):
        diff = {c: (a, b) for c, a, b in zip(VALUE_COLUMNS, g, w, strict=True) if a != b}
        assert not diff, f"run {g[1]} differs: {diff}"
