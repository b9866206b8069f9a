"""benchmarks/bench_packet.py against a src tree on disk (``--baseline-src``): the ablation path of
research/packet-event-cost.md. Real runs in fresh processes, no mocks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "benchmarks" / "bench_packet.py"


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, str(BENCH), *args], env=env, capture_output=True, text=True,
                          check=False, cwd=ROOT)


def test_baseline_src_that_is_no_src_tree_is_one_line_error(tmp_path: Path) -> None:
    res = _bench("--baseline-src", str(tmp_path), "--runs", "6/TP2EP16/dbt_direct/ib_cc0", "--tokens", "64")
    assert res.returncode != 0
    assert res.stderr.strip() == f"bench_packet: --baseline-src {tmp_path}: not a src directory (no moesim package)"


@pytest.mark.slow
def test_same_tree_as_baseline_is_bit_identical() -> None:
    """The tree against itself: both processes give the same wall time to the bit, the same events."""
    res = _bench("--baseline-src", str(ROOT / "src"), "--runs", "6/TP2EP16/dbt_direct/ib_cc0", "--tokens", "64")
    assert res.returncode == 0, res.stderr[-2000:]
    row = next(line for line in res.stdout.splitlines() if line.startswith("6/TP2EP16/dbt_direct/ib_cc0"))
    assert "identical" in row
    assert "baseline" not in row.split("identical", 1)[1]  # same event count: no baseline events/pkt shown
    assert "median ratio baseline/current CPU" in res.stdout
