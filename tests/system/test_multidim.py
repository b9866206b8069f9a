"""Collectives over several logical dimensions (``phases.py``) and the Double Binary Tree counter that
carries over from one collective to the next (docs/system.md)."""

from __future__ import annotations

import json

import pytest
from cli_fuzz import run_cli

from moesim.errors import MoesimError
from moesim.experiments.matrix import load_matrix
from moesim.network.analytical import AnalyticalBackend
from moesim.network.params import network_mode
from moesim.system.engine import Simulation, SystemSettings
from moesim.system.export import export_run
from moesim.system.microbench import CollectiveSpec, prepare_collective, run_collective
from moesim.system.phases import phase_types
from moesim.system.run import prepare, simulate_run
from moesim.system.spec import RunSpec
from moesim.topology.catalog import star_topology
from moesim.workload.chakra import read_et
from moesim.workload.graph import CollectiveType, Node, NodeKind, RankGraph, Workload

AR, RS, AG, A2A = (CollectiveType.ALL_REDUCE, CollectiveType.REDUCE_SCATTER, CollectiveType.ALL_GATHER,
                   CollectiveType.ALL_TO_ALL)


def test_phase_order() -> None:
    """localBWAware: RS up, AR on the last, AG down; baseline: AR per dimension; AG in reverse order."""
    assert phase_types(AR, [0, 1, 2], "localBWAware") == [(0, RS), (1, RS), (2, AR), (1, AG), (0, AG)]
    assert phase_types(AR, [0, 2], "baseline") == [(0, AR), (2, AR)]
    assert phase_types(AG, [0, 1], "localBWAware") == [(1, AG), (0, AG)]
    assert phase_types(A2A, [0, 1], "localBWAware") == [(0, A2A), (1, A2A)]


def dbt_flows(collectives: int, splits: int, n: int = 4) -> list[tuple[int, int]]:
    """(src, dst) of every flow of ``collectives`` DBT all-reduces in a row on ``n`` ranks."""
    graphs = tuple(RankGraph(r, tuple(
        Node(i, f"ar{i}", NodeKind.COLLECTIVE, deps=(i - 1,) if i else (), collective=AR, size_bytes=3 << 14)
        for i in range(collectives))) for r in range(n))
    settings = SystemSettings(roofline=False, all_reduce=("dbt",), dataset_splits=splits)
    topo = star_topology(n)
    sim = Simulation(Workload("dbt", graphs, (n,)), topo, AnalyticalBackend(topo, network_mode("astra")), settings)
    flows: list[tuple[int, int]] = []
    sim.hooks.flow_started.append(lambda f, _: flows.append((f.src_gpu, f.dst_gpu)))
    sim.run()
    return flows


@pytest.mark.parametrize(("collectives", "splits", "dbmax", "dbmin"), [
    (1, 3, 2, 1),  # M m M
    (2, 3, 3, 3),  # M m M | m M m: the second collective starts on the other tree
    (3, 3, 5, 4),  # ... | M m M
    (2, 4, 4, 4),  # an even count per collective: every collective starts on DBMAX
])
def test_tree_counter_carries_over(collectives: int, splits: int, dbmax: int, dbmin: int) -> None:
    """On 4 ranks DBMAX is 3 ← 1 ← {0, 2} and DBMIN 0 ← 2 ← {1, 3}: the flow 0→1 is DBMAX's only
    (one per chunk), 3→2 DBMIN's. The trees alternate chunk by chunk across collectives."""
    flows = dbt_flows(collectives, splits)
    assert flows.count((0, 1)) == dbmax
    assert flows.count((3, 2)) == dbmin


def test_dims_must_multiply_to_ranks() -> None:
    with pytest.raises(MoesimError, match="field 'ranks'.*product of dims"):
        prepare_collective(CollectiveSpec("all_reduce", "star:16", 8, "ring", "astra", "analytical", (), (8, 2)))
    with pytest.raises(MoesimError, match="field 'dims'"):
        prepare_collective(CollectiveSpec("all_reduce", "star:16", 0, "ring", "astra", "analytical", (), (8, 0)))


def test_unknown_optimization_is_a_one_line_error() -> None:
    with pytest.raises(MoesimError, match="collective_optimization.*localBWAware, baseline"):
        SystemSettings(collective_optimization="fast")


