"""No congestion control (CC_MODE 0 and unhandled modes such as ASTRA-sim's 12): line rate forever."""

from __future__ import annotations

import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.network.cc import CC_ALGORITHMS, FlowCc, algorithm_for_mode
from moesim.network.params import REFERENCE_PRESETS


def test_rate_stays_at_line_rate_despite_cnps_and_int():
    f = FlowCc("none", REFERENCE_PRESETS["none"], 400e9)
    ints = np.array([[1000, 10 ** 9, 10 ** 7, int(400e9)]], dtype=np.int64)
    for t in range(0, 1_000_000, 1000):
        assert f.ack(t, ack_seq=t + 1, snd_nxt=t + 2, cnp=True, ints=ints, win_bytes=1000, base_rtt_ns=1) == 0
    f.advance(10_000_000)
    assert f.rate_bps == 400e9


def test_unhandled_modes_mean_no_congestion_control():
    assert algorithm_for_mode(12).name == "none"
    assert algorithm_for_mode(0).name == "none"
    assert algorithm_for_mode(1).name == "dcqcn"
    assert algorithm_for_mode(3).name == "hpcc"


def test_modes_the_reference_runs_but_moesim_lacks_are_errors():
    with pytest.raises(MoesimError, match="cc_mode.*HPCC-PINT"):
        algorithm_for_mode(10)


def test_registry_entries_have_descriptions_and_references():
    assert set(CC_ALGORITHMS.names()) >= {"none", "dcqcn", "hpcc"}
    for e in CC_ALGORITHMS:
        assert e.description and e.reference
