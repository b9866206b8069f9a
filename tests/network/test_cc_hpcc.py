"""HPCC state machine (docs/reference-semantics.md A.1.2): the rate after one update for given INT records.

u = txRate/B + min(q, q')·R/(B·W); U ← (U·(T − τ) + u·τ)/T; R = Rc/(U/η) + R_AI, clamped.
Byte counters are read in 128 B units and queue lengths in 80 B units (INT_MULTI = 1).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from moesim.network.cc import FlowCc
from moesim.network.cc.base import FLAG_RATE_SHIFT
from moesim.network.params import REFERENCE_PRESETS, NetworkParams

P = REFERENCE_PRESETS["hpcc"]  # η 0.95, MI_THRESH 0, R_AI 160 Mb/s, fast react
LINE = 400e9
W = 102_000  # bytes: the BDP window of a 400 Gb/s, 2 × 500 ns path
T = 2040  # ns: its base RTT


def rec(t, tx_bytes, qlen, rate=LINE):
    return np.array([[t, tx_bytes, qlen, int(rate)]], dtype=np.int64)


def expected_rate(rc, u_prev, tx_delta_bytes, tau, q_now, q_prev, rate=LINE, eta=0.95, rai=P.rate.rate_ai_bps):
    tx = math.floor(tx_delta_bytes / 128) * 128
    q = min(math.floor(q_now / 80) * 80, math.floor(q_prev / 80) * 80)
    u = tx * 8 / (tau * 1e-9) / rate + q * LINE / (rate * W)
    dt = min(tau, T)
    u_ewma = (u_prev * (T - dt) + u * dt) / T
    return min(max(rc / (u_ewma / eta) + rai, P.rate.min_rate_bps), LINE), u_ewma


def started(first=rec(1000, 0, 80_000)):
    f = FlowCc("hpcc", P, LINE)
    flags = f.ack(1000, ack_seq=1000, snd_nxt=50_000, ints=first, win_bytes=W, base_rtt_ns=T)
    assert flags == 0 and f.rate_bps == LINE  # the first ACK only stores the INT records
    return f


def test_one_full_update_from_an_int_record():
    f = started()
    flags = f.ack(2000, ack_seq=51_000, snd_nxt=90_000, ints=rec(2000, 45_000, 160_000), win_bytes=W, base_rtt_ns=T)
    want, u = expected_rate(LINE, 1.0, 45_000, 1000, 160_000, 80_000)
    assert flags & FLAG_RATE_SHIFT
    assert f.rate_bps == pytest.approx(want, rel=1e-12)
    assert f["cur_rate"] == pytest.approx(want, rel=1e-12)  # full update commits Rc
    assert f["u"] == pytest.approx(u, rel=1e-12)
    assert f["last_update_seq"] == 90_000
    assert 280e9 < want < 290e9  # sanity of the hand computation: U ≈ 1.33 → R ≈ 400/1.405 + 0.16 Gb/s


def test_fast_react_changes_the_rate_but_not_the_committed_rate():
    f = started()
    f.ack(2000, ack_seq=51_000, snd_nxt=90_000, ints=rec(2000, 45_000, 160_000), win_bytes=W, base_rtt_ns=T)
    rc = f["cur_rate"]
    u0 = f["u"]
    # ack_seq ≤ last_update_seq (90 000): fast react, from the committed Rc
    f.ack(2500, ack_seq=52_000, snd_nxt=91_000, ints=rec(2500, 45_000 + 19_200, 0), win_bytes=W, base_rtt_ns=T)
    want, u = expected_rate(rc, u0, 19_200, 500, 0, 160_000)
    assert f.rate_bps == pytest.approx(want, rel=1e-12)
    assert f["cur_rate"] == rc
    assert f["u"] == pytest.approx(u, rel=1e-12)


def test_a_zero_utilisation_sample_leaves_the_ewma_unchanged():
    """As in the reference, the hop with the largest u sets τ; with u = 0 no hop does (τ = 0), so U
    stays at its initial 1 and the rate is Rc·η + R_AI."""
    f = started(rec(1000, 0, 0))
    f.ack(3040, ack_seq=51_000, snd_nxt=90_000, ints=rec(3040, 0, 0), win_bytes=W, base_rtt_ns=T)
    assert f["u"] == 1.0
    assert f.rate_bps == pytest.approx(LINE * 0.95 + P.rate.rate_ai_bps, rel=1e-12)


def test_low_utilisation_raises_the_rate_to_line_rate():
    f = started(rec(1000, 0, 0))
    f.ack(1000 + T, ack_seq=51_000, snd_nxt=90_000, ints=rec(1000 + T, 1280, 0), win_bytes=W, base_rtt_ns=T)
    # u = 1280·8/2040 ns/400 Gb/s ≈ 0.0125 over a whole base RTT: Rc/(U/η) ≫ line rate → clamped
    assert f.rate_bps == LINE


def test_rate_is_clamped_at_min_rate():
    shipped = NetworkParams(cc_mode=3)  # R_AI 50 Mb/s < MIN_RATE 100 Mb/s
    f = FlowCc("hpcc", shipped, LINE)
    f.ack(1000, ack_seq=1000, snd_nxt=50_000, ints=rec(1000, 0, 0), win_bytes=W, base_rtt_ns=T)
    f.ack(3040, ack_seq=51_000, snd_nxt=90_000, ints=rec(3040, 10 ** 9, 0), win_bytes=W, base_rtt_ns=T)
    # u ≈ 9800: Rc/(U/η) ≈ 39 Mb/s, + 50 Mb/s < 100 Mb/s
    assert f.rate_bps == shipped.rate.min_rate_bps


def test_max_of_hops_drives_a_single_rate_update():
    two = np.array([[1000, 0, 0, int(LINE)], [1000, 0, 0, int(LINE)]], dtype=np.int64)
    f = started(two)
    later = np.array([[2000, 10_000, 0, int(LINE)], [2000, 40_000, 0, int(LINE)]], dtype=np.int64)
    f.ack(2000, ack_seq=51_000, snd_nxt=90_000, ints=later, win_bytes=W, base_rtt_ns=T)
    want, _ = expected_rate(LINE, 1.0, 40_000, 1000, 0, 0)
    assert f.rate_bps == pytest.approx(want, rel=1e-12)


def test_any_port_rate_is_used_as_is():
    """Deviation from the reference's 3-bit rate code: a 512 Gb/s hop is read as 512 Gb/s."""
    f = started(rec(1000, 0, 0, rate=512e9))
    f.ack(2000, ack_seq=51_000, snd_nxt=90_000, ints=rec(2000, 60_000, 0, rate=512e9), win_bytes=W, base_rtt_ns=T)
    want, _ = expected_rate(LINE, 1.0, 60_000, 1000, 0, 0, rate=512e9)
    assert f.rate_bps == pytest.approx(want, rel=1e-12)


