"""Per-flow CC policy, determinism, bounded memory, runs that cannot finish, the engine protocol."""

from __future__ import annotations

import math
import warnings

import pytest
from helpers import star

from moesim.errors import MoesimError
from moesim.network.base import Flow
from moesim.network.diagnostics import DiagnosticsSpec
from moesim.network.packet import PacketBackend
from moesim.network.packet.layout import G_CUR, G_NOW
from moesim.network.params import REFERENCE_PRESETS


def drain(b: PacketBackend) -> list[tuple[int, int]]:
    out = []
    while (t := b.next_completion_s()) < math.inf:
        out += [(fid, round(t * 1e9)) for fid in b.advance_to(t)]
    return out


def test_a_flow_without_cc_keeps_line_rate_and_carries_no_int():
    """Flow.cc = False (same-server flows): no rate updates, no INT header, but it still queues."""
    b = PacketBackend(star(3), REFERENCE_PRESETS["hpcc"])
    b.start_flow(Flow(0, 0, 2, 3_000_000, cc=True), 0.0)
    b.start_flow(Flow(1, 1, 2, 3_000_000, cc=False), 0.0)
    b.advance_to(30e-6)
    prog = b.flow_progress()
    assert prog[1][1] == 400e9  # never touched
    assert prog[0][1] < 0.8 * 400e9  # HPCC backed off on the shared bottleneck
    drain(b)
    n = 3000
    links = b.diagnostics()["link_bytes"]
    assert links[b.topology.route(0, 2)[0]] == 3_000_000 + 78 * n  # with INT
    assert links[b.topology.route(1, 2)[0]] == 3_000_000 + 36 * n  # without


def test_dcqcn_ignores_cnps_of_a_flow_without_cc():
    p = REFERENCE_PRESETS["dcqcn"]
    b = PacketBackend(star(9), p)
    for i in range(8):
        b.start_flow(Flow(i, i, 8, 2_000_000, cc=(i != 0)), 0.0)
    b.advance_to(80e-6)
    prog = b.flow_progress()
    assert prog[0][1] == 400e9 and min(prog[i][1] for i in range(1, 8)) < 400e9


def incast(params, seed=1):
    b = PacketBackend(star(9), params, seed=seed)
    for i in range(8):
        b.start_flow(Flow(i, i, 8, 1_000_000 + 1000 * i), 0.0)
    return drain(b), b.diagnostics()["link_bytes"].tolist(), b.stats()["events"]


def test_identical_results_run_to_run():
    p = REFERENCE_PRESETS["dcqcn"]  # ECN marking uses the seeded RNG
    assert incast(p) == incast(p)


