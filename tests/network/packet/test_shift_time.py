"""Moving the packet state in time (layer fast-forward with flows in flight).

Oracle: a backend shifted by Δ in the middle of an 8-to-1 incast then given one more flow behaves
exactly like its unshifted twin given the same flow Δ earlier: every completion is Δ later, in the same order, with the same packet, event and pause counts.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import star

from moesim.errors import MoesimError
from moesim.network.base import Flow
from moesim.network.cc.dcqcn import T_ALPHA, T_INC
from moesim.network.cc.hpcc import H_TIME
from moesim.network.packet import PacketBackend
from moesim.network.packet.layout import G_NOW, G_OVF_N, G_WHEEL_N
from moesim.network.params import REFERENCE_PRESETS

N = 8
T_SHIFT_NS = 61_123  # mid-incast: queues full, timers armed, packets on every link
DELTA_S = 1_000_003e-9  # not a multiple of the wheel
SIZE = 3_000_000


def _incast(preset: str) -> PacketBackend:
    params = REFERENCE_PRESETS[preset]
    if preset == "none":
        params = params.with_overrides({"has_win": False})  # fills the buffer: PFC pauses in flight
    backend = PacketBackend(star(N + 1), params)
    for i in range(N):
        backend.start_flow(Flow(i, i, N, SIZE), 0.0)
    while backend.advance_to(T_SHIFT_NS * 1e-9):
        pass
    return backend


def _finish(backend: PacketBackend, start_s: float) -> list[tuple[int, int]]:
    """Start one more flow at ``start_s``, then run to the end: (flow id, completion ns) in order."""
    while backend.advance_to(start_s):
        pass
    backend.start_flow(Flow(N, N - 1, N, 300_000), start_s)
    done = []
    while (t := backend.next_completion_s(math.inf)) < math.inf:
        done += [(fid, round(t * 1e9)) for fid in backend.advance_to(t)]
    return done


@pytest.mark.parametrize("preset", ["none", "dcqcn", "hpcc"])
def test_a_shifted_state_evolves_exactly_like_the_original(preset):
    plain, shifted = _incast(preset), _incast(preset)
    S = shifted.S
    assert S.g[G_WHEEL_N] > 0 and shifted.active_flows == N
    if preset == "dcqcn":
        assert S.g[G_OVF_N] > 0  # timers beyond the wheel's horizon move too
        assert (S.qp_cc[:N, T_ALPHA:T_INC + 1] >= 0).any()  # DCQCN timers armed
    if preset == "none":
        assert shifted.stats()["pauses"] > 0  # ports paused by PFC at the shift
    if preset == "hpcc":
        assert (S.qp_hop[:N, :, H_TIME] > 0).any()  # per-hop INT times
    shifted.shift_time(DELTA_S)
    d = 1_000_003
    assert int(shifted.S.g[G_NOW]) == T_SHIFT_NS + d
    a = _finish(plain, (T_SHIFT_NS + 1000) * 1e-9)
    b = _finish(shifted, (T_SHIFT_NS + 1000) * 1e-9 + DELTA_S)
    assert len(a) == N + 1
    assert [fid for fid, _ in b] == [fid for fid, _ in a]
    assert np.array_equal(np.array([t for _, t in b]) - np.array([t for _, t in a]), np.full(N + 1, d))
    sa, sb = plain.stats(), shifted.stats()
    for key in ("data_packets", "events", "pauses", "delivered_bytes"):
        assert sa[key] == sb[key], key


def test_flow_state_summarises_every_unreported_flow():
    backend = _incast("dcqcn")
    state = backend.flow_state(T_SHIFT_NS * 1e-9)
    assert sorted(state) == list(range(N))
    for (age,), (acked, rate) in state.values():
        assert age == pytest.approx(T_SHIFT_NS * 1e-9)
        assert 0 < acked < SIZE and 0 < rate <= 400e9
    assert not backend.flow_state_is_complete


def test_a_fractional_shift_rounds_and_a_start_rounding_just_before_the_clock_is_taken_as_now():
    backend = _incast("none")
    backend.shift_time(2.7e-9)  # → 3 ns
    now_ns = T_SHIFT_NS + 3
    assert int(backend.S.g[G_NOW]) == now_ns
    backend.start_flow(Flow(N, N - 1, N, 1000), (T_SHIFT_NS + 2.4) * 1e-9)  # rounds to 1 ns before the clock
    assert int(backend.S.qp["start_ns"][backend.S.starts[0]]) == now_ns
    with pytest.raises(MoesimError, match="before the simulated time"):
        backend.start_flow(Flow(N + 1, N - 1, N, 1000), (now_ns - 2) * 1e-9)
