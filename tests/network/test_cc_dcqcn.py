"""DCQCN state machine (docs/reference-semantics.md A.1.1) against hand-computed sequences.

Shipped timers: alpha every 1 µs, rate decrease every 4 µs (first one 1 ns late), rate increase
every RP_TIMER; FAST_RECOVERY_TIMES = 1, so after a cut: fast recovery, then additive, then hyper.
"""

from __future__ import annotations

import pytest

from moesim.network.cc import FlowCc
from moesim.network.params import REFERENCE_PRESETS, NetworkParams

LINE = 100e9
SHIPPED = NetworkParams()  # ASTRA-sim's shipped config: RP_TIMER 900 µs, AI 50 Mb/s, HAI 100 Mb/s
G = SHIPPED.rate.ewma_gain


def test_no_cnp_no_change():
    f = FlowCc("dcqcn", SHIPPED, LINE)
    f.ack(0)
    f.advance(10_000_000)
    assert f.rate_bps == LINE and f["alpha"] == 1.0


def test_one_cnp_then_none_decrease_fast_recovery_ai_hai():
    f = FlowCc("dcqcn", SHIPPED, LINE)
    f.ack(0, cnp=True)
    # alpha timer at 1, 2, 3, 4 µs (no CNP since the first, which reset alpha to 1 and cleared its flag)
    f.advance(4000)
    assert f["alpha"] == pytest.approx((1 - G) ** 4, rel=1e-12)
    assert f.rate_bps == LINE  # RateOnFirstCnp = 1: no cut yet
    # the decrease timer fires at 4 µs + 1 ns: Rc·(1 − α/2); the target stays (stage 0, no clamp)
    f.advance(4001)
    rc1 = LINE * (1 - (1 - G) ** 4 / 2)
    assert f.rate_bps == pytest.approx(rc1, rel=1e-12)
    assert f["target_rate"] == LINE
    # RP_TIMER later: fast recovery (stage 0 < 1)
    t_inc = 4001 + 900_000
    f.advance(t_inc - 1)
    assert f.rate_bps == pytest.approx(rc1, rel=1e-12)
    f.advance(t_inc)
    rc2 = (rc1 + LINE) / 2
    assert f.rate_bps == pytest.approx(rc2, rel=1e-12)
    # additive increase (stage 1): target min(LINE + AI, LINE) = LINE, then average
    f.advance(t_inc + 900_000)
    rc3 = (rc2 + LINE) / 2
    assert f.rate_bps == pytest.approx(rc3, rel=1e-12) and f["target_rate"] == LINE
    # hyper increase (stage 2)
    f.advance(t_inc + 2 * 900_000)
    assert f.rate_bps == pytest.approx((rc3 + LINE) / 2, rel=1e-12)
    assert f["stage"] == 3


def test_second_cnp_after_recovery_moves_the_target_then_ai_and_hai_steps():
    """CNP at 0, fast recovery at 904001 ns, a second CNP at 904501 ns: the next decrease (908001 ns)
    sets the target to the recovered rate (stage ≠ 0) and cuts with the decayed-then-bumped alpha."""
    f = FlowCc("dcqcn", SHIPPED, LINE)
    f.ack(0, cnp=True)
    rc1 = LINE * (1 - (1 - G) ** 4 / 2)
    rc2 = (rc1 + LINE) / 2  # fast recovery at 904001
    f.ack(904_501, cnp=True)
    # alpha ticks at 1000·k: 904 ticks of decay, then at 905 µs the CNP bump, then 3 more decays
    alpha = ((1 - G) * (1 - G) ** 904 + G) * (1 - G) ** 3
    f.advance(908_001)
    assert f["alpha"] == pytest.approx(alpha, rel=1e-9)
    rt = rc2
    rc = rc2 * (1 - alpha / 2)
    assert f["target_rate"] == pytest.approx(rt, rel=1e-12)
    assert f.rate_bps == pytest.approx(rc, rel=1e-12)
    t = 908_001 + 900_000
    f.advance(t)  # fast recovery towards the new target
    rc = (rc + rt) / 2
    assert f.rate_bps == pytest.approx(rc, rel=1e-12)
    f.advance(t + 900_000)  # additive: target + 50 Mb/s
    rt += SHIPPED.rate.rate_ai_bps
    rc = (rc + rt) / 2
    assert f["target_rate"] == pytest.approx(rt, rel=1e-12) and f.rate_bps == pytest.approx(rc, rel=1e-12)
    for k in (2, 3):  # hyper: + 100 Mb/s per step (a constant, not k·R_HAI)
        f.advance(t + k * 900_000)
        rt += SHIPPED.rate.rate_hai_bps
        rc = (rc + rt) / 2
        assert f["target_rate"] == pytest.approx(rt, rel=1e-12) and f.rate_bps == pytest.approx(rc, rel=1e-12)


def test_reference_preset_timers_and_steps():
    """The DCQCN preset of the reference runs: RP_TIMER 300 µs, AI 80 Mb/s, HAI 800 Mb/s."""
    p = REFERENCE_PRESETS["dcqcn"]
    f = FlowCc("dcqcn", p, LINE)
    f.ack(0, cnp=True)
    f.advance(4001)
    rc1 = LINE * (1 - (1 - G) ** 4 / 2)
    f.advance(4001 + 300_000)
    assert f.rate_bps == pytest.approx((rc1 + LINE) / 2, rel=1e-12)


def test_rate_never_below_min_rate_under_sustained_cnps():
    f = FlowCc("dcqcn", SHIPPED, LINE)
    for t in range(0, 400_000, 1000):
        f.ack(t, cnp=True)
    assert f.rate_bps == pytest.approx(SHIPPED.rate.min_rate_bps)


def test_clamp_target_rate_sets_target_on_every_cut():
    p = SHIPPED.with_overrides({"clamp_target_rate": True})
    f = FlowCc("dcqcn", p, LINE)
    f.ack(0, cnp=True)
    f.advance(4001)
    assert f["target_rate"] == LINE  # the first cut's target is the line rate (set at the first CNP)
    f.ack(5000, cnp=True)
    f.advance(8001)
    rc1 = LINE * (1 - (1 - G) ** 4 / 2)
    assert f["target_rate"] == pytest.approx(rc1, rel=1e-12)


def test_a_time_shift_moves_armed_timers_only_and_the_flow_then_evolves_the_same():
    a, b = FlowCc("dcqcn", SHIPPED, LINE), FlowCc("dcqcn", SHIPPED, LINE)
    a.ack(0, cnp=True)
    b.ack(0, cnp=True)
    shift_ns = 12_345
    b.algorithm.shift_time(b.st[None, :], b.hops[None], shift_ns)  # views: shifted in place
    assert b.algorithm.timer_time(b.st, 0) == a.algorithm.timer_time(a.st, 0) + shift_ns  # alpha
    assert b.algorithm.timer_time(b.st, 2) == -1.0  # the increase timer is not armed yet: stays unset
    for t in (4001, 904_001, 3_000_000):
        a.advance(t)
        b.advance(t + shift_ns)
        assert (b.rate_bps, b["alpha"], b["stage"]) == (a.rate_bps, a["alpha"], a["stage"])
