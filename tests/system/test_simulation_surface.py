"""The public surface tools build on (layer fast-forward, benchmarks): hooks, snapshot and restore.

Structural checks: hooks see every node and flow once, in an order the graph allows; restoring a
snapshot changes nothing; moving the whole state later moves every later time by the same amount.
"""

from __future__ import annotations

import pytest
from helpers import star

from moesim.network.base import Flow
from moesim.network.flow import FlowBackend
from moesim.network.params import REFERENCE_PRESETS
from moesim.system.engine import Simulation, SystemSettings
from moesim.system.snapshot import restore, snapshot
from moesim.system.state import FlowOrigin
from moesim.workload.graph import CollectiveType as C
from moesim.workload.graph import Node, NodeKind, RankGraph, Workload

P = REFERENCE_PRESETS["none"]
N = 4


def layered(dbt: bool, dims: tuple[int, ...] = (N,), splits: int = 4) -> tuple[Workload, SystemSettings]:
    """Per rank: compute → all-reduce → compute → all-to-all → compute, the collectives over all ranks;
    with ``dbt`` the all-reduce is a double binary tree, whose ranks finish it at different times; over
    several ``dims`` both collectives run as phases."""
    comp = dict(kind=NodeKind.COMPUTE, flops=10**9, bytes_moved=10**3)
    nodes = (
        Node(0, "a", **comp),
        Node(1, "ar", NodeKind.COLLECTIVE, deps=(0,), collective=C.ALL_REDUCE, size_bytes=1 << 20),
        Node(2, "b", deps=(1,), **comp),
        Node(3, "a2a", NodeKind.COLLECTIVE, deps=(2,), collective=C.ALL_TO_ALL, size_bytes=1 << 20),
        Node(4, "c", deps=(3,), **comp),
    )
    impl = ("dbt", "dbt") if dbt else ("ring", "ring")
    return (Workload("layered", tuple(RankGraph(r, nodes) for r in range(N)), dims),
            SystemSettings(all_reduce=impl, fast_forward=False, dataset_splits=splits))


def simulation(dbt: bool = False, dims: tuple[int, ...] = (N,), splits: int = 4) -> Simulation:
    workload, settings = layered(dbt, dims, splits)
    topo = star(N)
    return Simulation(workload, topo, FlowBackend(topo, P), settings)


def test_hooks_see_every_node_and_flow_once_in_an_order_the_graph_allows():
    sim = simulation(dbt=True)
    started: dict[tuple[int, int], float] = {}
    finished: dict[tuple[int, int], float] = {}
    flows: dict[int, list[float]] = {}

    def node_started(r: int, i: int) -> None:
        assert (r, i) not in started
        deps = sim.workload.graphs[r].nodes[i].deps
        assert all((r, d) in finished for d in deps)  # node ids equal indices here
        started[(r, i)] = sim.now

    def node_finished(r: int, i: int) -> None:
        assert (r, i) in started and (r, i) not in finished
        finished[(r, i)] = sim.now

    def flow_started(flow: Flow, origin: FlowOrigin) -> None:
        assert flow.flow_id not in flows
        assert (origin.src_rank, origin.dst_rank) == (flow.src_gpu, flow.dst_gpu)  # placement: rank r on GPU r
        node = 1 + 2 * origin.seq  # the all-reduce (node 1) is the group's collective 0, the all-to-all 1
        assert origin.src_rank in origin.members and origin.chunk < 4 and origin.src_node == node
        assert origin.dst_node in (None, node)  # None: the receiver has not issued it yet
        flows[flow.flow_id] = [sim.now]

    def flow_finished(flow_id: int, origin: FlowOrigin) -> None:
        assert len(flows[flow_id]) == 1 and origin.dst_node in (None, 1 + 2 * origin.seq)
        flows[flow_id].append(sim.now)

    for hook, fn in ((sim.hooks.node_started, node_started), (sim.hooks.node_finished, node_finished),
                     (sim.hooks.flow_started, flow_started), (sim.hooks.flow_finished, flow_finished)):
        hook.append(fn)
    ranks = sim.run()
    assert set(started) == set(finished) == {(r, i) for r in range(N) for i in range(5)}
    assert all(started[k] <= finished[k] for k in started)
    assert flows and all(len(v) == 2 and v[0] < v[1] for v in flows.values())
    assert sorted(flows) == list(range(len(flows)))
    for r, t in enumerate(ranks):  # wall = the rank's last node end
        assert t.wall_s == max(finished[(r, i)] for i in range(5))


@pytest.mark.parametrize("dims,splits", [((N,), 4), ((2, 2), 3)])
def test_restoring_a_snapshot_after_every_step_changes_nothing(dims, splits):
    """Also over two dimensions with an odd chunk count: the phases' queues and the tree counters, whose
    parity then changes from one collective to the next, are in the snapshot."""
    plain = simulation(dbt=True, dims=dims, splits=splits).run()
    sim = simulation(dbt=True, dims=dims, splits=splits)
    steps = []

    def round_trip() -> None:
        state = snapshot(sim)
        restore(sim, state)
        assert snapshot(sim) == state
        steps.append(len(state.flows))

    sim.hooks.step_finished.append(round_trip)
    assert sim.run() == plain
    assert max(steps) > 0  # some steps had flows in flight


def test_moving_the_state_later_moves_every_later_time_by_as_much():
    """Halfway through, the state and the backend move 1 ms later: every wall time moves by 1 ms, GPU
    times do not change, communication times (differences of two shifted times) stay within rounding."""
    plain = simulation().run()
    sim = simulation()
    shift_s, half_s = 1e-3, max(t.wall_s for t in plain) / 2
    moved = []

    def move_once() -> None:
        if not moved and sim.now >= half_s:
            moved.append(len(snapshot(sim).flows))
            restore(sim, snapshot(sim), shift_s)
            sim.backend.shift_time(shift_s)

    sim.hooks.step_finished.append(move_once)
    shifted = sim.run()
    assert moved
    for a, b in zip(shifted, plain, strict=True):
        assert abs(a.wall_s - (b.wall_s + shift_s)) <= 1e-12
        assert a.gpu_s == b.gpu_s
        assert abs(a.comm_s - b.comm_s) <= 1e-12


def test_the_engine_knows_nothing_of_snapshots_or_fast_forward():
    """Snapshot and restore (``snapshot.py``) and layer fast-forward are built on the engine, never in it."""
    import ast
    from pathlib import Path

    import moesim.system.engine as engine

    tree = ast.parse(Path(engine.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {"moesim.system.snapshot", "moesim.system.fast_forward"} & imported
    assert "moesim.system.runtime" in imported
    assert not hasattr(Simulation, "snapshot") and not hasattr(Simulation, "restore")
