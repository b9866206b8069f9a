"""DeepEP's two all-to-alls (docs/overlap.md): the normal kernels' streamed forwarding (hierarchical) and the
low-latency kernels' pure-RDMA sends, as plans and on small runs with closed forms."""

from __future__ import annotations

import dataclasses

from helpers import one_collective

from moesim.network.flow import FlowBackend
from moesim.network.params import REFERENCE_PRESETS
from moesim.system.collectives.base import (
    Members,
    StepTiming,
    expert_all_to_all_algorithms,
    occupies_sms,
    plan_for,
)
from moesim.system.collectives.hierarchical import (
    STREAM_MAX_PIECES,
    STREAM_PIECE_BYTES,
    hierarchical_plan,
    stream_piece_count,
    stream_pieces,
)
from moesim.system.collectives.low_latency import rdma_only_server
from moesim.system.engine import Simulation, SystemSettings
from moesim.topology.builder import build_topology
from moesim.topology.catalog import get_topology
from moesim.topology.templates import template_spec
from moesim.workload.graph import CollectiveType

P = REFERENCE_PRESETS["none"]
A2A = CollectiveType.ALL_TO_ALL


def test_stream_pieces_halve_the_ends_and_conserve_bytes():
    for size in (16, 1000, 7_654_321):
        parts = stream_pieces(size, 8)
        assert sum(parts) == size and len(parts) == 9
        assert abs(parts[0] - size / 16) <= 1 and abs(parts[-1] - size / 16) <= 1
        assert all(abs(p - size / 8) <= 1 for p in parts[1:-1])
    assert stream_pieces(10, 8) == (10,)  # too small to cut


