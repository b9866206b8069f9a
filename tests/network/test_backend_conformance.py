"""Conformance suite run over every registered backend: bytes conserved, every flow completes, time is
monotone, and a lone flow takes at least its latency-free transfer time."""

from __future__ import annotations

import math

import pytest
from helpers import star

import moesim.network  # noqa: F401  (registers every backend)
from moesim.network.base import BACKENDS, Flow
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
    packets = sum(math.ceil(s / P.packet_payload_bytes) for s in sizes)
    # payload plus 36 B of headers per packet (a fluid backend may spread headers per byte: within 1 %)
    assert link_bytes[into_3] == pytest.approx(payload + packets * P.data_header_bytes, rel=0.01)
