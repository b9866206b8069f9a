"""The per-node breakdown: recording it changes no result, fast-forwarded layers are copied as full
simulation would have run them, and its rows add up to the engine's per-rank figures."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from moesim.system import fast_forward
from moesim.system.breakdown import KINDS, LAYER_COLUMNS, NODE_COLUMNS, Recorder, kind_of
from moesim.system.engine import Simulation
from moesim.system.run import prepare, result_of, simulate_prepared
from moesim.system.spec import RunSpec
from moesim.workload.graph import CollectiveType, Node, NodeKind

EXACT = [  # ring: jumps when the network is idle; DBT: with flows and collectives in flight
    ("deepseek-v4-flash", "1", "TP2EP16", "ring_direct"),
    ("deepseek-v4-flash", "6", "TP2EP16", "dbt_direct"),
    ("deepseek-v4-flash", "4", "TP16EP2", "dbt_direct"),
]


def _prepared(model, topology, strategy, algorithm, fast_forward=True, **overrides):
    spec = RunSpec(model, topology, strategy, algorithm, "ib_cc0", "flow", tuple(sorted(overrides.items())))
    p = prepare(spec)
    return dataclasses.replace(p, settings=dataclasses.replace(p.settings, fast_forward=fast_forward))


@pytest.mark.parametrize("case", [*EXACT, ("deepseek-v4-flash", "5", "TP8EP4", "ring_direct")])
def test_recording_changes_no_result(case):
    p = _prepared(*case)
    plain, recorded = simulate_prepared(p), simulate_prepared(p, breakdown="nodes", detail=True)
    assert plain.fast_forwarded_layers == recorded.fast_forwarded_layers > 0
    assert plain.fast_forward_mode == recorded.fast_forward_mode
    assert plain.ranks == recorded.ranks  # bit-identical


@pytest.mark.parametrize("case", EXACT)
def test_fast_forwarded_layers_are_copied_as_full_simulation_runs_them(case):
    fast = simulate_prepared(_prepared(*case), breakdown="nodes")
    full = simulate_prepared(_prepared(*case, fast_forward=False), breakdown="nodes")
    assert fast.fast_forward_mode == "exact" and full.fast_forward_mode == "off"
    assert fast.breakdown is not None and full.breakdown is not None
    ref = {(n.rank, n.node_id): n for n in full.breakdown.records()}
    fast_nodes = fast.breakdown.records()
    assert len(ref) == len(fast_nodes) and not any(n.copied for n in ref.values())
    assert sum(n.copied for n in fast_nodes) > len(ref) // 2
    wall = max(r.wall_s for r in full.ranks)
    for n in fast_nodes:
        m = ref[(n.rank, n.node_id)]
        assert (n.layer, n.kind, n.size_bytes) == (m.layer, m.kind, m.size_bytes)
        for x, y in ((n.start_s, m.start_s), (n.end_s, m.end_s), (n.wait_s, m.wait_s)):
            assert abs(x - y) <= 1e-9 * wall


@pytest.mark.parametrize("case", [EXACT[1], ("deepseek-v4-flash", "3", "TP4EP8", "ring_direct")])
@pytest.mark.slow
def test_rows_add_up_to_the_engine_figures(case):
    p = _prepared(*case)
    sim = simulate_prepared(p, breakdown="layers")
    result = result_of(p, sim)
    workload = p.workload()
    assert sim.breakdown is not None
    nodes = sim.breakdown.records()
    assert [(n.rank, n.node_id) for n in nodes] == [(r, x.id) for r, g in enumerate(workload.graphs) for x in g.nodes]
    by_id = [{x.id: x for x in g.nodes} for g in workload.graphs]
    for n in nodes:
        node = by_id[n.rank][n.node_id]
        assert n.kind in KINDS and n.kind == kind_of(node)
        assert n.size_bytes == node.size_bytes and n.layer == node.layer
        assert 0.0 <= n.start_s <= n.end_s and n.wait_s >= 0.0
        assert n.wait_s <= n.end_s - n.start_s + 1e-15
    for r, t in enumerate(result.ranks):
        mine = [n for n in nodes if n.rank == r]
        gpu = sum(n.end_s - n.start_s for n in mine if n.kind == "compute")
        comm = sum(n.end_s - n.start_s for n in mine if n.kind != "compute")
        assert gpu == pytest.approx(t.gpu_s, rel=1e-9) and comm == pytest.approx(t.comm_s, rel=1e-6)
        assert max(n.end_s for n in mine) == pytest.approx(t.wall_s, rel=1e-12)
    table = result.breakdown
    assert table.schema.names == list(LAYER_COLUMNS)
    rows = table.to_pylist()
    keys = [(row["rank"], row["layer"], row["kind"]) for row in rows]
    expected = {(n.rank, n.layer, n.kind) for n in nodes}
    assert len(keys) == len(set(keys)) and set(keys) == expected  # one row per rank, layer and kind
    assert sum(row["nodes"] for row in rows) == len(nodes)
    for row in rows:
        assert row["busy_s"] <= row["end_s"] - row["start_s"] + 1e-12
        assert row["size_bytes"] == sum(n.size_bytes for n in nodes
                                        if (n.rank, n.layer, n.kind) == (row["rank"], row["layer"], row["kind"]))
    assert simulate_prepared(p, breakdown="nodes").breakdown.table("nodes").schema.names == list(NODE_COLUMNS)
    assert table.equals(sim.breakdown.table("layers"))  # deterministic order


def test_wait_is_the_last_members_issue_time_minus_ones_own():
    """Ranks start at seeded offsets and every rank's first node is the same compute: each rank issues its
    first collective at its offset plus that compute, so its wait is the latest offset in its group minus its own."""
    p = _prepared("deepseek-v4-flash", "1", "TP2EP16", "ring_direct", start_jitter_s=1e-5, jitter_seed=3)
    workload = p.workload()
    sim = Simulation(workload, p.topology, p.backend_cls(p.topology, p.params), p.settings)
    recorder = Recorder(sim, fast_forward=fast_forward.attach(sim))
    sim.run()
    offsets = sim.start_times_s()
    assert len(set(offsets)) == len(offsets)
    nodes = recorder.result().records()
    for r, graph in enumerate(workload.graphs):
        first = next(n for n in nodes if n.rank == r and n.kind != "compute")
        members = workload.collective_ranks(r, next(x for x in graph.nodes if x.id == first.node_id))
        assert first.wait_s == pytest.approx(max(offsets[m] for m in members) - offsets[r], abs=1e-15)
    assert np.mean([n.wait_s > 0 for n in nodes if n.kind != "compute"]) > 0.1


def test_kinds_follow_the_collective_type_and_name():
    def node(kind, ctype=None, name="x"):
        return Node(0, name, kind, collective=ctype)

    assert kind_of(node(NodeKind.COMPUTE)) == "compute"
    assert kind_of(node(NodeKind.COLLECTIVE, CollectiveType.ALL_REDUCE)) == "tp_all_reduce"
    assert kind_of(node(NodeKind.COLLECTIVE, CollectiveType.ALL_TO_ALL, "ep_dispatch")) == "ep_dispatch"
    assert kind_of(node(NodeKind.COLLECTIVE, CollectiveType.ALL_TO_ALL, "ep_combine")) == "ep_combine"
    assert kind_of(node(NodeKind.COLLECTIVE, CollectiveType.ALL_GATHER)) == "all_gather"


def test_unknown_level_is_a_one_line_error():
    with pytest.raises(Exception, match="allowed: none, layers, nodes"):
        simulate_prepared(_prepared(*EXACT[0]), breakdown="everything")
