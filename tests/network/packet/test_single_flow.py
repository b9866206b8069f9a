"""One flow alone on host → switch → host (400 Gb/s, 500 ns links): exact store-and-forward timing.

Packets of 1000 B payload + 36 B headers serialise in round(1036·8/400) = 21 ns; the NIC paces at the
same 21 ns. With n packets, the last one (p B of payload, tx_last = tx(p+36)) reaches the switch at
(n−1)·21 + tx_last + d and waits for its predecessor to leave (n·21 + d, when n > 1); it reaches the
receiver tx_last + d after it starts there, and its 48-byte ACK (1 ns per hop) returns after
2·(1 + d): FCT = max((n−1)·21 + tx_last, n·21 [n > 1]) + tx_last + 4d + 2 ns.
"""

from __future__ import annotations

import math

import pytest
from helpers import star

from moesim.network.base import Flow
from moesim.network.packet import PacketBackend
from moesim.network.params import REFERENCE_PRESETS

P = REFERENCE_PRESETS["none"]


def tx(nbytes: int, bps: float = 400e9) -> int:
    return math.floor(nbytes * 8e9 / bps + 0.5)


def fct_alone(size: int, d: int = 500) -> int:
    n = math.ceil(size / 1000)
    last = size - (n - 1) * 1000
    tx_last = tx(last + 36)
    start_at_switch = max((n - 1) * tx(1036) + tx_last, n * tx(1036) if n > 1 else 0)
    return start_at_switch + tx_last + 4 * d + 2 * tx(48)


def run_one(size: int, params=P) -> tuple[int, PacketBackend]:
    b = PacketBackend(star(2), params)
    b.start_flow(Flow(7, 0, 1, size), 0.0)
    assert b.next_completion_s() < math.inf
    assert b.advance_to(1.0) == [7]
    return round(b.now_s * 1e9), b


@pytest.mark.parametrize("size", [1, 1000, 4000, 524_288])
def test_fct_of_a_lone_flow_is_exact(size):
    fct, _ = run_one(size)
    assert fct == fct_alone(size)


def test_s1_message_alone_takes_13033_ns():
    # 525 packets: 525·21 + tx(324 B) + 2000 + 2 — vs 13 029 ns "standalone" in the reference's fct.txt
    assert run_one(524_288)[0] == 13_033


def test_one_flow_reaches_line_rate_minus_header_overhead():
    size = 20_000_000
    fct, b = run_one(size)
    goodput = size * 8 / ((fct - fct_alone(1000)) * 1e-9)
    assert goodput == pytest.approx(400e9 * 1000 / 1036, rel=0.015)  # 21-ns packets: 380.95 Gb/s
    assert b.stats()["delivered_bytes"] == size


def test_wire_bytes_per_link_are_payload_plus_headers_and_acks():
    size = 524_288
    _, b = run_one(size)
    n = math.ceil(size / 1000)
    link_bytes = b.diagnostics()["link_bytes"]
    topo = b.topology
    fwd = topo.route(0, 1)
    for link in fwd:
        assert link_bytes[link] == size + 36 * n
    for link in topo.reverse_route(fwd):
        assert link_bytes[link] == 48 * n


def test_hpcc_packets_carry_int_and_acks_are_76_bytes():
    size = 100_000
    _, b = run_one(size, REFERENCE_PRESETS["hpcc"])
    n = math.ceil(size / 1000)
    link_bytes = b.diagnostics()["link_bytes"]
    fwd = b.topology.route(0, 1)
    assert link_bytes[fwd[0]] == size + 78 * n
    assert link_bytes[b.topology.reverse_route(fwd)[0]] == 76 * n


def test_zero_byte_flow_completes_at_once():
    b = PacketBackend(star(2), P)
    b.start_flow(Flow(3, 0, 1, 0), 1e-6)
    assert b.advance_to(1.0) == [3] and b.now_s == pytest.approx(1e-6)
