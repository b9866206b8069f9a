"""Redundant experts and DeepSeek's EPLB (docs/deployments.md, "Redundant experts"): the published example,
balance on a known load vector, replicas conserve tokens, EP sizes over routed plus redundant experts,
residency of the replicas, and unchanged keys when unset."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.experiments.inputs import resolved_inputs
from moesim.models.catalog import get_model
from moesim.models.residency import model_residency
from moesim.models.spec import AttentionSpec, ModelSpec
from moesim.system.run import prepare
from moesim.system.spec import RunSpec
from moesim.workload import eplb
from moesim.workload.generator import generate, routing_imbalance
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import WorkloadOptions
from moesim.workload.routing import Redundancy, contiguous_placement, layer_routing, replica_rows

TINY = ModelSpec(
    key="tiny-moe", name="tiny", hidden_size=64, comm_dim=32, num_layers=3, first_dense_layers=1,
    attention=AttentionSpec(num_heads=4, num_kv_heads=4, head_dim=16), dense_ffn_width=96,
    routed_experts=16, shared_experts=1, top_k=2, expert_ffn_width=40, vocab_size=10,
)

# github.com/deepseek-ai/EPLB README: 2 layers × 12 experts, 16 replicas, 4 groups, 2 nodes, 8 GPUs, and the
# published phy2log (physical experts 2g, 2g+1 on GPU g)
README_LOADS = ([90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27])
README_PHY2LOG = ([5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                  [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1])


@pytest.mark.parametrize("layer", [0, 1])
def test_hierarchical_policy_reproduces_eplbs_published_example(layer):
    """Oracle: EPLB's README output, GPU by GPU (hierarchical: 4 groups over 2 nodes)."""
    phy2log = README_PHY2LOG[layer]
    expected = tuple(tuple(sorted(phy2log[2 * g:2 * g + 2])) for g in range(8))
    assert eplb.policy(12, 4, 2) == "hierarchical"
    assert eplb.rebalance(README_LOADS[layer], gpus=8, redundant=4, groups=4, nodes=2) == expected


def test_balance_on_a_known_load_vector():
    """Loads (30, 10, 8, 6, 4, 2), 2 redundant, 4 GPUs × 2 slots: expert 0 gets both replicas (30 → 15 → 10
    per replica, still the heaviest against 10); the four 10-row items (experts 0 and 1 first, then the
    replicas as made) take one GPU each and 8, 6, 4, 2 fill them in order: GPU rows (18, 16, 14, 12),
    max/mean = 18/15 = 1.2 (the optimum for these replicas)."""
    counts = (30, 10, 8, 6, 4, 2)
    assert eplb.replicate(counts, 8) == [0, 1, 2, 3, 4, 5, 0, 0]
    lr = layer_routing(counts, 4, "eplb", 1, redundancy=Redundancy(redundant=2))
    assert lr.placement == ((0, 2), (1, 3), (0, 4), (0, 5))
    assert lr.rows == (18, 16, 14, 12)
    assert max(lr.rows) * 4 / sum(lr.rows) == pytest.approx(1.2, abs=0)
    # no balancer (contiguous): physical expert p is expert p mod 6, so experts 0 and 1 get the replicas
    assert contiguous_placement(6, 4, 2) == ((0, 1), (2, 3), (4, 5), (0, 1))
    assert lr.rows_before == (20, 14, 6, 20)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=16, max_size=16), st.sampled_from([(4, 4, 2), (8, 8, 4), (2, 16, 2)]))
