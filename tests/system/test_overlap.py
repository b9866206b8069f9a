"""Micro-batch overlap, the hierarchical all-to-all and the GPU share of communication (docs/overlap.md): oracles on small hand-built runs and the run-level plumbing."""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from math import comb

import pytest
from helpers import one_collective, star

from moesim.errors import MoesimError
from moesim.models.spec import AttentionSpec, ModelSpec
from moesim.network.flow import FlowBackend
from moesim.network.params import REFERENCE_PRESETS
from moesim.system import fast_forward
from moesim.system.collectives.hierarchical import miss_probability
from moesim.system.engine import Simulation, SystemSettings
from moesim.system.run import prepare, simulate_run
from moesim.system.spec import RunSpec
from moesim.topology.catalog import get_topology
from moesim.workload.costs import roofline_time_s
from moesim.workload.generator import generate
from moesim.workload.graph import CollectiveType, Node, NodeKind, RankGraph, Workload
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import WorkloadOptions

P = REFERENCE_PRESETS["none"]
TINY = ModelSpec(
    key="tiny-moe", name="tiny", hidden_size=64, comm_dim=32, num_layers=4, first_dense_layers=1,
    attention=AttentionSpec(num_heads=4, num_kv_heads=4, head_dim=16), dense_ffn_width=96,
    routed_experts=16, shared_experts=1, top_k=2, expert_ffn_width=40, vocab_size=10,
)
TWO = WorkloadOptions(overlap="two-batch")


def _simulate(workload, topology, settings, hooks=None):
    sim = Simulation(workload, topology, FlowBackend(topology, P), settings)
    if hooks:
        hooks(sim)
    return sim.run()


def _wall(times):
    return max(t.wall_s for t in times)


def test_with_zero_compute_two_batch_takes_what_none_takes_within_the_message_latency():
    """No compute to hide behind: two micro-batches send the same bytes in twice the collectives, so they
    take as long as one batch plus at most one per-chunk latency per extra chunk (1 ns per compute node)."""
    layout, topo = ParallelLayout(1, 4), star(4)
    settings = SystemSettings(roofline=False)
    none = generate(TINY, layout, 65536)
    two = generate(TINY, layout, 65536, TWO)
    w1, w2 = _wall(_simulate(none, topo, settings)), _wall(_simulate(two, topo, settings))
    collectives = sum(n.kind is NodeKind.COLLECTIVE for n in none.graphs[0].nodes)
    # per-chunk latency: an all-to-all of one packet (1000 B) per pair, 4 chunks
    latency = _wall(_simulate(one_collective(4, CollectiveType.ALL_TO_ALL, 4 * 4 * 1000), topo, settings)) / 4
    extra_chunks = collectives * settings.dataset_splits
    assert w1 - 1e-12 <= w2 <= w1 + extra_chunks * latency + 2 * len(none.graphs[0].nodes) * 1e-9
    assert w2 - w1 > 0.5 * extra_chunks * latency  # the latency is really paid again


def test_short_communication_hides_behind_compute_except_the_last_transfer():
    """Communication much shorter than compute: wall = GPU time + the last micro-batch's TP all-reduce
    (nothing computes after it), where one batch pays every collective in full (wall = GPU + comm)."""
    layout, topo = ParallelLayout(2, 2), star(4)
    settings = SystemSettings(peak_flops=1e10)
    one = _simulate(generate(TINY, layout, 512), topo, settings)
    assert one[0].wall_s == pytest.approx(one[0].gpu_s + one[0].comm_s, rel=1e-12)
    workload = generate(TINY, layout, 512, TWO)
    two = _simulate(workload, topo, settings)
    last = _wall(_simulate(one_collective(2, CollectiveType.ALL_REDUCE, 256 * TINY.comm_dim * 2), star(2), settings))
    shortest = min(roofline_time_s(n, settings.peak_flops, settings.mem_bw_bytes_per_s)
                   for n in workload.graphs[0].nodes if n.kind is NodeKind.COMPUTE)
    assert 3 * last < shortest  # every collective much shorter than any compute node
    for t in two:
        assert t.wall_s == pytest.approx(t.gpu_s + last, rel=1e-9)
        assert t.exposed_comm_s == pytest.approx(last, rel=1e-6)


