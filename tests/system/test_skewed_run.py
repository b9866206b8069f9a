"""Skewed routing through the engine: Zipf 0 equals uniform bit for bit, every pair's flows carry the
routing matrix, fast-forward stays exact, records and `moesim run` report the EP imbalance."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections import defaultdict

import pytest

from moesim.errors import MoesimError
from moesim.network.analytical import AnalyticalBackend
from moesim.network.params import REFERENCE_PRESETS
from moesim.system import fast_forward
from moesim.system.engine import Simulation, SystemSettings
from moesim.system.run import prepare, simulate_run
from moesim.system.spec import RunSpec
from moesim.topology.catalog import get_topology
from moesim.workload.chakra import write_et
from moesim.workload.generator import generate
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import WorkloadOptions
from moesim.workload.routing import popularity_counts, zipf_weights

V4 = ("deepseek-v4-flash", "1", "TP4EP8")


def spec(*, backend: str = "analytical", **over) -> RunSpec:
    return RunSpec(*V4, backend=backend, overrides=tuple(sorted({"tokens": 256, **over}.items())))


def test_zipf_zero_run_equals_uniform_bit_for_bit():
    uniform = simulate_run(spec(backend="flow"))
    zipf0 = simulate_run(spec(backend="flow", routing="zipf", routing_zipf_exponent=0.0))
    assert zipf0.ranks == uniform.ranks
    a, b = uniform.summary(), zipf0.summary()
    assert {k: v for k, v in a.items() if k != "overrides"} == {k: v for k, v in b.items() if k != "overrides"}
    assert "ep_imbalance" not in b


def _table(path, experts: int, tokens: int, k: int) -> str:
    counts = popularity_counts(zipf_weights(experts, 1.5), tokens, k)
    counts[5], counts[-1] = counts[5] + counts[-1], 0  # some rank pairs carry nothing
    path.write_text(",".join(map(str, counts)) + "\n")
    return str(path)


def test_every_pair_sends_its_routing_matrix_entry(tmp_path):
    """Structural, through the engine: summed over chunks, the flows of each skewed all-to-all from rank s
    to rank d carry exactly the node's pair_bytes[s·n + d] (zero-byte pairs included)."""
    model, layout = V4[0], ParallelLayout(1, 8)
    from moesim.models.catalog import get_model

    m = get_model(model)
    table = _table(tmp_path / "t.csv", m.routed_experts, 64, m.top_k)
    wl = generate(m, layout, 64, WorkloadOptions(routing="table", routing_table=table))
    topo = get_topology("1")
    sim = Simulation(wl, topo, AnalyticalBackend(topo, REFERENCE_PRESETS["none"]),
                     SystemSettings(fast_forward=False, dataset_splits=3))
    sent: dict[int, dict[tuple[int, int], int]] = defaultdict(lambda: defaultdict(int))

    def on_flow(flow, origin) -> None:
        sent[(origin.members, origin.seq)][(flow.src_gpu, flow.dst_gpu)] += flow.size_bytes

    sim.hooks.flow_started.append(on_flow)
    sim.run()
    a2a = [n for n in wl.graphs[0].nodes if n.pair_bytes]
    assert len(a2a) == 2 * m.num_layers and len(sent) == len(a2a)
    for node, key in zip(a2a, sorted(sent, key=lambda k: k[1]), strict=True):
        expect = {(s, d): node.pair_bytes[s * 8 + d] for s in range(8) for d in range(8) if s != d}
        assert dict(sent[key]) == expect
    assert 0 in a2a[0].pair_bytes


