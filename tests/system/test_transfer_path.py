"""The engine's per-transfer path on the fluid backend (a row per flow written by ``fluid_kernel.table_append``,
drained rows compacted by ``table_compact``): a dependency DAG with known completion times, the order in
which transfers released at one instant start, and snapshots that round-trip while fluid flows are in flight.
"""

from __future__ import annotations

import pytest
from helpers import one_collective, star

from moesim.network.base import Flow
from moesim.network.fluid import FluidBackend
from moesim.network.params import REFERENCE_PRESETS
from moesim.system.collectives import StepTiming
from moesim.system.engine import Simulation, SystemSettings
from moesim.system.snapshot import restore, snapshot
from moesim.system.state import FlowOrigin
from moesim.workload.graph import CollectiveType as C

P = REFERENCE_PRESETS["none"]
NO_COMPUTE = SystemSettings(roofline=False)


def ring_message_s(msg: int, bw_bps: float = 400e9, delay_s: float = 500e-9) -> float:
    """One ring step's message on host→switch→host: 4 propagation delays, the last packet (≤ 1000 B + 36 B
    of headers) and two 48 B ACKs stored and forwarded, and its bytes at the sender's port, which carries
    its 1036 wire bytes per 1000 B and the 48 B ACKs of the message that host receives meanwhile: 1.084
    wire bytes per payload byte at line rate."""
    c = bw_bps / 8
    return 4 * delay_s + (min(1000, msg) + 36) / c + 2 * 48 / c + msg * 1.084 / c


@pytest.mark.parametrize("n", [4, 8])
def test_a_ring_all_reduce_on_the_fluid_backend_ends_at_its_closed_form(n):
    """The ring all-reduce's plan is a chain of 2(N−1) dependent steps per chunk (each member's step s waits
    for its step s−1 to arrive); on a non-blocking star every step's N messages run alone on their own
    ports (``ring_message_s``), so each chunk takes 2(N−1) messages of D/N, (2N−1) bundle delays of 10 ns and N−1
    reductions, and the 4 chunks run one after another: wall = 4 × that."""
    size = 64 << 20
    topo = star(n)
    sim = Simulation(one_collective(n, C.ALL_REDUCE, size), topo, FluidBackend(topo, P), NO_COMPUTE)
    times = sim.run()
    d = size // 4
    per_chunk = 2 * (n - 1) * ring_message_s(d // n) + (2 * n - 1) * 10e-9 + (n - 1) * StepTiming().reduction_s(d // n)
    assert max(t.wall_s for t in times) == pytest.approx(4 * per_chunk, rel=1e-9)
    assert sim.next_flow_id == 4 * 2 * (n - 1) * n
    assert sim.backend.flow_table.n == 0  # every drained row was compacted away


def test_transfers_released_at_one_instant_start_in_release_order():
    """On the symmetric star every member's messages of one ring step complete at the same instant. The
    completions are handled in flow-start order, and the message from rank r releases rank r+1's next
    transfer (it forwards what arrived; after a chunk's last step, its next chunk's first), all due one
    bundle delay later at one common time, where the tied events run first in, first out. So the senders'
    order rotates by one per instant: at the k-th instant the flows have consecutive ids and come from
    ranks k, k+1, …, k+N−1 (mod N), in that order."""
    n = 4
    topo = star(n)
    sim = Simulation(one_collective(n, C.ALL_REDUCE, 1 << 20), topo, FluidBackend(topo, P), NO_COMPUTE)
    by_instant: dict[float, list[tuple[int, int]]] = {}

    def started(flow: Flow, origin: FlowOrigin) -> None:
        by_instant.setdefault(sim.now, []).append((flow.flow_id, origin.src_rank))

    sim.hooks.flow_started.append(started)
    sim.run()
    assert len(by_instant) == 4 * 2 * (n - 1)  # one instant per ring step and chunk
    for k, (_, flows) in enumerate(sorted(by_instant.items())):
        assert [f for f, _ in flows] == list(range(k * n, (k + 1) * n))
        assert [r for _, r in flows] == [(k + i) % n for i in range(n)]


def test_snapshots_round_trip_with_fluid_flows_in_flight():
    """A snapshot taken after any step and installed back changes nothing, and the run ends as without."""
    def fresh() -> Simulation:
        topo = star(4)
        return Simulation(one_collective(4, C.ALL_TO_ALL, 1 << 20), topo, FluidBackend(topo, P), NO_COMPUTE)

    plain = fresh().run()
    sim = fresh()
    in_flight = []

    def round_trip() -> None:
        state = snapshot(sim)
        restore(sim, state)
        assert snapshot(sim) == state
        in_flight.append(len(state.flows))

    sim.hooks.step_finished.append(round_trip)
    assert sim.run() == plain
    assert max(in_flight) > 0
