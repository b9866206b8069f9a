"""Conformance suite run over every registered backend: bytes conserved, every flow completes, time is
monotone, a lone flow takes at least its latency-free transfer time; the one constructor, and each
declared capability present exactly when declared."""

from __future__ import annotations

import math

import pytest
from helpers import star

import moesim.network  # noqa: F401  (registers every backend)
from moesim.errors import MoesimError
from moesim.network.base import BACKENDS, FastForward, Flow
from moesim.network.diagnostics import DiagnosticsSpec
from moesim.network.params import REFERENCE_PRESETS

P = REFERENCE_PRESETS["none"]


def drain(backend):
    times, done = [], []
    last = 0.0
    while (t := backend.next_completion_s()) < math.inf:
        assert t >= last
        last = t
        for fid in backend.advance_to(t):
            times.append(t)
            done.append(fid)
    return done, times


@pytest.mark.parametrize("name", BACKENDS.names())
def test_every_flow_completes_once_and_time_is_monotone(name):
    topo = star(6)
    backend = BACKENDS.get(name)(topo, P)
    flows = [Flow(i, i % 6, (i * 5 + 1) % 6 if (i * 5 + 1) % 6 != i % 6 else (i + 1) % 6, 50_000 + 1000 * i)
             for i in range(24)]
    for f in flows:
        backend.start_flow(f, 0.0)
    done, times = drain(backend)
    assert sorted(done) == list(range(24))
    assert times == sorted(times)


@pytest.mark.parametrize("name", BACKENDS.names())
def test_single_flow_time_is_between_line_rate_and_twice_it(name):
    topo = star(2)
    backend = BACKENDS.get(name)(topo, P)
    size = 1_000_000
    backend.start_flow(Flow(0, 0, 1, size), 0.0)
    done, times = drain(backend)
    line = size * 8 / 400e9
    assert done == [0] and line < times[0] < 2 * line


@pytest.mark.parametrize("name", BACKENDS.names())
def test_bytes_are_conserved_on_every_link_of_the_route(name):
    topo = star(4)
    backend = BACKENDS.get(name)(topo, P)
    sizes = [300_000, 700_000, 10]
    for i, s in enumerate(sizes):
        backend.start_flow(Flow(i, i, 3, s), 0.0)
    drain(backend)
    link_bytes = backend.diagnostics().get("link_bytes")
    if link_bytes is None:
        pytest.skip(f"backend {name} reports no per-link bytes")
    into_3 = topo.route(0, 3)[-1]  # the switch→host-3 link carries every flow's data bytes
    payload = sum(sizes)
    packets = sum(math.ceil(s / P.transport.packet_payload_bytes) for s in sizes)
    # payload plus 36 B of headers per packet (a fluid backend may spread headers per byte: within 1 %)
    assert link_bytes[into_3] == pytest.approx(payload + packets * P.transport.data_header_bytes, rel=0.01)


# ---------------------------------------------------------------- the contract and declared capabilities
@pytest.mark.parametrize("name", BACKENDS.names())
def test_every_backend_takes_the_one_constructor_and_offers_fast_forward_for_an_idle_network(name):
    backend = BACKENDS.get(name)(star(2), P, diagnostics=None)
    assert isinstance(backend, FastForward)
    assert backend.flow_state(0.0) == {} and backend.random_draws == 0
    backend.shift_time(1e-3)  # idle: nothing to move
    assert isinstance(backend.parameters(), dict)


@pytest.mark.parametrize("name", BACKENDS.names())
def test_fast_forward_in_flight_is_there_exactly_when_declared(name):
    """A backend declaring it describes a flow in flight and, shifted by Δ, completes it Δ later; the
    others say they cannot (``None``) and refuse to shift."""
    cls = BACKENDS.get(name)

    def started():
        b = cls(star(2), P)
        b.start_flow(Flow(0, 0, 1, 1_000_000), 0.0)
        return b

    ref, shifted = started(), started()
    state = shifted.flow_state(0.0)
    if cls.capabilities.fast_forward_in_flight:
        assert state is not None and 0 in state
        delta = 1e-3
        shifted.shift_time(delta)
        assert shifted.next_completion_s() == pytest.approx(ref.next_completion_s() + delta, rel=1e-9)
    else:
        assert state is None
        with pytest.raises(NotImplementedError):
            shifted.shift_time(1e-3)


@pytest.mark.parametrize("name", BACKENDS.names())
def test_a_backend_declares_congestion_control_exactly_when_it_refuses_a_cc_mode_it_cannot_model(name):
    """cc_mode 10 (HPCC-PINT) is a mode the reference runs and no module registers: a backend that models
    CC must refuse it; one blind to CC runs it as any other (no congestion control)."""
    cls = BACKENDS.get(name)
    pint = P.with_overrides({"cc_mode": 10})
    if cls.capabilities.congestion_control:
        with pytest.raises(MoesimError, match="cc_mode.*HPCC-PINT"):
            cls(star(2), pint)
    else:
        cls(star(2), pint)


@pytest.mark.parametrize("name", BACKENDS.names())
def test_diagnostic_tables_are_recorded_exactly_when_declared(name):
    cls = BACKENDS.get(name)
    backend = cls(star(2), P, diagnostics=DiagnosticsSpec(fct=True))
    backend.start_flow(Flow(0, 0, 1, 10_000), 0.0)
    drain(backend)
    assert ("fct" in backend.diagnostics()) == cls.capabilities.diagnostic_tables
