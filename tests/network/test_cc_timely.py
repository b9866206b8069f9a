"""TIMELY (CC_MODE 7; Mittal et al., SIGCOMM 2015, Algorithm 1): the state machine against closed forms,
the RTT sample the packet backend's ACKs carry, an incast on the packet and on the fluid backend, and
the proof that the algorithm is one module plus its registry line.

Paper parameters: α = 0.875, β = 0.8, T_low = 50 µs, T_high = 500 µs, minRTT = 20 µs, δ = 10 Mb/s,
N = 5; MIN_RATE 100 Mb/s (the shared rate key). A completion event is an ACK past the sequence sent at
the previous one; the first only records its RTT.
"""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from helpers import star

import moesim
from moesim.network import BACKENDS
from moesim.network.base import Flow
from moesim.network.cc import CC_ALGORITHMS, FlowCc, algorithm_for_mode
from moesim.network.packet.layout import QP_ACTIVE
from moesim.network.params import REFERENCE_PRESETS, NetworkParams

LINE = 100e9
P = NetworkParams().with_overrides({"cc_mode": 7})
ALPHA, BETA, DELTA, N = 0.875, 0.8, 10e6, 5
T_LOW, T_HIGH, MIN_RTT = 50_000, 500_000, 20_000
MIN_RATE = P.rate.min_rate_bps


class Completions:
    """Feeds a flow one completion event per call: each ACK passes the sequence of the previous one."""

    def __init__(self, params: NetworkParams = P) -> None:
        self.f = FlowCc("timely", params, LINE)
        self.seq = 0

    def __call__(self, rtt_ns: int) -> float:
        self.f.ack(self.seq, ack_seq=self.seq + 1, snd_nxt=self.seq + 1, rtt_ns=rtt_ns)
        self.seq += 1
        return self.f.rate_bps


def test_the_paper_defaults_are_the_parameters():
    t = P.cc_params(CC_ALGORITHMS.get("timely").params_type)
    assert (t.rtt_ewma_alpha, t.md_beta, t.t_low_s, t.t_high_s, t.min_rtt_s, t.ai_delta_bps, t.hai_completions) == (
        ALPHA, BETA, 50e-6, 500e-6, 20e-6, DELTA, N)


def test_the_first_completion_only_records_the_rtt_and_other_acks_do_nothing():
    f = FlowCc("timely", P, LINE)
    f.ack(0, ack_seq=1000, snd_nxt=20_000, rtt_ns=700_000)
    assert (f.rate_bps, f["prev_rtt_ns"], f["last_update_seq"]) == (LINE, 700_000, 20_000)
    f.ack(1, ack_seq=20_000, snd_nxt=30_000, rtt_ns=900_000)  # not past 20 000: no completion event
    f.ack(2, ack_seq=30_000, snd_nxt=40_000)  # no RTT sample
    assert (f.rate_bps, f["prev_rtt_ns"], f["last_update_seq"]) == (LINE, 700_000, 20_000)


def test_above_t_high_the_rate_is_cut_by_beta_times_the_excess_fraction():
    """RTT > T_high: R ← R·(1 − β·(1 − T_high/RTT)), whatever the gradient."""
    c = Completions()
    c(1_000_000)
    rate = LINE
    for rtt in (1_000_000, 800_000, 2_500_000):
        rate *= 1 - BETA * (1 - T_HIGH / rtt)
        assert c(rtt) == pytest.approx(rate, rel=1e-15)


def test_below_t_low_the_rate_grows_by_delta_up_to_the_line_rate():
    c = Completions()
    c(1_000_000)
    cut = c(1_000_000)  # 0.6·LINE
    assert cut == pytest.approx(0.6 * LINE, rel=1e-15)
    for k in range(1, 4):  # falling RTTs, yet below T_low there is no HAI: + δ each
        assert c(40_000 - k) == pytest.approx(cut + k * DELTA, rel=1e-15)
    f = FlowCc("timely", P, LINE)
    f.ack(0, ack_seq=1, snd_nxt=1, rtt_ns=10_000)
    f.ack(1, ack_seq=2, snd_nxt=2, rtt_ns=10_000)
    assert f.rate_bps == LINE


def test_the_gradient_is_the_ewma_of_rtt_differences_over_min_rtt():
    """rtt_diff_k = (1 − α)·rtt_diff_{k−1} + α·(rtt_k − rtt_{k−1}), gradient = rtt_diff / minRTT; a
    positive gradient in the band cuts R ← R·(1 − β·gradient)."""
    c = Completions()
    rtts = [100_000, 101_000, 103_000, 103_500]
    c(rtts[0])
    diff, rate = 0.0, LINE
    for prev, rtt in pairwise(rtts):
        diff = (1 - ALPHA) * diff + ALPHA * (rtt - prev)
        rate *= 1 - BETA * diff / MIN_RTT
        assert c(rtt) == pytest.approx(rate, rel=1e-14)
        assert c.f["rtt_diff_ns"] == pytest.approx(diff, rel=1e-15)
        assert c.f["gradient"] == pytest.approx(diff / MIN_RTT, rel=1e-15)
    assert rate == pytest.approx(LINE * (1 - BETA * 875 / MIN_RTT) * (1 - BETA * 1859.375 / MIN_RTT)
                                 * (1 - BETA * 669.921875 / MIN_RTT), rel=1e-14)