def test_hierarchical_keeps_each_group_on_one_node(loads, shape):
    """Structural: with 4 groups of 4 experts and the groups dividing over the nodes, every replica of a
    group's experts sits on the GPUs of one node; every GPU holds (E + N)/EP replicas; every expert ≥ 1."""
    gpus, redundant, nodes = shape
    placement = eplb.rebalance(loads, gpus, redundant, groups=4, nodes=nodes)
    per_node = gpus // nodes
    assert all(len(h) == (16 + redundant) // gpus for h in placement)
    assert {e for h in placement for e in h} == set(range(16))
    for g in range(4):
        assert len({gpu // per_node for gpu, h in enumerate(placement) for e in h if e // 4 == g}) == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=12, max_size=12), st.sampled_from([(3, 6), (4, 4), (6, 12), (12, 0)]))
def test_replicas_conserve_tokens(counts, shape):
    """Oracle: summed over an expert's replicas, the rows are the expert's rows (and split within one row);
    the EP ranks receive T·k rows in all. Global policy (one group)."""
    ep, redundant = shape
    lr = layer_routing(tuple(counts), ep, "eplb", 1, redundancy=Redundancy(redundant=redundant))
    got = [0] * 12
    shares: dict[int, list[int]] = {}
    for held, rows in zip(lr.placement, replica_rows(tuple(counts), lr.placement), strict=True):
        for e, r in zip(held, rows, strict=True):
            got[e] += r
            shares.setdefault(e, []).append(r)
    assert got == counts
    assert all(max(s) - min(s) <= 1 for s in shares.values())
    assert sum(lr.rows) == sum(counts)


@pytest.mark.parametrize("extra", [{}, {"routing": "zipf"}, {"routing": "hot", "expert_placement": "eplb"},
                                   {"phase": "decode", "batch": 24, "expert_placement": "eplb"}])
def test_graphs_route_every_row_to_a_replica(extra):
    """The generated graphs: 16 experts + 8 redundant on EP = 6 (16 does not divide by 6). Per MoE layer the
    EP ranks' expert FLOPs add up to T·k·6·h·w/TP, each rank reads (16 + 8)/6 = 4 replicas' weights in
    prefill, and every dispatch column sums to its rank's rows."""
    layout = ParallelLayout(tp=1, ep=6)
    tokens = 48
    wl = generate(TINY, layout, tokens, WorkloadOptions(redundant_experts=8, **extra))
    per = 6 * TINY.comm_dim * TINY.expert_ffn_width
    weights = 3 * TINY.comm_dim * TINY.expert_ffn_width * 0.5
    rows_of = 24 if extra.get("phase") == "decode" else tokens
    for layer in range(TINY.first_dense_layers, TINY.num_layers):
        experts = [n for g in wl.graphs for n in g.nodes if n.layer == layer and n.name == "routed_experts"]
        assert sum(n.flops for n in experts) == rows_of * TINY.top_k * per
        if "phase" not in extra:
            assert all(n.bytes_moved == 4 * weights for n in experts)
        for g in wl.graphs:
            dispatch, = (n for n in g.nodes if n.layer == layer and n.name == "ep_dispatch")
            mine, = (n for n in g.nodes if n.layer == layer and n.name == "routed_experts")
            column = sum(dispatch.pair_bytes[g.rank::6])
            assert column * per == mine.flops * TINY.comm_dim * TINY.bytes_per_activation


def test_uniform_routing_on_ep144_has_the_closed_form_imbalance():
    """DeepSeek-V3 (256 experts) on EP144 with 32 redundant, 256 tokens (8 rows per expert): 224 experts
    have one replica (8 rows) and 32 two (4 rows each) on 2 slots per GPU, so some GPU holds two whole
    experts: max 16 rows, mean 2048/144, max/mean = 9/8 with or without the balancer."""
    model = get_model("deepseek-v3")
    layout = ParallelLayout(tp=1, ep=144)
    for placement in ("contiguous", "eplb"):
        after, before = routing_imbalance(model, layout, 256, WorkloadOptions(redundant_experts=32,
                                                                              expert_placement=placement))
        assert after == pytest.approx(9 / 8, rel=1e-12) and before == pytest.approx(9 / 8, rel=1e-12)


def test_eplb_beats_no_balancer_on_skewed_routing():
    """Zipf routing on EP6 with 8 redundant: EPLB's max/mean is below the no-balancer placement's."""
    options = WorkloadOptions(routing="zipf", redundant_experts=8, expert_placement="eplb")
    after, before = routing_imbalance(TINY, ParallelLayout(1, 6), 600, options)
    assert after < before


def test_ep144_needs_redundant_experts():
    """EP144 on 256 routed + 32 redundant is prepared; without redundant experts it is refused in one line."""
    spec = RunSpec(model="deepseek-v3", topology="hgx-h800:18", strategy="TP1EP144",
                   overrides=(("phase", "decode"), ("batch", 144), ("redundant_experts", 32)))
    prepared = prepare(spec)
    assert prepared.ep_imbalance is not None
    with pytest.raises(MoesimError) as exc:
        prepare(RunSpec(model="deepseek-v3", topology="hgx-h800:18", strategy="TP1EP144",
                        overrides=(("phase", "decode"), ("batch", 144))))
    message = str(exc.value)
    assert "\n" not in message and "EP = 144 does not divide 256 routed experts" in message
    with pytest.raises(MoesimError, match=r"does not divide 256 routed experts \+ 16 redundant"):
        ParallelLayout(1, 144).validate(routed_experts=256, redundant_experts=16)


def test_unset_redundant_experts_keep_the_run_key():
    """N = 0 leaves the run's inputs (its key) as they were; N > 0 enters them."""
    base = RunSpec(model="deepseek-v4-flash", topology="1", strategy="TP4EP8")
    zero = RunSpec(model="deepseek-v4-flash", topology="1", strategy="TP4EP8", overrides=(("redundant_experts", 0),))
    some = RunSpec(model="deepseek-v4-flash", topology="1", strategy="TP4EP8", overrides=(("redundant_experts", 8),))
    assert "redundant_experts" not in resolved_inputs(base)["workload_options"]
    assert resolved_inputs(zero) == resolved_inputs(base)
    assert resolved_inputs(some)["workload_options"]["redundant_experts"] == 8


def test_residency_grows_by_the_replicas_bytes():
    """Oracle: 32 replicas × 58 MoE layers × 3·7168·2048 parameters × 1 byte (FP8) = 81,738,596,352 bytes more,
    1/144 of it per rank."""
    model = get_model("deepseek-v3")
    plain = model_residency(model, ranks=144)
    more = model_residency(model, ranks=144, redundant_experts=32, expert_bytes_per_param=1.0)
    assert more.total_bytes - plain.total_bytes == 32 * 58 * 3 * 7168 * 2048 == more.replica_bytes
    assert more.per_rank_bytes - plain.per_rank_bytes == pytest.approx(81_738_596_352 / 144, rel=1e-12)
    assert "replica_bytes" not in plain.to_dict()


def test_a_placement_file_holds_the_replicas(tmp_path):
    """A file of 6 lines × 4 ids (16 experts + 8 replicas): each rank receives its replicas' rows."""
    path = tmp_path / "placement.txt"
    path.write_text("".join(f"{r},{r + 6},{(r + 12) % 16},{(r + 3) % 16}\n" for r in range(6)))
    counts = (6,) * 16  # uniform, 48 tokens × k = 2
    wl = generate(TINY, ParallelLayout(1, 6), 48, WorkloadOptions(redundant_experts=8, expert_placement=str(path)))
    held = [(r, r + 6, (r + 12) % 16, (r + 3) % 16) for r in range(6)]
    expected = [sum(c for c in row) for row in replica_rows(counts, tuple(tuple(h) for h in held))]
    layer = TINY.first_dense_layers
    got = [next(n.flops for n in g.nodes if n.layer == layer and n.name == "routed_experts") for g in wl.graphs]
    assert got == [r * 6 * TINY.comm_dim * TINY.expert_ffn_width for r in expected]


def test_bad_redundancy_inputs_are_one_line_errors(tmp_path):
    layout = ParallelLayout(1, 6)
    placement = tmp_path / "placement.txt"
    placement.write_text("".join(f"{r},{r + 6},{(r + 12) % 16}\n" for r in range(6)))
    cases = [
        (lambda: WorkloadOptions(eplb_nodes=2), "eplb_nodes"),
        (lambda: WorkloadOptions(redundant_experts=8, expert_placement="eplb", expert_slots=2), "expert_slots"),
        (lambda: generate(TINY, layout, 48, WorkloadOptions(redundant_experts=8, expert_placement="eplb",
                                                            eplb_groups=3)), "eplb_groups"),
        (lambda: generate(TINY, layout, 48, WorkloadOptions(redundant_experts=8, expert_placement=str(placement))),
         "lines"),
    ]
    for make, field in cases:
        with pytest.raises(MoesimError, match=field) as exc:
            make()
        assert "\n" not in str(exc.value)


def test_eplb_nodes_must_be_servers_of_the_run():
    """Hierarchical EPLB on DeepSeek-V3, EP32 over 4 H800 servers: 8 groups over 4 nodes balance uniform
    routing exactly (max/mean 1, against 9/8 without a balancer); 2 nodes of 16 EP ranks would each span two
    servers and are refused in one line."""
    base = (("redundant_experts", 32), ("expert_placement", "eplb"), ("eplb_groups", 8))
    ok = prepare(RunSpec(model="deepseek-v3", topology="hgx-h800:4", strategy="TP1EP32",
                         overrides=(*base, ("eplb_nodes", 4))))
    assert ok.ep_imbalance == (1.0, 1.125)
    with pytest.raises(MoesimError, match="eplb_nodes.*servers 0, 1") as exc:
        prepare(RunSpec(model="deepseek-v3", topology="hgx-h800:4", strategy="TP1EP32",
                        overrides=(*base, ("eplb_nodes", 2))))
    assert "\n" not in str(exc.value)


def test_ranks_share_each_layers_pair_matrix():
    """Memory: every rank's dispatch (and combine) of a layer refers to one EP² tuple, and under uniform
    routing over replicas every MoE layer to the same one (EP144 graphs would otherwise hold GBs)."""
    layout = ParallelLayout(tp=2, ep=6)
    for extra, layers in (({"routing": "zipf"}, TINY.moe_layers), ({}, 1)):
        wl = generate(TINY, layout, 48, WorkloadOptions(redundant_experts=8, **extra))
        for name in ("ep_dispatch", "ep_combine"):
            tuples = {id(n.pair_bytes) for g in wl.graphs for n in g.nodes if n.name == name}
            assert len(tuples) == layers


@pytest.mark.parametrize("extra", [{}, {"routing": "zipf", "expert_placement": "eplb"}])
def test_replicas_under_data_parallel_attention(extra):
    """DP3TP2EP6 (experts whole on each of the 6 ranks): every MoE layer's expert FLOPs over the ranks add up
    to T·k·6·h·w, the rows of all replicas."""
    layout = ParallelLayout.parse("DP3TP2EP6")
    wl = generate(TINY, layout, 48, WorkloadOptions(redundant_experts=8, **extra))
    per = 6 * TINY.comm_dim * TINY.expert_ffn_width
    for layer in range(TINY.first_dense_layers, TINY.num_layers):
        assert sum(n.flops for g in wl.graphs for n in g.nodes
                   if n.layer == layer and n.name == "routed_experts") == 48 * TINY.top_k * per
