"""The fluid backend's accuracy check on the quick validation set (research/fluid_accuracy.py --quick):
four study configurations at tokens=256, fluid vs packet; fails when the median relative wall-time
error exceeds 3 %. Runs the packet backend for real (about 30 s). Also: the
study-scale set's packet times are at hand, and a malformed set file gets a one-line error."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "fluid_accuracy.py"


def load_script():
    spec = importlib.util.spec_from_file_location("fluid_accuracy", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_quick_set_median_error_within_target(capsys):
    rc = load_script().main(["--quick"])
    out = capsys.readouterr().out
    assert "median |error|" in out
    assert rc == 0, out


def test_the_study_scale_set_has_every_packet_time_in_the_cache():
    """The documented study-scale command must not fall back to hours of packet runs: each of the 38
    configurations of research/study_scale_set.txt has its 4096-token packet wall time in the cache."""
    mod = load_script()
    cfgs = mod.read_list(SCRIPT.parent / "study_scale_set.txt")
    cache = json.loads((SCRIPT.parent / "fluid_packet_cache.json").read_text())
    assert len(cfgs) == len(set(cfgs)) == 38
    assert [c for c in cfgs if "/".join(c) + "/4096" not in cache] == []


def test_a_malformed_list_line_names_the_file_and_line(tmp_path):
    bad = tmp_path / "set.txt"
    bad.write_text("# topology strategy algorithm mode\n1 TP2EP16 ring_direct ib_cc0\n2 TP4EP8 ring_direct\n")
    with pytest.raises(SystemExit, match=r"set.txt:3: expected 'topology strategy algorithm mode'"):
        load_script().read_list(bad)