@pytest.mark.parametrize("options", [{}, {"phase": "decode", "batch": 8, "decode_steps": 2}])
def test_overlap_never_changes_the_bytes_sent(options):
    layout, topo = ParallelLayout(2, 2), star(4)
    sent = []
    for overlap in ({}, {"overlap": "two-batch"}, {"overlap": "two-batch", "micro_batches": 4}):
        per_gpu: dict[int, int] = defaultdict(int)

        def count(sim, per_gpu=per_gpu):
            sim.hooks.flow_started.append(
                lambda f, _origin: per_gpu.__setitem__(f.src_gpu, per_gpu[f.src_gpu] + f.size_bytes))

        _simulate(generate(TINY, layout, 512, WorkloadOptions(**options, **overlap)), topo,
                  SystemSettings(fast_forward=False), count)
        sent.append(dict(per_gpu))
    assert sent[0] == sent[1] == sent[2] and sum(sent[0].values()) > 0


def test_two_batch_compute_sums_to_one_batch_flops_and_layers_still_repeat():
    """Micro-batches split the tokens (prefill queries attend to the whole sequence), so FLOPs add up to
    the single batch's; every MoE layer has the same nodes, so fast-forward jumps exactly."""
    model_layout = (dataclasses.replace(TINY, num_layers=12), ParallelLayout(2, 2))
    one, two = generate(*model_layout, 512), generate(*model_layout, 512, TWO)
    assert sum(n.flops for n in two.graphs[0].nodes) == sum(n.flops for n in one.graphs[0].nodes)
    topo = star(4)
    sims = [Simulation(two, topo, FlowBackend(topo, P), SystemSettings(fast_forward=ff)) for ff in (True, False)]
    jumps = fast_forward.attach(sims[0])
    fast, full = (s.run() for s in sims)
    assert fast_forward.mode(jumps) == "exact" and jumps is not None and jumps.layers_skipped > 0
    assert [t.wall_s for t in fast] == pytest.approx([t.wall_s for t in full], rel=1e-9)


def test_bad_overlap_options_are_one_line_errors():
    with pytest.raises(MoesimError, match="overlap"):
        WorkloadOptions(overlap="three-batch")
    with pytest.raises(MoesimError, match="micro_batches.*overlap=two-batch"):
        WorkloadOptions(micro_batches=2)
    with pytest.raises(MoesimError, match="micro_batches"):
        WorkloadOptions(overlap="two-batch", micro_batches=1)
    with pytest.raises(MoesimError, match="exceed the 2 batch"):
        generate(TINY, ParallelLayout(2, 2), 512, WorkloadOptions(overlap="two-batch", micro_batches=3,
                                                                   phase="decode", batch=2))
    with pytest.raises(MoesimError, match="comm_sms"):
        SystemSettings(comm_sms=1.0)


# ---------------------------------------------------------------------------------------------- comm_sms


def _compute_beside_a_collective(flops: int) -> Workload:
    """Two ranks, each one compute node and one all-reduce with no dependency between them."""
    nodes = (Node(0, "gemm", NodeKind.COMPUTE, flops=flops, bytes_moved=1),
             Node(1, "ar", NodeKind.COLLECTIVE, collective=CollectiveType.ALL_REDUCE, size_bytes=1 << 20))
    return Workload("beside", (RankGraph(0, nodes), RankGraph(1, nodes)), (2,))


