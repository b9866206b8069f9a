"""Unit tests of the fluid kernel's CNP feedback: a marked packet's CNP reaches the sender one feedback
delay later, and CNPs due within one alpha interval of each other merge; the mark draws of
``fluid_marks=random`` are Exp(1) and a pure function of their stream and index."""

from __future__ import annotations

import numpy as np

from moesim.network.fluid_kernel import CNP_MERGE_S, _cnp_arrives, exp_draw


def test_a_cnp_arrives_at_its_due_time_not_before():
    pend, npend = np.zeros(4), np.zeros(1, dtype=np.int64)
    assert not _cnp_arrives(pend, npend, 0, 1e-6, 9e-6)  # marked at 1 µs, due at 9 µs
    assert npend[0] == 1
    assert not _cnp_arrives(pend, npend, 0, 8.9e-6, -1.0)
    assert _cnp_arrives(pend, npend, 0, 9e-6, -1.0)
    assert npend[0] == 0
    assert not _cnp_arrives(pend, npend, 0, 20e-6, -1.0)


def test_cnps_due_within_the_merge_window_arrive_once():
    pend, npend = np.zeros(8), np.zeros(1, dtype=np.int64)
    us = 1e-6
    _cnp_arrives(pend, npend, 0, 0.0, 10 * us)
    _cnp_arrives(pend, npend, 0, 0.0, 10 * us + 0.5 * CNP_MERGE_S)  # merges with the first
    _cnp_arrives(pend, npend, 0, 0.0, 10 * us + 2 * CNP_MERGE_S)  # a separate CNP
    assert npend[0] == 2
    arrivals = [k for k in range(1, 20) if _cnp_arrives(pend, npend, 0, k * us, -1.0)]
    assert arrivals == [10, 12]


def test_a_full_buffer_drops_new_cnps_and_keeps_the_pending_ones():
    pend, npend = np.zeros(2), np.zeros(1, dtype=np.int64)
    for due in (5e-6, 8e-6, 11e-6):
        _cnp_arrives(pend, npend, 0, 0.0, due)
    assert npend[0] == 2 and sorted(pend) == [5e-6, 8e-6]


def test_mark_draws_are_exp1_and_pure():
    """Mean of N Exp(1) draws: 1 ± 1/sqrt(N) (N = 40 000: ± 0.005; allowed 0.02); P(X > 1) = e^-1."""
    draws = np.array([exp_draw(12345, k) for k in range(40_000)])
    assert abs(draws.mean() - 1.0) < 0.02
    assert abs(np.mean(draws > 1.0) - np.exp(-1.0)) < 0.01
    assert draws.min() > 0.0
    assert exp_draw(12345, 7) == draws[7]  # the same stream and index give the same draw
    assert exp_draw(12346, 7) != draws[7]
