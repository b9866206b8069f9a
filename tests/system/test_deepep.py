"""DeepEP's two all-to-alls (docs/overlap.md): the normal kernels' streamed forwarding (hierarchical) and the
low-latency kernels' pure-RDMA sends, as plans and on small runs with closed forms."""

from __future__ import annotations

from helpers import one_collective

from moesim.network.flow import FlowBackend
from moesim.network.params import REFERENCE_PRESETS
from moesim.system.collectives.base import Members, StepTiming
from moesim.system.collectives.hierarchical import STREAM_PIECES, hierarchical_plan, stream_pieces
from moesim.system.engine import Simulation, SystemSettings
from moesim.topology.catalog import get_topology
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


def test_hierarchical_streams_each_piece_to_its_forwards():
    """Two servers of two members: member 0's RDMA message to member 2 is cut in pieces; piece k waits for
    piece k-2's arrival, and each forward 2→3 of piece k waits for piece k only; the pieces carry the
    unstreamed message's bytes."""
    n, size = 4, 4_000_000
    plan = hierarchical_plan(A2A, n, size, StepTiming(), Members((0, 0, 1, 1)))
    msg = size // n
    rdma = [j for j, t in enumerate(plan.transfers) if (t.src, t.dst) == (0, 2)]
    assert len(rdma) == STREAM_PIECES + 1
    assert sum(plan.transfers[j].size_bytes for j in rdma) == 2 * msg
    for k, j in enumerate(rdma):
        assert plan.transfers[j].after == ((rdma[k - 2],) if k >= 2 else ())
    fwd = [j for j, t in enumerate(plan.transfers) if (t.src, t.dst) == (2, 3) and t.after]
    assert [plan.transfers[j].after for j in fwd] == [(j,) for j in rdma]
    assert sum(plan.transfers[j].size_bytes for j in fwd) == msg
    # each member: msg from its server mate, the 2·msg RDMA message of its rail peer (its own share and the
    # one it forwards), msg forwarded by its server mate
    assert [plan.bytes_received(m) for m in range(n)] == [4 * msg] * n


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
    streamed = (2 * m + 3 * m / (2 * STREAM_PIECES)) / rate
    assert abs(wall - streamed) / streamed < 0.005
    assert wall < 0.8 * 3 * m / rate