def test_a_steep_gradient_cuts_to_min_rate():
    """1 − β·gradient ≤ 0 (gradient ≥ 1.25): the factor is 0, the rate MIN_RATE."""
    c = Completions()
    c(100_000)
    assert c(130_000) == MIN_RATE  # gradient = 0.875·30 000 / 20 000 = 1.3125


def test_hai_after_n_completions_of_negative_gradient_and_a_positive_one_resets_it():
    """In the band with gradient ≤ 0: R + δ, or R + N·δ from the N-th consecutive negative gradient on."""
    c = Completions()
    c(1_000_000)
    rate = c(1_000_000)  # 0.6·LINE, to leave room to grow
    rtt = 400_000  # falling RTTs in the band: every gradient is negative
    steps = []
    for _ in range(7):
        rtt -= 1000
        new = c(rtt)
        steps.append(round((new - rate) / DELTA))
        rate = new
    # the first falls from 1 000 000 to 399 000 (count 1), then 2, 3, ...: HAI from the 5th
    assert steps == [1, 1, 1, 1, N, N, N]
    c(rtt + 20_000)  # a rise: positive gradient, a cut, the count restarts
    assert c.f["neg_count"] == 0


def test_cc_mode_7_is_timely_reading_rtt_samples_only():
    algorithm = algorithm_for_mode(7)
    assert algorithm is CC_ALGORITHMS.get("timely")
    assert (algorithm.uses_rtt, algorithm.uses_ecn, algorithm.uses_cnp, algorithm.uses_int,
            algorithm.controls_rate) == (True, False, False, False, True)
    assert P.cc_name == "timely" and P.int_bytes == 0


def test_a_packet_acks_rtt_sample_is_its_round_trip():
    """A lone flow on a 2-host star at 400 Gb/s: each ACK's RTT sample is the data packet's two hops
    (0.5 µs + ⌊1036·8/400 + 0.5⌋ = 21 ns each) plus the ACK's two (0.5 µs + ⌊48·8/400 + 0.5⌋ = 1 ns)."""
    backend = BACKENDS.get("packet")(star(2), REFERENCE_PRESETS["dcqcn"].with_overrides({"cc_mode": 7}))
    backend.start_flow(Flow(0, 0, 1, 200_000), 0.0)
    backend.advance_to(3e-6)
    (q,) = np.flatnonzero(backend.S.qp["state"] == QP_ACTIVE)  # the lone flow's queue pair
    assert backend.S.qp_cc[q, CC_ALGORITHMS.get("timely").slots["prev_rtt_ns"]] == 2 * (500 + 21) + 2 * (500 + 1)


def incast_rates(backend_name: str, n: int, size: int):
    """n-to-1 incast on a 400 Gb/s star (the reference's DCQCN settings: no window) under TIMELY with the
    paper's parameters: (every sender's rate each 2 µs, backend)."""
    params = REFERENCE_PRESETS["dcqcn"].with_overrides({"cc_mode": 7})
    backend = BACKENDS.get(backend_name)(star(n + 1), params)
    for i in range(n):
        backend.start_flow(Flow(i, i, n, size), 0.0)
    rates, t_ns = [], 0
    while backend.active_flows:
        t_ns += 2000
        while backend.advance_to(t_ns * 1e-9):
            pass
        if backend_name == "packet":
            live = [r for _, r in backend.flow_progress().values()]
        else:
            live = list(backend.flow_table.cols["st"][:backend.flow_table.n, 0])
        if len(live) == n:
            rates.append(live)
    return np.array(rates), backend, params


def test_packet_incast_rates_fall_and_every_byte_arrives():
    """8-to-1 at 400 Gb/s: the senders start at line rate; the queue the incast builds raises the RTT
    past T_low with a rising gradient, which cuts every sender below its fair share (400/8 Gb/s); all
    flows complete, every byte is delivered, none dropped."""
    n, size, cap = 8, 4_000_000, 400e9
    r, backend, _ = incast_rates("packet", n, size)
    st = backend.stats()
    assert np.all(r[0] == cap)
    assert np.all(r.min(axis=0) < cap / n)
    assert st["completed_flows"] == n and st["delivered_bytes"] == n * size and st["drops"] == 0


def test_fluid_incast_rates_fall_and_every_byte_arrives():
    """The same incast on the fluid backend (one ACK per step whose RTT sample is the base RTT plus the
    path's queueing): rates start at line rate and fall below the fair share; all flows complete and the
    link into the receiver carries exactly n·size·(payload + headers)/payload wire bytes."""
    n, size, cap = 8, 4_000_000, 400e9
    r, backend, params = incast_rates("fluid", n, size)
    assert np.all(r[0] == cap)
    assert np.all(r.min(axis=0) < cap / n)
    assert backend.active_flows == 0
    payload = params.transport.packet_payload_bytes
    wire = n * size * (payload + params.data_packet_overhead_bytes) / payload
    into_receiver = backend.path_model.describe(Flow(0, 0, n, size))[0][-1]
    assert backend.diagnostics()["link_bytes"][into_receiver] == pytest.approx(wire, rel=1e-12)


def test_timely_is_one_module_plus_its_registry_line_and_this_test():
    """Adding TIMELY touched its module, the import line of ``moesim.network.cc`` and this test file: no
    other source or test file names it."""
    src = Path(moesim.__file__).resolve().parent
    tests = Path(__file__).resolve().parents[1]

    def naming(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.rglob("*.py") if re.search(r"\btimely\b", p.read_text())}

    assert naming(src) == {"network/cc/timely.py", "network/cc/__init__.py"}
    assert naming(tests) == {"network/test_cc_timely.py"}
