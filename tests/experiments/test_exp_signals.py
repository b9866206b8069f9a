"""Ctrl-C and SIGTERM during a sweep: one line saying how many runs are stored, the shell's exit code, no
traceback, no leaked-semaphore warning, no worker left behind; the same command then finishes the rest."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from exp_helpers import descendants, kill_and_reap, moesim_cmd, sigint_default, store_rows


def _alive(pids: list[int], timeout_s: float = 30.0) -> list[int]:
    """The processes of ``pids`` still running after waiting up to ``timeout_s`` for them to exit."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = []
        for p in pids:
            try:
                state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                alive.append(p)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def _sweep(small_dir: Path, out: Path) -> list[str]:
    return moesim_cmd("sweep", "run", str(small_dir / "small.yaml"), "--out", str(out), "--workers", "1",
                      "--progress", "plain")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["ctrl-c", "sigterm"])
def test_interrupted_sweep_says_what_it_stored(small_dir: Path, tmp_path: Path, signum: int, code: int) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(_sweep(small_dir, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    try:
        assert proc.stderr is not None
        header = proc.stderr.readline()
        assert "24 runs, 0 already in" in header, header
        first = proc.stderr.readline()  # `plain` prints a line as each run is stored
        assert first.startswith("[ 1/24]"), first
        workers = descendants(proc.pid)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        kill_and_reap(proc)
    lines = [line for line in stderr.splitlines() if not line.startswith("[")]
    assert proc.returncode == code, stderr
    assert len(lines) == 1, stderr
    stored = len([r for r in store_rows(out) if r["status"] == "ok"])
    assert 1 <= stored < 24
    assert lines[0] == f"interrupted: {stored} of 24 runs stored, rerun the same command to resume"
    assert "Traceback" not in stderr and "leaked" not in stderr and stdout == ""
    assert not _alive(workers), "a worker outlived the driver"
    # the same command resumes: only the missing runs are simulated
    done = subprocess.run(_sweep(small_dir, out), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"24 runs: {stored} already in the store, {24 - stored} done now" in done.stdout


def test_sigterm_outside_a_sweep_is_one_line_and_143(tmp_path: Path) -> None:
    """A single run terminated: no traceback, the shell's code for SIGTERM."""
    proc = subprocess.Popen(moesim_cmd("run", "--model", "deepseek-v4-flash", "--topology", "3", "--strategy",
                                       "TP2EP16", "--backend", "packet", "--progress", "none"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3.0)  # inside the simulation (a packet run of the full model takes minutes)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        kill_and_reap(proc)
    assert proc.returncode == 143 and stderr.strip() == "moesim: terminated", stderr