@pytest.mark.parametrize("routing", [{"routing": "zipf", "routing_zipf_exponent": 1.0}, "table"])
def test_fast_forward_is_exact_on_skewed_runs(tmp_path, routing):
    """Zipf (a new hot set per layer: nothing repeats) and one table row for every layer (layers repeat,
    the engine jumps): fast-forward on and off give the same times."""
    if routing == "table":
        routing = {"routing": "table", "routing_table": _table(tmp_path / "t.csv", 256, 256, 6)}
    prepared = prepare(spec(backend="flow", **routing))
    runs = []
    for ff in (True, False):
        sim = Simulation(prepared.workload(), prepared.topology, prepared.backend_cls(prepared.topology, prepared.params),
                         dataclasses.replace(prepared.settings, fast_forward=ff), prepared.placement.rank_to_gpu)
        jumper = fast_forward.attach(sim)
        runs.append((jumper, sim.run()))
    (fast, a), (_, b) = runs
    for x, y in zip(a, b, strict=True):
        for u, v in ((x.wall_s, y.wall_s), (x.gpu_s, y.gpu_s), (x.comm_s, y.comm_s)):
            assert abs(u - v) <= 1e-9 * v
    if routing["routing"] == "table":
        assert fast is not None and fast.layers_skipped > 10


def test_skew_slows_the_run_and_eplb_recovers_it():
    uniform = simulate_run(spec())
    zipf = simulate_run(spec(routing="zipf", routing_zipf_exponent=1.0))
    eplb = simulate_run(spec(routing="zipf", routing_zipf_exponent=1.0, expert_placement="eplb"))
    z, e = zipf.summary(), eplb.summary()
    assert z["ep_imbalance"] == z["ep_imbalance_before"] > 1.5
    assert e["ep_imbalance_before"] == z["ep_imbalance"] and e["ep_imbalance"] < 1.1
    assert zipf.wall_s > uniform.wall_s and eplb.wall_s < zipf.wall_s
    assert set(z) - set(uniform.summary()) == {"ep_imbalance", "ep_imbalance_before"}


def test_run_prints_the_imbalance_and_export_refuses_skew(tmp_path):
    out = subprocess.run([sys.executable, "-m", "moesim", "run", "--model", V4[0], "--topology", V4[1],
                          "--strategy", V4[2], "--backend", "analytical", "--set", "tokens=64",
                          "--set", "routing=hot", "--set", "expert_placement=eplb"],
                         capture_output=True, text=True, check=True).stdout
    assert "EP imbalance max/mean tokens per rank:" in out and "after eplb" in out
    wl = generate(*(lambda m: (m, ParallelLayout(4, 8), 64))(prepare(spec()).model),
                  WorkloadOptions(routing="hot"))
    with pytest.raises(MoesimError, match="Chakra ET cannot express"):
        write_et(wl, tmp_path, "skew")


def test_skewed_all_to_all_needs_an_algorithm_with_per_pair_plans():
    prepared = prepare(spec(routing="zipf"))
    settings = dataclasses.replace(prepared.settings, all_to_all=("ring", "ring"))
    sim = Simulation(prepared.workload(), prepared.topology, prepared.backend_cls(prepared.topology, prepared.params),
                     settings)
    with pytest.raises(MoesimError, match=r"per-pair sizes.*'ring' cannot run it \(allowed: direct, hierarchical, "
                                          r"low_latency\)"):
        sim.run()


def test_input_keys_uniform_unchanged_table_keyed_by_contents(tmp_path):
    """Uniform runs (and Zipf 0) keep their simulation key without the routing fields; a routing table's
    key follows its contents, so an edited file is simulated anew."""
    from moesim.experiments.inputs import input_hash, resolved_inputs

    assert not {"routing", "expert_placement", "expert_slots"} & set(resolved_inputs(spec())["workload_options"])
    assert input_hash(spec()) == input_hash(spec(routing="zipf", routing_zipf_exponent=0.0))
    path = _table(tmp_path / "t.csv", 256, 256, 6)
    first = input_hash(spec(routing="table", routing_table=path))
    (tmp_path / "t.csv").write_text(",".join(["6"] * 256) + "\n")
    assert input_hash(spec(routing="table", routing_table=path)) != first


def test_matrix_levels_make_routing_files_absolute(tmp_path):
    from moesim.experiments.factors import canonical_level

    (tmp_path / "t.csv").write_text("1,2\n")
    assert canonical_level("routing_table", "t.csv", "matrix", tmp_path) == str(tmp_path / "t.csv")
    assert canonical_level("expert_placement", "eplb", "matrix", tmp_path) == "eplb"
    with pytest.raises(MoesimError, match="expert_placement.*'nope.txt' not found"):
        canonical_level("expert_placement", "nope.txt", "matrix", tmp_path)