def test_cli_dims() -> None:
    code, out, _ = run_cli("collective", "all_reduce", "--topology", "star:16", "--dims", "8,2", "--backend",
                           "analytical", "--network", "astra", "-b", "1M", "-e", "1M", "--json")
    result = json.loads(out)
    assert code == 0 and result["dims"] == [8, 2] and result["sizes"][0]["time_s"] == pytest.approx(95_000e-9)
    code, _, err = run_cli("collective", "all_reduce", "--topology", "star:16", "--dims", "8,x")
    assert code != 0 and "'--dims'" in err


def run_spec(**overrides: object) -> RunSpec:
    return RunSpec("deepseek-v4-flash", "1", "TP4EP8", "ring_direct", "ib_cc0", "analytical",
                   tuple(sorted({"tokens": 64, **overrides}.items())))


def test_run_logical_dims() -> None:
    """A run's TP4EP8 over [4, 8] is the default layout; over [2, 2, 8] each TP all-reduce runs as
    reduce-scatter, all-reduce, all-gather over pairs, which changes communication and not compute."""
    base, same, split = (simulate_run(run_spec(**o)) for o in ({}, {"logical_dims": [4, 8]},
                                                                {"logical_dims": [2, 2, 8]}))
    assert same.wall_s == base.wall_s
    assert split.comm_s != base.comm_s and split.gpu_s == pytest.approx(base.gpu_s, rel=1e-12)
    with pytest.raises(MoesimError, match="field 'logical_dims'.*does not refine.*\\[4, 8\\]"):
        simulate_run(run_spec(logical_dims=[8, 4]))


def test_export_carries_logical_dims(tmp_path) -> None:
    export_run(run_spec(logical_dims=[2, 2, 8], collective_optimization="baseline"), tmp_path)
    system = json.loads((tmp_path / "system.json").read_text())
    assert system["collective-optimization"] == "baseline"
    assert len(system["all-reduce-implementation"]) == len(system["all-to-all-implementation"]) == 3
    assert json.loads((tmp_path / "logical_topology.json").read_text()) == {"logical-dims": ["2", "2", "8"]}
    assert "npus_count: [ 2, 2, 8 ]" in (tmp_path / "network_analytical.yml").read_text()
    wl = read_et(tmp_path / "workload")
    assert wl.logical_dims == (2, 2, 8)
    dims = {n.involved_dims for g in wl.graphs for n in g.nodes if n.kind is NodeKind.COLLECTIVE}
    assert dims == {(True, True, False), (False, False, True)}


def test_matrix_levels_are_lists(tmp_path) -> None:
    """In a matrix each level of ``logical_dims`` is one list."""
    path = tmp_path / "m.yaml"
    path.write_text("factors:\n  model: deepseek-v4-flash\n  topology: '1'\n  strategy: TP4EP8\n"
                    "  logical_dims: [[2, 2, 8], [4, 8]]\n")
    dims = [prepare(s).settings.logical_dims for s in load_matrix(path).runs()]
    assert sorted(dims) == [(2, 2, 8), (4, 8)]


TWO_LEAVES = """\
name: two-16-gpu-switches
servers: 32
server:
  gpus: [gpu0]
  nics: [nic0]
  links:
    - {a: gpu0, b: nic0, bandwidth: 512Gbps, delay: 0.2us}
fabric: {kind: leaf_spine, servers_per_leaf: 16, spines: 1, nic_bandwidth: 400Gbps, uplink_delay: 0.5us}
"""


def test_two_dimensions_on_two_switches_joined_by_a_third_packet(tmp_path) -> None:
    """[16, 2] on two 16-GPU leaves under one spine, packet backend: localBWAware (reduce-scatter on the leaf,
    all-reduce of 1/16 of the data across the spine, all-gather back) beats baseline (a full all-reduce per
    dimension), which sends the whole buffer across the spine."""
    path = tmp_path / "two16.yaml"
    path.write_text(TWO_LEAVES)
    times = {}
    for opt in ("localBWAware", "baseline"):
        spec = CollectiveSpec("all_reduce", str(path), 0, "ring", "none", "packet",
                              (("collective_optimization", opt),), (16, 2))
        times[opt] = run_collective(prepare_collective(spec), 4 << 20).time_s
    assert times["localBWAware"] < times["baseline"]
