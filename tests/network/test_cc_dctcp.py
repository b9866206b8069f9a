"""DCTCP, rate-based (CC_MODE 8, docs/reference-semantics.md A.1.3): the state machine against closed
forms, an incast on the packet backend, a run with ``cc_mode=8``, and the proof that the algorithm is
one module plus its registry line.

Shipped parameters: EWMA_GAIN g = 1/256, MIN_RATE 100 Mb/s, 1000 B packets; DCTCP_RATE_AI 1000 Mb/s.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import star

import moesim
from moesim.errors import MoesimError
from moesim.network import BACKENDS
from moesim.network.base import Flow
from moesim.network.cc import CC_ALGORITHMS, FlowCc, algorithm_for_mode
from moesim.network.params import REFERENCE_PRESETS, NetworkParams
from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec

LINE = 100e9
SHIPPED = NetworkParams()
G = SHIPPED.rate.ewma_gain
AI = 1000e6
MTU = 1000


def test_the_first_window_only_starts_the_count():
    """batch = packets in flight + 1; alpha stays 1; the new window's increase is capped at line rate."""
    f = FlowCc("dctcp", SHIPPED, LINE)
    f.ack(0, ack_seq=MTU, snd_nxt=20 * MTU)
    assert (f["batch"], f["last_update_seq"], f["alpha"]) == (21, 20 * MTU, 1.0)
    assert f.rate_bps == LINE


def test_an_echo_halves_the_rate_then_cwr_holds_until_the_cut_is_acknowledged():
    f = FlowCc("dctcp", SHIPPED, LINE)
    f.ack(0, ack_seq=MTU, snd_nxt=20 * MTU)
    f.ack(1, ack_seq=2 * MTU, snd_nxt=21 * MTU, cnp=True)  # alpha = 1: R·(1 − 1/2), CWR until 21 000
    assert f.rate_bps == LINE / 2 and f["cwr"] == 1 and f["high_seq"] == 21 * MTU
    f.ack(2, ack_seq=3 * MTU, snd_nxt=22 * MTU, cnp=True)  # in CWR: counted, no cut
    assert f.rate_bps == LINE / 2 and f["ecn_count"] == 2
    f.ack(3, ack_seq=21 * MTU, snd_nxt=40 * MTU)  # a new window (> 20 000): alpha update; still CWR
    assert f["alpha"] == pytest.approx((1 - G) + G * 2 / 21, rel=1e-15)
    assert f["batch"] == 20 and f["ecn_count"] == 0 and f.rate_bps == LINE / 2
    f.ack(4, ack_seq=22 * MTU, snd_nxt=41 * MTU)  # passes 21 000: CWR ends, no new window yet
    assert f["cwr"] == 0 and f.rate_bps == LINE / 2
    for k in (1, 2, 3):  # each later window adds DCTCP_RATE_AI
        f.ack(4 + k, ack_seq=(40 + 20 * (k - 1)) * MTU + 1, snd_nxt=(60 + 20 * (k - 1)) * MTU)
        assert f.rate_bps == LINE / 2 + k * AI


def test_alpha_is_an_ewma_of_the_marked_fraction_of_each_window():
    """alpha ← (1 − g)·alpha + g·min(1, echoes / batch), once per window (a window of 10 in flight: 11)."""
    f = FlowCc("dctcp", SHIPPED, LINE)
    f.ack(0, ack_seq=MTU, snd_nxt=10 * MTU)
    seq, alpha = 10 * MTU, 1.0
    for marks in (0, 3, 13, 5, 0):
        for _ in range(marks):
            f.ack(0, ack_seq=seq, snd_nxt=seq, cnp=True)  # not past the update sequence: counted only
        f.ack(0, ack_seq=seq + MTU, snd_nxt=seq + 11 * MTU)
        alpha = (1 - G) * alpha + G * min(1.0, marks / 11)
        assert f["alpha"] == pytest.approx(alpha, rel=1e-14)
        seq += 11 * MTU