@pytest.mark.parametrize("share", [0.2, 0.5])
def test_communication_slows_the_compute_it_overlaps_by_its_gpu_share(share):
    """Compute c alongside a collective of t: at (1 − s) of the GPU while the collective runs, so it ends at
    c + s·t when it outlasts the collective, at c/(1 − s) when it does not; the GPU time stays c."""
    topo = star(2)
    t = _wall(_simulate(one_collective(2, CollectiveType.ALL_REDUCE, 1 << 20), topo, SystemSettings()))
    for c in (3 * t, 0.3 * t):
        flops = round(c * 1e15)
        node = _compute_beside_a_collective(flops).graphs[0].nodes[0]
        c = roofline_time_s(node, 1e15, 1.6e12)
        times = _simulate(_compute_beside_a_collective(flops), topo, SystemSettings(comm_sms=share))
        compute_end = c + share * t if c > (1 - share) * t else c / (1 - share)
        assert times[0].wall_s == pytest.approx(max(compute_end, t), rel=1e-9)
        assert times[0].gpu_s == c


def test_an_sm_free_all_to_all_leaves_the_compute_it_overlaps_at_full_speed():
    """The same compute beside an all-to-all: with ``direct`` it runs at (1 − s) of the GPU while the
    all-to-all is in flight (it ends after c), with ``low_latency`` (registered SM-free, DeepEP's low-latency
    kernels) it ends at c exactly, as with comm_sms = 0."""
    topo = star(2)
    nodes = (Node(0, "gemm", NodeKind.COMPUTE, flops=round(1e-4 * 1e15), bytes_moved=1),
             Node(1, "a2a", NodeKind.COLLECTIVE, collective=CollectiveType.ALL_TO_ALL, size_bytes=64 << 20))
    work = Workload("beside", (RankGraph(0, nodes), RankGraph(1, nodes)), (2,))
    c = roofline_time_s(nodes[0], 1e15, 1.6e12)
    ends = {}
    for algorithm in ("direct", "low_latency"):
        settings = SystemSettings(comm_sms=0.5, all_to_all=(algorithm,))
        sim = Simulation(work, topo, FlowBackend(topo, P), settings)
        sim.hooks.node_finished.append(lambda r, i, t=ends, a=algorithm, s=sim: i == 0 and t.setdefault(a, s.now))
        sim.run()
    assert ends["low_latency"] == pytest.approx(c, rel=1e-12)
    assert ends["direct"] > c * 1.5


# ---------------------------------------------------------------------------------------------- hierarchical


