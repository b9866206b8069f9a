"""When a PFC fabric drops (docs/network-packet.md, "Lossless for data, not for ACKs").

The headroom of a switch port, ``rate·delay/8·3``, holds the data in flight after a PAUSE (two
propagation delays, two packets, the PFC frame). It does not hold ACKs: with ``ack_high_prio``
(ACK_HIGH_PRIO 1, as in the reference's DCQCN preset) a paused NIC keeps sending its ACKs, while the
switch queues them in the data class and charges them to the paused port (the reference sets
ACK_HIGH_PRIO on hosts only; docs/reference-semantics.md A.1, A.2). ACKs that wait behind a backlog
fill that port's headroom, and the switch drops them — never data.
"""

from __future__ import annotations

import pytest
from helpers import star

from moesim.network.base import Flow
from moesim.network.packet import PacketBackend
from moesim.network.params import REFERENCE_PRESETS, NetworkParams
from moesim.topology.model import GpuInfo, Link, NodeKind, Topology, TopoNode

NO_CC = REFERENCE_PRESETS["none"].with_overrides({"has_win": False})
INCAST, SIDE = 2_000_000, 32_000_000
SENDERS = 32


def drain(backend: PacketBackend, flows: int) -> dict:
    done = 0
    while done < flows:
        done += len(backend.advance_to(backend.next_completion_s(None)))
    return backend.stats()


def incast_with_acks(params: NetworkParams) -> dict:
    """h1..h32 → h0 (PFC pauses every sender) while h0 → h1 at line rate: h1's ACKs for it queue at
    the switch's port to h0 behind the incast, charged to h1's paused ingress port."""
    backend = PacketBackend(star(SENDERS + 1), params)
    for i in range(1, SENDERS + 1):
        backend.start_flow(Flow(i, i, 0, INCAST), 0.0)
    backend.start_flow(Flow(0, 0, 1, SIDE), 0.0)
    return drain(backend, SENDERS + 1)


def test_headroom_covers_the_data_in_flight_after_a_pause():
    # 400 Gb/s, 500 ns: 75000 B against 2 delays + 2 packets of 1036 B + the 31-B PAUSE at line rate
    rate, delay = 400e9, 500e-9
    headroom = int(rate * delay / 8 * 3)
    assert headroom == 75_000
    assert 2 * rate * delay / 8 + 2 * 1036 + 31 < headroom


def test_acks_of_paused_nics_overflow_headroom_only_with_ack_high_prio():
    lossy = incast_with_acks(NO_CC.with_overrides({"ack_high_prio": True}))
    lossless = incast_with_acks(NO_CC)  # ack_high_prio False: a PAUSE holds the ACK queue too
    assert lossless["pauses"] > 100 and lossless["drops"] == 0
    assert lossy["pauses"] > 100 and lossy["drops"] > 1000
    assert lossy["ack_drops"] == lossy["drops"]  # only ACKs: the data in flight always fits
    assert lossy["delivered_bytes"] == lossless["delivered_bytes"] == SENDERS * INCAST + SIDE


def test_cnps_that_no_congestion_control_reads_are_counted_apart():
    # ENABLE_QCN 1 without CC (ASTRA-sim's shipped CC_MODE 12): switches mark, receivers echo, nobody reacts
    none = incast_with_acks(NO_CC)
    assert none["ecn_marks"] > 0 and none["cnps"] == 0
    assert 0 < none["cnps_ignored"] <= none["ecn_marks"]
    dcqcn = incast_with_acks(REFERENCE_PRESETS["dcqcn"].with_overrides({"ack_high_prio": False}))
    assert dcqcn["cnps"] > 0 and dcqcn["cnps_ignored"] == 0


def two_leaves(per_leaf: int) -> Topology:
    """Leaves A and B with ``per_leaf`` hosts each, joined through a middle switch; 400 Gb/s, 500 ns."""
    n = 2 * per_leaf
    nodes = [TopoNode(f"h{i}", NodeKind.GPU, i) for i in range(n)]
    nodes += [TopoNode(s, NodeKind.SWITCH) for s in ("leaf_a", "leaf_b", "mid")]
    ends = [(f"h{i}", "leaf_a" if i < per_leaf else "leaf_b") for i in range(n)]
    ends += [("leaf_a", "mid"), ("leaf_b", "mid")]
    links = []
    for a, b in ends:
        links += [Link(len(links), a, b, 400e9, 500e-9, "fabric"), Link(len(links) + 1, b, a, 400e9, 500e-9, "fabric")]
    gpus = tuple(GpuInfo(f"h{i}", i, None, None, None) for i in range(n))
    return Topology(f"two_leaves{per_leaf}", tuple(nodes), tuple(links), gpus)


@pytest.mark.slow
@pytest.mark.parametrize("ack_high_prio", [True, False])
def test_reported_all_to_all_through_two_leaves(ack_high_prio):
    # issue #35: a 64 MiB direct all-to-all of 32 hosts (2 MiB per message) under the DCQCN preset
    # with windows on; the ACKs of paused hosts wait behind the leaf uplinks' backlog
    params = REFERENCE_PRESETS["dcqcn"].with_overrides({"has_win": True, "ack_high_prio": ack_high_prio})
    backend = PacketBackend(two_leaves(16), params)
    pairs = [(s, d) for s in range(32) for d in range(32) if s != d]
    for i, (s, d) in enumerate(pairs):
        backend.start_flow(Flow(i, s, d, 2 << 20), 0.0)
    st = drain(backend, len(pairs))
    assert st["pauses"] > 1000 and st["delivered_bytes"] == len(pairs) * (2 << 20)
    if ack_high_prio:
        assert st["drops"] > 0 and st["ack_drops"] == st["drops"]
    else:
        assert st["drops"] == 0