def test_multi_rate_takes_the_slowest_hop_with_per_hop_ewma():
    p = P.with_overrides({"multi_rate": True})
    f = FlowCc("hpcc", p, LINE)
    two = np.array([[1000, 0, 0, int(LINE)], [1000, 0, 0, int(LINE)]], dtype=np.int64)
    f.ack(1000, ack_seq=1000, snd_nxt=50_000, ints=two, win_bytes=W, base_rtt_ns=T)
    later = np.array([[2000, 10_000, 0, int(LINE)], [2000, 40_000, 0, int(LINE)]], dtype=np.int64)
    f.ack(2000, ack_seq=51_000, snd_nxt=90_000, ints=later, win_bytes=W, base_rtt_ns=T)
    per_hop = [expected_rate(LINE, 1.0, b, 1000, 0, 0)[0] for b in (10_000, 40_000)]
    assert f.rate_bps == pytest.approx(min(per_hop), rel=1e-12)
    assert f["cur_rate"] == pytest.approx(min(per_hop), rel=1e-12)


def test_a_time_shift_moves_the_per_hop_int_times_and_the_next_update_is_unchanged():
    a, b = started(), started()
    shift_ns = 7_777
    b.algorithm.shift_time(b.st[None, :], b.hops[None], shift_ns)
    assert b.hops[0, 0] == a.hops[0, 0] + shift_ns  # the INT time moves
    assert b.hops[0, 2] == a.hops[0, 2] == 80_000  # and neither does the queue length
    a.ack(2000, ack_seq=51_000, snd_nxt=90_000, ints=rec(2000, 45_000, 160_000), win_bytes=W, base_rtt_ns=T)
    b.ack(2000 + shift_ns, ack_seq=51_000, snd_nxt=90_000, ints=rec(2000 + shift_ns, 45_000, 160_000), win_bytes=W,
          base_rtt_ns=T)
    assert b.rate_bps == a.rate_bps == pytest.approx(expected_rate(LINE, 1.0, 45_000, 1000, 160_000, 80_000)[0])
