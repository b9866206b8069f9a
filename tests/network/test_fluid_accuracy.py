"""The fluid backend's accuracy check on the quick validation set (benchmarks/fluid_accuracy.py --quick):
four study configurations at tokens=256, fluid vs packet; fails when the median relative wall-time
error exceeds 3 % (the issue's target). Runs the packet backend for real (about 30 s)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "fluid_accuracy.py"


@pytest.mark.slow
def test_quick_set_median_error_within_target(capsys):
    spec = importlib.util.spec_from_file_location("fluid_accuracy", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rc = mod.main(["--quick"])
    out = capsys.readouterr().out
    assert "median |error|" in out
    assert rc == 0, out
