"""Progress on stderr (moesim.experiments.progress): a single run shows simulated time and layers done, a sweep
its runs done; ``--progress auto`` is a live line on a terminal and plain periodic lines otherwise (logs, CI).

Real processes; the display intervals (10 s between periodic lines, a live line after 1 s, a progress call
every 0.2 s) are set to 0 in the child so that runs of a fraction of a second show every line."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

import moesim

RUN = ["run", "--model", "deepseek-v4-flash", "--topology", "3", "--strategy", "TP2EP16", "--backend", "fluid",
       "--set", "tokens=64"]
SWEEP_MATRIX = """\
name: progress
factors:
  model: deepseek-v4-flash
  topology: 3
  strategy: [TP2EP16, TP4EP8, TP8EP4]
  algorithm: ring_direct
  network: ib_cc0
  backend: flow
  tokens: 64
"""
CHILD = """\
import sys
import moesim.experiments.progress as progress
import moesim.system.run as system_run
progress.PERIODIC_S = progress.LIVE_AFTER_S = 0.0
system_run.PROGRESS_EVERY_S = 0.0
from moesim.cli import run_cli
sys.exit(run_cli(sys.argv[1:]))
"""
LAYERS = moesim.load_model("deepseek-v4-flash").num_layers
RUN_LINE = re.compile(r"^deepseek-v4-flash/3/TP2EP16/ring_direct/ib_cc0 tokens=64: simulated (\d+\.\d{3}) ms, "
                      rf"(\d+)/{LAYERS} layers done, [0-9hms]+ elapsed(, ETA [0-9hms]+)?$")
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def child(*args: str, stderr: int | None = subprocess.PIPE,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE, stderr=stderr, text=True,
                          timeout=300, env=env)


def test_a_run_off_a_terminal_prints_periodic_lines() -> None:
    res = child(*RUN, "--json")  # --progress auto is the default; stderr is a pipe
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) > 5 and "\r" not in res.stderr and "\x1b" not in res.stderr
    parsed = [RUN_LINE.match(line) for line in lines]
    assert all(parsed), [line for line, m in zip(lines, parsed, strict=True) if not m][:3]
    simulated = [float(m.group(1)) for m in parsed if m]
    layers = [int(m.group(2)) for m in parsed if m]
    assert simulated == sorted(simulated) and layers == sorted(layers) and layers[-1] < LAYERS
    assert res.stdout.startswith("{") and res.stdout.count("\n") == 1  # the result alone on stdout


@pytest.mark.parametrize("kind", ["periodic", "plain"])
def test_periodic_and_plain_are_lines(kind: str) -> None:
    res = child(*RUN, "--progress", kind)
    assert res.returncode == 0 and res.stderr and all(RUN_LINE.match(x) for x in res.stderr.splitlines())


def test_no_progress() -> None:
    res = child(*RUN, "--progress", "none")
    assert res.returncode == 0 and res.stderr == "" and "wall" in res.stdout


def test_a_run_on_a_terminal_shows_a_live_line_that_fits_80_columns_then_erases_it() -> None:
    """stderr is an 80-column terminal (a pseudo-terminal read by a thread while the run goes on)."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the other end is closed and everything was read
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        res = child(*RUN, stderr=follower, env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")})
    finally:
        os.close(follower)
        reader.join(timeout=60)
        os.close(leader)
    shown = b"".join(chunks).decode()
    assert res.returncode == 0 and "wall" in res.stdout
    updates = [u for u in re.split(r"[\r\n]", ESCAPE.sub("", shown)) if u.strip()]
    assert updates and all(len(u) <= 80 for u in updates), max(updates, key=len)  # rich redraws 10 times a second
    assert all(u.startswith("deepseek-v4-flash/3/") and "layers, sim" in u and "ETA" in u for u in updates), updates[:3]
    done = [int(m.group(1)) for u in updates if (m := re.search(rf"(\d+)/{LAYERS} layers", u))]
    assert done == sorted(done)
    assert shown.endswith("\x1b[1A\x1b[2K")  # the line is erased: nothing is left behind


@pytest.mark.slow
def test_a_sweep_off_a_terminal_prints_a_header_and_status_lines(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(SWEEP_MATRIX)
    res = child("sweep", "run", str(tmp_path / "m.yaml"), "--out", str(tmp_path / "out"), "--workers", "1")
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert "\r" not in res.stderr and "\x1b" not in res.stderr
    statuses = [line for line in lines if line.startswith("[")]
    assert statuses and all(re.fullmatch(r"\[\d/3\] \d+ % done, 0 failed, \d+s elapsed(, ETA \d+s)?", s)
                            for s in statuses), lines
    assert statuses[-1].startswith("[3/3] 100 % done")
    assert "3 runs: 0 already in the store, 3 done now" in res.stdout


def test_an_unknown_display_is_an_input_error() -> None:
    res = child(*RUN, "--progress", "sparkles")
    assert res.returncode == 2 and "--progress: unknown display 'sparkles'" in res.stderr