def test_the_seed_drives_the_ecn_marks():
    p = REFERENCE_PRESETS["dcqcn"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # seeding wraps modulo 2**64 without an overflow warning
        other = incast(p, seed=2)
    assert other[0] != incast(p)[0]


def test_the_ecn_seed_parameter_is_the_backends_seed():
    """``ecn_seed`` (what ensemble members vary) feeds the same stream as the constructor's seed; 1 is the default."""
    p = REFERENCE_PRESETS["dcqcn"]
    assert p.packet.ecn_seed == 1
    assert incast(p.with_overrides({"ecn_seed": 2}), seed=None) == incast(p, seed=2)
    assert incast(p, seed=None) == incast(p)


def test_memory_stays_bounded_over_a_long_run():
    b = PacketBackend(star(4), REFERENCE_PRESETS["none"])
    t = 0.0
    for k in range(300):
        b.start_flow(Flow(k, k % 4, (k + 1) % 4, 200_000), t)
        b.start_flow(Flow(10_000 + k, (k + 2) % 4, (k + 3) % 4, 200_000), t)
        drain(b)
        t = b.now_s
    sizes = (b.S.pk.shape[0], b.S.ev.shape[0], b.S.qp.shape[0])
    assert sizes == (4096, 8192, 256)  # the initial pools: nothing grows with the run's length
    assert b.completed == 600


def test_drops_without_retransmission_end_with_a_clear_error():
    """No window and almost no buffer: packets are dropped; a lost tail is never recovered (no RTO)."""
    p = REFERENCE_PRESETS["none"].with_overrides({"has_win": False, "buffer_bytes": 300_000,
                                                  "headroom_factor": 0.0})
    b = PacketBackend(star(9), p)
    for i in range(8):
        b.start_flow(Flow(i, i, 8, 1_000_000), 0.0)
    with pytest.raises(MoesimError, match="cannot complete.*no event left.*dropped"):
        drain(b)


def test_a_stall_is_detected_even_while_timers_keep_firing():
    """DCQCN with ECN thresholds under the tiny buffer: CNPs arm timers that fire forever."""
    p = REFERENCE_PRESETS["dcqcn"].with_overrides({"buffer_bytes": 300_000, "headroom_factor": 0.0,
                                                   "kmin_kb": ((400e9, 10.0),), "kmax_kb": ((400e9, 50.0),)})
    b = PacketBackend(star(9), p, stall_s=200e-6)
    for i in range(8):
        b.start_flow(Flow(i, i, 8, 1_000_000), 0.0)
    with pytest.raises(MoesimError, match="cannot complete.*no delivery progress for 0.2 ms"):
        drain(b)


def test_look_ahead_is_undone_when_a_flow_starts_earlier():
    """next_completion_s simulates ahead; a flow started before that completion rolls it back."""
    def scenario(peek: bool):
        b = PacketBackend(star(3), REFERENCE_PRESETS["hpcc"])
        b.start_flow(Flow(0, 0, 2, 500_000), 0.0)
        if peek:
            assert b.next_completion_s() > 5e-6
        assert b.advance_to(5e-6) == []
        b.start_flow(Flow(1, 1, 2, 500_000), 5e-6)
        return drain(b), b.rollbacks

    (a, rb_a), (c, rb_c) = scenario(True), scenario(False)
    assert a == c and rb_a == 1 and rb_c == 0


def test_horizon_keeps_the_look_ahead_within_the_callers_next_event():
    b = PacketBackend(star(3), REFERENCE_PRESETS["none"])
    b.start_flow(Flow(0, 0, 2, 500_000), 0.0)
    assert b.next_completion_s(5e-6) == math.inf  # nothing completes by 5 µs
    assert b.advance_to(5e-6) == []
    b.start_flow(Flow(1, 1, 2, 500_000), 5e-6)  # no rollback needed
    assert b.rollbacks == 0 and sorted(f for f, _ in drain(b)) == [0, 1]


def test_starting_a_flow_in_the_past_is_an_error():
    b = PacketBackend(star(3), REFERENCE_PRESETS["none"])
    b.start_flow(Flow(0, 0, 2, 10_000), 0.0)
    drain(b)
    with pytest.raises(MoesimError, match="before the simulated time"):
        b.start_flow(Flow(1, 1, 2, 10_000), 0.0)


def test_a_flow_starts_exactly_when_asked_between_two_network_events():
    """After a completion the kernel has peeked nothing beyond it: a flow started 5 ns later starts then."""
    b = PacketBackend(star(4), REFERENCE_PRESETS["none"], diagnostics=DiagnosticsSpec(fct=True))
    b.start_flow(Flow(0, 0, 1, 1000), 0.0)
    b.start_flow(Flow(9, 2, 3, 5_000_000), 0.0)  # keeps events flowing on a disjoint path
    t_a = b.next_completion_s()
    assert b.advance_to(t_a) == [0]
    assert b.S.g[G_CUR] <= b.S.g[G_NOW]  # the event wheel has not looked past the completion
    assert b.advance_to(t_a + 5e-9) == []
    assert b.S.g[G_NOW] == round(t_a * 1e9) + 5 and b.S.g[G_CUR] <= b.S.g[G_NOW]
    b.start_flow(Flow(1, 0, 1, 1000), t_a + 5e-9)
    drain(b)
    fct = dict(zip(*(b.tables()["fct"].to_pydict()[k] for k in ("flow_id", "fct_ns")), strict=True))
    start = dict(zip(*(b.tables()["fct"].to_pydict()[k] for k in ("flow_id", "start_ns")), strict=True))
    assert start[1] == round(t_a * 1e9) + 5 and fct[1] == fct[0] == 2044  # alone: 21 + 21 + 4·500 + 2
