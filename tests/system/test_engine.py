"""Engine tests: closed-form collective times, the reference scenario S1, semantics of the event loop."""

from __future__ import annotations

import pytest
from helpers import DP_EP_DECODE, one_collective, star

from moesim.errors import MoesimError
from moesim.network.analytical import AnalyticalBackend
from moesim.network.flow import FlowBackend
from moesim.network.params import REFERENCE_PRESETS
from moesim.system.collectives import StepTiming
from moesim.system.engine import Simulation, SystemSettings
from moesim.system.run import simulate
from moesim.workload.graph import CollectiveType as C
from moesim.workload.graph import Node, NodeKind, RankGraph, Workload

P = REFERENCE_PRESETS["none"]
NO_COMPUTE = SystemSettings(roofline=False)


def wall(times):
    return max(t.wall_s for t in times)


def analytical_step_s(msg: int, bw_bps=400e9, delay_s=500e-9) -> float:
    """One message on host→switch→host alone: latency + size·1036/1000 at line rate."""
    c = bw_bps / 8
    last = min(1000, msg) + 36
    return 4 * delay_s + last / c + 2 * 48 / c + msg * 1.036 / c


@pytest.mark.parametrize("n", [4, 8, 16])
def test_ring_all_reduce_closed_form_on_a_non_blocking_fabric(n):
    # per chunk: 2(N-1) sequential steps of D/N, (2N-1) bundle delays, N-1 reductions; 4 chunks in turn
    size = 64 << 20
    topo = star(n)
    times = simulate(one_collective(n, C.ALL_REDUCE, size), topo, AnalyticalBackend(topo, P), NO_COMPUTE)
    d = size // 4
    timing = StepTiming()
    per_chunk = 2 * (n - 1) * analytical_step_s(d // n) + (2 * n - 1) * 10e-9 + (n - 1) * timing.reduction_s(d // n)
    assert wall(times) == pytest.approx(4 * per_chunk, rel=1e-9)
    assert all(t.comm_s == pytest.approx(t.wall_s) for t in times)


@pytest.mark.parametrize(
    "ctype,reference_ns",
    [(C.ALL_REDUCE, 3_474_644), (C.ALL_TO_ALL, 1_438_236)],
)
def test_s1_flow_backend_is_close_to_the_reference(ctype, reference_ns):
    """docs/reference-runs.md S1, no CC: the flow model lands within 2 % of ASTRA-sim + NS-3."""
    topo = star(32)
    times = simulate(one_collective(32, ctype, 64 << 20), topo, FlowBackend(topo, P), NO_COMPUTE)
    assert wall(times) * 1e9 == pytest.approx(reference_ns, rel=0.02)


def chain(rank_nodes):
    return tuple(RankGraph(r, nodes) for r, nodes in enumerate(rank_nodes))


def test_compute_and_comm_times_are_unions_and_wall_is_the_last_end():
    # rank: compute (1 µs at peak) → all-reduce → compute; GPU = 2 µs, comm = AR time, wall = sum
    comp = dict(kind=NodeKind.COMPUTE, flops=10**9, bytes_moved=10**3)  # compute-bound: 1e9/1e15 = 1 µs
    nodes = (
        Node(0, "a", **comp),
        Node(1, "ar", NodeKind.COLLECTIVE, deps=(0,), collective=C.ALL_REDUCE, size_bytes=1 << 20),
        Node(2, "b", deps=(1,), **comp),
    )
    wl = Workload("w", chain([nodes] * 4), (4,))
    topo = star(4)
    times = simulate(wl, topo, FlowBackend(topo, P), SystemSettings())
    for t in times:
        assert t.gpu_s == pytest.approx(2e-6)
        assert t.wall_s == pytest.approx(t.gpu_s + t.comm_s, rel=1e-12)


def test_compute_overlaps_communication_when_the_graph_allows_it():
    # node 1 (collective) and node 2 (compute) both depend only on node 0: they run concurrently
    comp = dict(kind=NodeKind.COMPUTE, flops=10**10, bytes_moved=10**3)  # 10 µs
    nodes = (
        Node(0, "a", **comp),
        Node(1, "ar", NodeKind.COLLECTIVE, deps=(0,), collective=C.ALL_REDUCE, size_bytes=1 << 16),
        Node(2, "b", deps=(0,), **comp),
    )
    wl = Workload("w", chain([nodes] * 2), (2,))
    topo = star(2)
    t = simulate(wl, topo, FlowBackend(topo, P), SystemSettings())[0]
    assert t.wall_s < t.gpu_s + t.comm_s


def test_a_collective_without_peers_is_a_clear_error_not_a_hang():
    nodes0 = (Node(0, "ar", NodeKind.COLLECTIVE, collective=C.ALL_REDUCE, size_bytes=1 << 16),)
    nodes1 = (Node(0, "c", NodeKind.COMPUTE, flops=10, bytes_moved=10),)
    wl = Workload("w", chain([nodes0, nodes1]), (2,))
    topo = star(2)
    with pytest.raises(MoesimError, match="stalled"):
        simulate(wl, topo, FlowBackend(topo, P), SystemSettings())


def test_mismatched_collectives_across_ranks_are_reported():
    a = (Node(0, "ar", NodeKind.COLLECTIVE, collective=C.ALL_REDUCE, size_bytes=1 << 16),)
    b = (Node(0, "ar", NodeKind.COLLECTIVE, collective=C.ALL_REDUCE, size_bytes=1 << 17),)
    wl = Workload("w", chain([a, b]), (2,))
    topo = star(2)
    with pytest.raises(MoesimError, match="on another rank"):
        simulate(wl, topo, FlowBackend(topo, P), SystemSettings())


@pytest.mark.parametrize("n", [2, 4])
def test_the_engine_counts_every_flow_start_and_completion_and_stream_exit(n):
    """A ring all-reduce of 4 chunks on the flow backend: each of the 4·2(n−1)·n transfers is one start event
    and one completion, and each member leaves each chunk once (a stream exit): events = 2·flows + 4n."""
    topo = star(n)
    sim = Simulation(one_collective(n, C.ALL_REDUCE, 1 << 20), topo, FlowBackend(topo, P), NO_COMPUTE)
    sim.run()
    flows = 4 * 2 * (n - 1) * n
    assert sim.next_flow_id == flows
    assert sim.events_handled == 2 * flows + 4 * n


class OneByOne(Simulation):
    """The engine releasing every transfer of a stream's start as its own event."""

    group_transfer_starts = False


def test_transfers_released_together_start_as_their_single_events_would():
    """A DP EP decode step (per-pair low-latency all-to-alls: every member posts all its writes at its stream's
    start, one grouped event) on the fluid backend: the flows reach the backend in the same order with the
    same ids at the same instants, every rank's times are bit-identical and the handled-event count is the same."""
    import dataclasses

    from moesim.system import fast_forward
    from moesim.system.run import prepare

    prepared = prepare(DP_EP_DECODE)
    out = []
    for cls in (Simulation, OneByOne):
        backend = prepared.backend_cls(prepared.topology, prepared.params)
        sim = cls(prepared.workload(), prepared.topology, backend, prepared.settings)
        fast_forward.attach(sim)
        started: list[tuple[float, tuple]] = []
        sim.hooks.flow_started.append(lambda flow, origin, sim=sim, started=started: started.append((sim.now, flow)))
        grouped = []
        if cls is Simulation:  # the grouped path is taken
            sim.hooks.step_finished.append(lambda sim=sim, grouped=grouped: grouped.append(
                sum(1 for *_, kind, _ in sim.events.items() if kind.name == "TRANSFERS_START")))
        ranks = sim.run()
        out.append((ranks, started, sim.events_handled, max(grouped, default=0)))
    (ranks_a, flows_a, events_a, grouped), (ranks_b, flows_b, events_b, _) = out
    assert grouped > 0 and len(flows_a) > 10_000
    assert flows_a == flows_b and events_a == events_b
    assert [dataclasses.astuple(r) for r in ranks_a] == [dataclasses.astuple(r) for r in ranks_b]


def test_full_garbage_collections_wait_while_the_loop_runs_and_the_thresholds_come_back():
    """Inside the event loop the oldest generation's threshold is ``FULL_COLLECTIONS_PAUSED`` (young
    generations keep theirs); after the run, and after a run that fails, the thresholds are the caller's."""
    import gc

    from moesim.system.engine import FULL_COLLECTIONS_PAUSED

    before = gc.get_threshold()
    topo = star(4)
    sim = Simulation(one_collective(4, C.ALL_REDUCE, 1 << 20), topo, FlowBackend(topo, P), NO_COMPUTE)
    seen = []
    sim.hooks.step_finished.append(lambda: seen.append(gc.get_threshold()))
    sim.run()
    assert seen and set(seen) == {(before[0], before[1], FULL_COLLECTIONS_PAUSED)}
    assert gc.get_threshold() == before
    failing = Simulation(one_collective(4, C.ALL_REDUCE, 1 << 20), topo, FlowBackend(topo, P), NO_COMPUTE)

    def fail() -> None:
        raise RuntimeError("stop")

    failing.hooks.step_finished.append(fail)
    with pytest.raises(RuntimeError, match="stop"):
        failing.run()
    assert gc.get_threshold() == before