def test_sustained_echoes_halve_the_rate_per_window_down_to_min_rate():
    """One packet in flight per window (batch 1), every ACK echoed: alpha stays exactly 1 and each window
    halves the rate: R_k = max(MIN_RATE, LINE / 2^k)."""
    f = FlowCc("dctcp", SHIPPED, LINE)
    for k in range(1, 14):
        f.ack(k, ack_seq=k * MTU, snd_nxt=k * MTU, cnp=True)
        assert f["alpha"] == 1.0
        assert f.rate_bps == max(SHIPPED.rate.min_rate_bps, LINE / 2 ** k)
    assert f.rate_bps == SHIPPED.rate.min_rate_bps


def test_cc_mode_8_is_dctcp_and_its_capabilities_say_where_it_runs():
    algorithm = algorithm_for_mode(8)
    assert algorithm is CC_ALGORITHMS.get("dctcp")
    assert (algorithm.uses_ecn, algorithm.uses_cnp, algorithm.uses_int, algorithm.controls_rate) == (
        True, False, False, True)
    params = SHIPPED.with_overrides({"cc_mode": 8})
    assert params.cc_name == "dctcp" and params.int_bytes == 0
    with pytest.raises(MoesimError, match=r"cc_mode.*8 \(dctcp\) has no fluid model"):
        BACKENDS.get("fluid")(star(2), params)


def test_packet_incast_cuts_to_half_then_converges_to_the_fair_share():
    """8-to-1 incast on one 400 Gb/s switch under the reference's DCQCN settings (ECN on, no window) with
    DCTCP: the first echo halves every sender (alpha starts at 1), the queue stays below the PFC
    threshold and the rates settle at the fair share, 400/8 Gb/s, where no-CC senders stay at line rate."""
    n, size, cap = 8, 2_000_000, 400e9
    params = REFERENCE_PRESETS["dcqcn"].with_overrides({"cc_mode": 8})
    backend = BACKENDS.get("packet")(star(n + 1), params)
    for i in range(n):
        backend.start_flow(Flow(i, i, n, size), 0.0)
    rates, t_ns = [], 0
    while backend.active_flows:
        t_ns += 2000
        while backend.advance_to(t_ns * 1e-9):
            pass
        progress = backend.flow_progress()
        if len(progress) == n:
            rates.append([progress[i][1] for i in range(n)])
    st = backend.stats()
    assert st["delivered_bytes"] == n * size and st["drops"] == 0 and st["pauses"] == 0
    assert st["cnps"] > 0
    r = np.array(rates)
    assert np.all(r[0] == cap) and np.any(np.all(r == cap / 2, axis=1))
    assert np.all(np.abs(r[-1] / (cap / n) - 1) < 0.02)
    assert t_ns * 1e-9 > n * size * 8 / cap


def test_a_study_run_takes_cc_mode_8_as_a_network_parameter():
    spec = RunSpec("deepseek-v4-flash", "3", "TP16EP2", "ring_direct", "roce_dcqcn", "packet",
                   (("cc_mode", 8), ("tokens", 64)))
    result = simulate_run(spec)
    assert result.cc_model == "dctcp"
    assert result.parameters["backend"]["cc_algorithm"] == "dctcp"
    assert math.isfinite(result.ranks[result.bottleneck_rank].wall_s)


def test_dctcp_is_one_module_plus_its_registry_line_and_this_test():
    """Adding an algorithm touches its module, the import line of ``moesim.network.cc`` and its test file:
    no other source or test file names it."""
    src = Path(moesim.__file__).resolve().parent
    tests = Path(__file__).resolve().parents[1]

    def naming(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.rglob("*.py") if re.search(r"\bdctcp\b", p.read_text())}

    assert naming(src) == {"network/cc/dctcp.py", "network/cc/__init__.py"}
    assert naming(tests) - {"test_cli_conventions.py"} == {"network/test_cc_dctcp.py"}  # that one lists the registry
