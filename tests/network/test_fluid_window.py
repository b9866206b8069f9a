"""The fluid backend's window as bytes in flight (``fluid_window=bytes``, docs/network-fluid.md): ACKs
come back a round trip after the bytes are delivered, a flow's own backlog is served FIFO at its
queueing port, and a head start at a shared NIC shrinks behind the reverse traffic as at packet level."""

from __future__ import annotations

import math

import numpy as np
import pytest

from moesim.network.base import Flow
from moesim.network.fluid import FluidBackend
from moesim.network.params import network_mode
from moesim.topology.catalog import get_topology

EARLY, LATE = 7, (4, 5, 6)  # topology 4: GPUs 4..7 share one PCIe switch and one NIC
BYTES = {"fluid_window": "bytes"}


def finish_s(backend) -> dict[int, float]:
    done = {}
    while (t := backend.next_completion_s(math.inf)) < math.inf:
        done.update({f: t for f in backend.advance_to(t)})
    return done


def test_a_lone_flow_through_a_slower_port_ends_at_the_closed_form():
    """GPU 3 → GPU 4 of topology 4 crosses the 400 Gb/s switch–switch link after its 512 Gb/s own port:
    it sends at 512 Gb/s, queues the surplus there and ends when the slower port has carried all its
    wire bytes: t = latency + size · (payload + headers) / payload / 400 Gb/s."""
    backend = FluidBackend(get_topology("4"), network_mode("ib_cc0").with_overrides(BYTES))
    flow = Flow(0, 3, 4, 32768)
    backend.start_flow(flow, 0.0)
    _, _, data_coef, _, lat, _, _ = backend.path_model.describe(flow)
    assert finish_s(backend)[0] == pytest.approx(lat + 32768 * data_coef * 8 / 400e9, rel=1e-9)


def test_acks_trail_the_delivered_bytes_by_one_round_trip():
    """A lone 4 MiB flow between two servers of topology 1, alone on its path: after many round trips
    the bytes delivered but not yet acknowledged are its rate times its base round trip, and
    sent ≥ delivered ≥ acknowledged throughout."""
    backend = FluidBackend(get_topology("1"), network_mode("ib_cc0").with_overrides(BYTES))
    backend.start_flow(Flow(0, 0, 1, 4 << 20), 0.0)
    cols = backend.flow_table.cols
    for t_us in range(1, 60):
        backend.advance_to(t_us * 1e-6)
        sent, delivered, acked = cols["sent"][0], cols["acked"][0], cols["acked_rt"][0]
        assert sent >= delivered >= acked - 1e-6
    assert delivered - acked == pytest.approx(cols["rates"][0] * cols["rtt0"][0], rel=1e-3)


def test_an_ack_returns_one_base_round_trip_after_delivery_on_an_idle_path():
    """With no queue on its way back an ACK is a pure delay of one base round trip (not a lag that starts
    at once): nothing is acknowledged before rtt0, and later acknowledged(t) = delivered(t − rtt0),
    delivered taken linearly between the instants sampled here."""
    backend = FluidBackend(get_topology("1"), network_mode("ib_cc0").with_overrides(BYTES))
    backend.start_flow(Flow(0, 0, 1, 4 << 20), 0.0)
    cols = backend.flow_table.cols
    rtt0 = cols["rtt0"][0]
    times = [k * 0.25e-6 for k in range(1, 81)]
    delivered, acked = [], []
    for t in times:
        backend.advance_to(t)
        delivered.append(cols["acked"][0])
        acked.append(cols["acked_rt"][0])
    early = [a for t, a in zip(times, acked, strict=True) if t < rtt0]
    assert delivered[0] > 0 and max(early) == 0.0
    for t, a in zip(times, acked, strict=True):
        if t > rtt0 + 1e-6:
            assert a == pytest.approx(float(np.interp(t - rtt0, [0.0, *times], [0.0, *delivered])), rel=1e-6)


def head_start_lead_us(window: str, reverse: bool) -> float:
    """GPUs 4..7 each send 768 KiB to GPU +16 (another server), GPU 7 starting 2 µs before the others
    (and, with ``reverse``, GPU +16 sending the same back at the same times): how much earlier GPU 7 ends."""
    backend = FluidBackend(get_topology("4"), network_mode("ib_cc0").with_overrides({"fluid_window": window}))
    for gpu in (EARLY, *LATE):
        t = 0.0 if gpu == EARLY else 2e-6
        backend.advance_to(t)
        backend.start_flow(Flow(gpu, gpu, gpu + 16, 786432), t)
        if reverse:
            backend.start_flow(Flow(gpu + 16, gpu + 16, gpu, 786432), t)
    done = finish_s(backend)
    return (min(done[g] for g in LATE) - done[EARLY]) * 1e6


def test_a_head_start_keeps_its_fifo_order_without_reverse_traffic():
    """Without reverse traffic GPU 7's 2 µs alone at the NIC stay a lead in bytes: the packet backend ends
    it 7.0 µs ahead (``python research/head_start.py``); FIFO service keeps that order."""
    assert 5.5 < head_start_lead_us("bytes", reverse=False) < 8.0


def test_a_head_start_shrinks_behind_the_reverse_traffic():
    """With the reverse messages the early GPU's ACKs queue behind their data, its window fills and it
    waits like the others: packet level 2.2 µs ahead at the end. Windows as bytes in flight get closer
    to that than windows as rates, which keep the whole lead (6.4 µs)."""
    assert head_start_lead_us("bytes", reverse=True) < 5.5
    assert head_start_lead_us("rate", reverse=True) > 6.0
