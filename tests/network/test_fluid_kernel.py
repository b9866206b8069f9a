"""Unit tests of the fluid kernel's CNP feedback: a marked packet's CNP reaches the sender one feedback
delay later, and CNPs due within one alpha interval of each other merge; the mark draws of
``fluid_marks=random`` are Exp(1) and a pure function of their stream and index; a flow that waits keeps
the state stepping."""

from __future__ import annotations

import numpy as np

from moesim.network.cc import CC_ALGORITHMS
from moesim.network.cc.base import MAX_RATE, MAX_SLOTS, RATE
from moesim.network.cc.dispatch import NO_CC, cc_id
from moesim.network.fluid_kernel import (
    CNP_MERGE_S,
    DYNAMIC,
    INT_ONLY,
    STATIC,
    cnp_arrives,
    exp_draw,
    is_dynamic,
)

HPCC = cc_id(CC_ALGORITHMS.get("hpcc"))


def test_acnp_arrives_at_its_due_time_not_before():
    pend, npend = np.zeros(4), np.zeros(1, dtype=np.int64)
    assert not cnp_arrives(pend, npend, 0, 1e-6, 9e-6)  # marked at 1 µs, due at 9 µs
    assert npend[0] == 1
    assert not cnp_arrives(pend, npend, 0, 8.9e-6, -1.0)
    assert cnp_arrives(pend, npend, 0, 9e-6, -1.0)
    assert npend[0] == 0
    assert not cnp_arrives(pend, npend, 0, 20e-6, -1.0)


def test_cnps_due_within_the_merge_window_arrive_once():
    pend, npend = np.zeros(8), np.zeros(1, dtype=np.int64)
    us = 1e-6
    cnp_arrives(pend, npend, 0, 0.0, 10 * us)
    cnp_arrives(pend, npend, 0, 0.0, 10 * us + 0.5 * CNP_MERGE_S)  # merges with the first
    cnp_arrives(pend, npend, 0, 0.0, 10 * us + 2 * CNP_MERGE_S)  # a separate CNP
    assert npend[0] == 2
    arrivals = [k for k in range(1, 20) if cnp_arrives(pend, npend, 0, k * us, -1.0)]
    assert arrivals == [10, 12]


def test_a_full_buffer_drops_new_cnps_and_keeps_the_pending_ones():
    pend, npend = np.zeros(2), np.zeros(1, dtype=np.int64)
    for due in (5e-6, 8e-6, 11e-6):
        cnp_arrives(pend, npend, 0, 0.0, due)
    assert npend[0] == 2 and sorted(pend) == [5e-6, 8e-6]


def test_mark_draws_are_exp1_and_pure():
    """Mean of N Exp(1) draws: 1 ± 1/sqrt(N) (N = 40 000: ± 0.005; allowed 0.02); P(X > 1) = e^-1."""
    draws = np.array([exp_draw(12345, k) for k in range(40_000)])
    assert abs(draws.mean() - 1.0) < 0.02
    assert abs(np.mean(draws > 1.0) - np.exp(-1.0)) < 0.01
    assert draws.min() > 0.0
    assert exp_draw(12345, 7) == draws[7]  # the same stream and index give the same draw
    assert exp_draw(12346, 7) != draws[7]


def one_flow_kind(cc: int, win_bytes: bool, in_flight_bytes: float, send_Bps: float = 1e9) -> int:
    """is_dynamic for one HPCC-capable flow with 1 MB left, no backlog anywhere, a 100 kB BDP window
    under VAR_WIN and a CC rate of half its line rate (so its window is 50 kB), ``in_flight_bytes``
    unacknowledged."""
    st = np.zeros((1, MAX_SLOTS))
    st[0, RATE], st[0, MAX_RATE] = 50e9, 100e9
    sent = np.array([1e6 + in_flight_bytes])
    send = np.array([send_Bps])
    return is_dynamic(1, cc, True, np.zeros(2), send, send.copy(), np.array([True]), st,
                      np.zeros(1, dtype=np.int64), win_bytes, np.array([1e6]), sent, sent.copy(),
                      np.array([1e6]), np.array([100e3]))


def test_a_window_waiting_on_acks_keeps_stepping_also_when_var_win_shrinks_it():
    """A window as bytes in flight that is full waits on ACKs: the state must stay DYNAMIC (1 µs steps),
    not settle into INT_ONLY's doubling steps that would leave the sender idle past its returning ACKs.
    Under VAR_WIN the window that counts is the scaled one: 60 kB in flight fill a 50 kB window."""
    assert one_flow_kind(HPCC, True, 60e3) == DYNAMIC
    assert one_flow_kind(HPCC, True, 40e3) == INT_ONLY
    assert one_flow_kind(HPCC, False, 60e3) == INT_ONLY  # windows as rates do not wait on ACKs


def test_a_flow_with_bytes_left_that_sends_nothing_keeps_stepping():
    """Nothing ahead would wake such a flow (no drain, no timer): the state stays DYNAMIC, not STATIC with
    an infinite jump."""
    assert one_flow_kind(NO_CC, False, 0.0, send_Bps=0.0) == DYNAMIC
    assert one_flow_kind(NO_CC, False, 0.0) == STATIC