def test_messages_stream_in_pieces_of_deepeps_chunk_bytes():
    """A message of k·STREAM_PIECE_BYTES streams in k pieces, one under 1.5 pieces goes whole, and no
    message in more than STREAM_MAX_PIECES."""
    assert [stream_piece_count(k * STREAM_PIECE_BYTES) for k in (1, 3, 7)] == [1, 3, 7]
    assert stream_piece_count(STREAM_PIECE_BYTES * 14 // 10) == stream_piece_count(1000) == 1
    assert stream_piece_count(10**12) == STREAM_MAX_PIECES


def test_hierarchical_streams_each_piece_to_its_forwards():
    """Two servers of two members: member 0's RDMA message to member 2 is cut in pieces; piece k waits for
    piece k-2's arrival, and each forward 2→3 of piece k waits for piece k only; the pieces carry the
    unstreamed message's bytes."""
    n, size = 4, 8 * STREAM_PIECE_BYTES
    plan = hierarchical_plan(A2A, n, size, StepTiming(), Members((0, 0, 1, 1)))
    msg = size // n
    rdma = [j for j, t in enumerate(plan.transfers) if (t.src, t.dst) == (0, 2)]
    assert len(rdma) == stream_piece_count(2 * msg) + 1 == 5
    assert sum(plan.transfers[j].size_bytes for j in rdma) == 2 * msg
    for k, j in enumerate(rdma):
        assert plan.transfers[j].after == ((rdma[k - 2],) if k >= 2 else ())
    fwd = [j for j, t in enumerate(plan.transfers) if (t.src, t.dst) == (2, 3) and t.after]
    assert [plan.transfers[j].after for j in fwd] == [(j,) for j in rdma]
    assert sum(plan.transfers[j].size_bytes for j in fwd) == msg
    # each member: msg from its server mate, the 2·msg RDMA message of its rail peer (its own share and the
    # one it forwards), msg forwarded by its server mate
    assert [plan.bytes_received(m) for m in range(n)] == [4 * msg] * n


def test_a_message_with_nothing_to_forward_goes_whole():
    """One member per server (EP2 over two servers): the rail peer keeps everything, so its message is not cut."""
    size = 64 * STREAM_PIECE_BYTES
    plan = hierarchical_plan(A2A, 2, size, StepTiming(), Members((0, 1)))
    assert [(t.src, t.dst, t.size_bytes, t.after) for t in plan.transfers] == [(0, 1, size // 2, ()), (1, 0, size // 2, ())]


def test_streamed_forwarding_overlaps_the_rdma_message_closed_form():
    """Two servers, two GPUs each (ranks on GPUs 0, 1, 8, 9), NVLink, NIC and fabric at one rate B, PCIe far
    faster. Rank 0 sends m = D/4 to rank 1 over NVLink and 2m to its rail peer (rank 2), which forwards m to
    rank 3. Streamed in P pieces, the forward of each piece runs while the next are on the wire: the NIC is busy
    throughout (2m), and the last two pieces (a full and a half one, in flight together) arrive at its end, so
    their forwards (m/P + m/(2P)) follow on an NVLink the direct transfer has left: (2m + 3m/(2P))/B' with
    B' = B / (1.036 + 0.048) (data headers and the reverse flows' ACKs on each link); forwarding after the
    whole message would take (2m + m)/B'. Latencies (a few µs) are within the tolerance."""
    bw = 400e9
    topo = get_topology("hgx-h100:2").with_link_bandwidths({"nvlink": bw, "fabric": bw, "pcie": 100 * bw})
    size = 400_000_000
    m = size // 4
    sim = Simulation(one_collective(4, A2A, size), topo, FlowBackend(topo, P),
                     SystemSettings(all_to_all=("hierarchical",), fast_forward=False, dataset_splits=1),
                     placement=(0, 1, 8, 9))
    wall = max(t.wall_s for t in sim.run())
    rate = bw / 8 / (1 + (P.transport.data_header_bytes + P.transport.ack_bytes) / P.transport.packet_payload_bytes)
    pieces = stream_piece_count(2 * m)
    streamed = (2 * m + 3 * m / (2 * pieces)) / rate
    assert abs(wall - streamed) / streamed < 0.005
    assert wall < 0.8 * 3 * m / rate


# ---------------------------------------------------------------------------------------------- low latency


def _rdma_only(servers: int):
    spec = template_spec(f"hgx-h800:{servers}")
    return build_topology(dataclasses.replace(spec, server=rdma_only_server(spec.server)),
                          P.transport.nic_switch_delay_s)


def test_low_latency_sends_every_row_straight_to_its_experts_gpu():
    """Member i's rows for member j (D/N) leave i once, addressed to j, waiting for nothing (no relay, no
    deduplication); bytes are conserved: each member sends and receives (N-1)·D/N."""
    n, size = 16, 16 * 7408 * 8
    plan = plan_for("low_latency", A2A, n, size, StepTiming())
    pairs = [(t.src, t.dst) for t in plan.transfers]
    assert sorted(pairs) == [(i, j) for i in range(n) for j in range(n) if i != j]
    assert all(t.size_bytes == size // n and t.after == () and t.after_sent == () for t in plan.transfers)
    assert all(plan.bytes_sent(m) == plan.bytes_received(m) == (n - 1) * size // n for m in range(n))
    assert [sorted(plan.transfers[j].src for j in plan.exit_after[m]) for m in range(n)] == \
        [[i for i in range(n) if i != m] for m in range(n)]


def test_low_latency_takes_no_sms_and_is_a_run_choice():
    assert not occupies_sms("low_latency")
    assert occupies_sms("direct") and occupies_sms("hierarchical") and occupies_sms("direct8")
    assert "low_latency" in expert_all_to_all_algorithms()


def test_low_latency_on_an_rdma_only_server_crosses_nics_only_closed_form():
    """EP16 on two H800 servers as pure-RDMA kernels use them: every flow, server mates' included, leaves
    through its sender's NIC and enters through its receiver's (no NVLink, no CPU on the path), so each NIC
    carries (N-1)·D/N out and in, and the all-to-all takes (N-1)·D/N / B' plus a few µs of latency
    (B' = 50 GB/s over 1.036 data and 0.048 ACK bytes per payload byte)."""
    n, size = 16, 16 * 128 * 8 * 7408
    topo = _rdma_only(2)
    sim = Simulation(one_collective(n, A2A, size), topo, FlowBackend(topo, P),
                     SystemSettings(all_to_all=("low_latency",), dataset_splits=1, fast_forward=False))
    nic_out: dict[str, int] = {}
    kinds: set[str] = set()

    def started(flow, _origin):
        route = [topo.links[i] for i in topo.route(flow.src_gpu, flow.dst_gpu, flow.flow_id)]
        kinds.update(link.kind for link in route)
        src, dst = topo.gpus[flow.src_gpu], topo.gpus[flow.dst_gpu]
        assert [link.src for link in route if link.kind == "fabric"][0] == src.nic
        assert [link.dst for link in route if link.kind == "fabric"][-1] == dst.nic
        nic_out[src.nic] = nic_out.get(src.nic, 0) + flow.size_bytes

    sim.hooks.flow_started.append(started)
    wall = max(t.wall_s for t in sim.run())
    assert kinds == {"pcie", "fabric"}
    assert sorted(nic_out.values()) == [(n - 1) * (size // n)] * n
    rate = 400e9 / 8 / (1 + (P.transport.data_header_bytes + P.transport.ack_bytes) / P.transport.packet_payload_bytes)
    expected = (n - 1) * (size // n) / rate
    assert expected < wall < expected + 10e-6