def test_miss_probability_matches_enumeration():
    """Group-limited top-k (8 experts in 4 groups, 2 groups per token, top-2), brute force over every choice."""
    routing, on_server = (8, 2, 4, 2), frozenset({0, 1, 2})
    misses = total = 0
    for groups in itertools.combinations(range(4), 2):
        pool = [e for e in range(8) if e // 2 in groups]
        for experts in itertools.combinations(pool, 2):
            total += 1
            misses += not set(experts) & on_server
    assert miss_probability(on_server, routing) == pytest.approx(misses / total, rel=1e-12)
    assert miss_probability(frozenset(range(4)), (16, 3, 1, 1)) == pytest.approx(comb(12, 3) / comb(16, 3))


def _nic_bytes(workload, topology, settings) -> dict[str, int]:
    """Bytes leaving each NIC (summed over the links out of it), flows routed as the backend routes them."""
    out: dict[str, int] = defaultdict(int)
    nics = {g.nic for g in topology.gpus}

    def count(sim):
        def started(f, _origin):
            for link in topology.route(f.src_gpu, f.dst_gpu, f.flow_id):
                if topology.links[link].src in nics:
                    out[topology.links[link].src] += f.size_bytes
        sim.hooks.flow_started.append(started)

    sim = Simulation(workload, topology, FlowBackend(topology, P), settings)
    count(sim)
    sim.run()
    return dict(out)


def test_hierarchical_sends_each_token_once_per_destination_server():
    """16 experts, top-16 (every token to every GPU), EP16 on two 8-GPU servers: direct sends a token's row to
    each of the 8 remote GPUs, hierarchical once to the rail peer there: 1/8 of the bytes through every NIC."""
    model = dataclasses.replace(TINY, key="all-experts", top_k=16, first_dense_layers=0, num_layers=1)
    topo = get_topology("hgx-h100:2")
    wl = generate(model, ParallelLayout(1, 16), 256)
    direct = _nic_bytes(wl, topo, SystemSettings(fast_forward=False))
    hier = _nic_bytes(wl, topo, SystemSettings(fast_forward=False, all_to_all=("hierarchical",) * 2,
                                               expert_routing=(16, 16, 1, 1)))
    assert len(direct) == 16 and direct.keys() == hier.keys()
    for nic, b in direct.items():
        assert hier[nic] * 8 == b
    # a run knows nothing of the routing by default: aggregation without deduplication moves the same bytes
    plain = _nic_bytes(wl, topo, SystemSettings(fast_forward=False, all_to_all=("hierarchical",) * 2))
    assert plain == direct


def test_hierarchical_on_one_server_is_direct_and_runs_select_it_by_override():
    base = RunSpec("qwen3-30b-a3b", "hgx-h100:1", "TP1EP8", backend="flow", overrides=(("tokens", 256),))
    hier = dataclasses.replace(base, overrides=(("all_to_all_algorithm", "hierarchical"), ("tokens", 256)))
    assert prepare(hier).settings.all_to_all == ("hierarchical", "hierarchical")
    assert prepare(hier).settings.expert_routing == (128, 8, 1, 1)
    assert simulate_run(hier).ranks == simulate_run(base).ranks
    with pytest.raises(MoesimError, match="all_to_all_algorithm"):
        prepare(dataclasses.replace(base, overrides=(("all_to_all_algorithm", "ring"),)))


# ---------------------------------------------------------------------------------------------- runs


@pytest.mark.slow
def test_export_of_a_two_batch_run_reads_back_and_runs_as_moesim_runs_it(tmp_path):
    """The overlap is only dependencies, so the ASTRA-sim export carries it: the ET files read back as the
    generated graphs, and `moesim astra run` of the directory gives the run's per-rank times."""
    import json
    import subprocess
    import sys

    from moesim.system.astra_input import find_paths, read_inputs
    from moesim.system.export import export_run
    from moesim.workload.chakra import read_et

    spec = RunSpec("deepseek-v4-flash", "hgx-h100:4", "TP4EP8", backend="flow",
                   overrides=(("overlap", "two-batch"), ("tokens", 64)))
    export_run(spec, tmp_path)
    back = read_et(tmp_path / "workload")
    assert [g.nodes for g in back.graphs] == [g.nodes for g in prepare(spec).workload().graphs]
    inputs = read_inputs(find_paths(tmp_path))
    times = Simulation(inputs.workload, inputs.topology, FlowBackend(inputs.topology, inputs.params), inputs.settings).run()
    expected = simulate_run(spec)
    assert [t.wall_s for t in times] == pytest.approx([t.wall_s for t in expected.ranks], rel=1e-12)
    proc = subprocess.run([sys.executable, "-m", "moesim.cli", "astra", "run", str(tmp_path), "--backend", "flow",
                           "--json"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["wall_s"] == pytest.approx(expected.wall_s, rel=1e-12)
    with pytest.raises(MoesimError, match="hierarchical"):
        export_run(dataclasses.replace(spec, overrides=(("all_to_all_algorithm", "hierarchical"),)), tmp_path / "h")


def test_defaults_keep_the_input_hash_and_exposed_communication_is_reported():
    """overlap=none, comm_sms=0 and the direct all-to-all are the simulation without them: same input hash."""
    from moesim.experiments.inputs import input_hash

    base = RunSpec("qwen3-30b-a3b", "hgx-h100:4", "TP4EP8", backend="flow", overrides=(("tokens", 256),))
    same = dataclasses.replace(base, overrides=(("all_to_all_algorithm", "direct"), ("comm_sms", 0.0),
                                                ("overlap", "none"), ("tokens", 256)))
    assert input_hash(same) == input_hash(base)
    assert input_hash(dataclasses.replace(base, overrides=(("overlap", "two-batch"), ("tokens", 256)))) != input_hash(base)
    result = simulate_run(base)
    record = result.summary()
    assert record["exposed_comm_s"] == result.wall_s - result.gpu_s == pytest.approx(result.comm_s, rel=1e-9)
