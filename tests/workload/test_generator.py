"""The MoE prefill generator against docs/study.md §3 (structure, volumes, compute closed forms)."""

from __future__ import annotations

import dataclasses

import pytest

from moesim.errors import MoesimError
from moesim.models.catalog import STUDY_MODELS, get_model, list_models
from moesim.models.spec import AttentionSpec, ModelSpec
from moesim.workload.costs import comm_proxies, roofline_time_s
from moesim.workload.generator import generate
from moesim.workload.graph import CollectiveType, NodeKind
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import STUDY_STRATEGIES, WorkloadOptions
from moesim.workload.summary import summary

T = 4096
STUDY = [(m, s) for m in STUDY_MODELS for s in STUDY_STRATEGIES]
MOE_SEQUENCE = [
    "attention",
    "tp_allreduce_attn",
    "ep_dispatch",
    "routed_experts",
    "ep_combine",
    "shared_ffn",
    "tp_allreduce_out",
]
DENSE_SEQUENCE = ["attention", "tp_allreduce_attn", "dense_ffn", "tp_allreduce_out"]


def _valid(model: ModelSpec, strategy: str) -> bool:
    return model.routed_experts % ParallelLayout.parse(strategy).ep == 0


ALL_VALID = [(m.key, s) for m in list_models() for s in STUDY_STRATEGIES if _valid(m, s)]


@pytest.mark.parametrize("key,strategy", STUDY)
def test_volumes_match_study_formulas(key: str, strategy: str) -> None:
    """V_TP = T·h·2 per all-reduce (2 per layer), V_EP = T·h·k·2/EP per all-to-all (2 per MoE layer)."""
    model, layout = get_model(key), ParallelLayout.parse(strategy)
    wl = generate(model, layout, T, WorkloadOptions(num_ranks=32))
    h, k = model.comm_dim, model.top_k
    v_tp, v_ep = T * h * 2, T * h * k * 2 // layout.ep
    assert v_ep * layout.ep == T * h * k * 2  # exact for the study
    moe_layers = model.num_layers - model.first_dense_layers
    for g in wl.graphs:
        ar = [n for n in g.nodes if n.collective is CollectiveType.ALL_REDUCE]
        a2a = [n for n in g.nodes if n.collective is CollectiveType.ALL_TO_ALL]
        assert len(ar) == 2 * model.num_layers and {n.size_bytes for n in ar} == {v_tp}
        assert len(a2a) == 2 * moe_layers and {n.size_bytes for n in a2a} == {v_ep}
        assert all(n.involved_dims == (True, False) and n.group == 0 for n in ar)
        assert all(n.involved_dims == (False, True) and n.group == 0 for n in a2a)
        # one all-to-all's per-rank bytes over all ranks = TP copies of the T·h·k·2 token-expert rows
        assert a2a[0].size_bytes * wl.num_ranks == layout.tp * T * h * k * 2
    s = summary(wl)
    assert s.tp_bytes == 32 * 2 * model.num_layers * v_tp
    assert s.ep_bytes == 32 * 2 * moe_layers * v_ep
    assert all(r.ep_bytes * 32 == layout.tp * 2 * moe_layers * T * h * k * 2 for r in s.ranks)
    # the proxies of docs/study.md §2
    assert comm_proxies(model) == (h * model.num_layers, h * k * moe_layers)


@pytest.mark.parametrize("key,strategy", ALL_VALID)
def test_graph_structure(key: str, strategy: str) -> None:
    """A chain per rank, consecutive ids, per-layer sequence of section 3, every MoE layer identical."""
    model, layout = get_model(key), ParallelLayout.parse(strategy)
    wl = generate(model, layout, T)
    assert wl.num_ranks == layout.num_ranks and wl.logical_dims == (layout.tp, layout.ep)
    nodes = wl.graphs[0].nodes
    assert [n.id for n in nodes] == list(range(len(nodes)))
    assert [n.deps for n in nodes] == [()] + [(i,) for i in range(len(nodes) - 1)]
    assert all(g.nodes == nodes for g in wl.graphs)  # uniform routing: every rank runs the same graph
    per_layer: dict[int, list] = {}
    for n in nodes:
        per_layer.setdefault(n.layer, []).append(n)
    assert sorted(per_layer) == list(range(model.num_layers))
    assert [n.layer for n in nodes] == sorted(n.layer for n in nodes)
    for layer, ns in per_layer.items():
        expected = DENSE_SEQUENCE if layer < model.first_dense_layers else MOE_SEQUENCE
        assert [n.name for n in ns] == expected
    moe = [per_layer[i] for i in range(model.first_dense_layers, model.num_layers)]

    def strip(n):
        return dataclasses.replace(n, id=0, deps=(), layer=0)

    assert all([strip(n) for n in layer] == [strip(n) for n in moe[0]] for layer in moe)
    assert all(n.flops > 0 and n.bytes_moved > 0 for n in nodes if n.kind is NodeKind.COMPUTE)


MEASURED_ATTENTION = ["attention_elementwise", "attention_projections", "attention"]


@pytest.mark.parametrize("strategy", ["TP8EP8", "DP8EP8"])
@pytest.mark.parametrize("options", [{}, {"overlap": "two-batch"}, {"prompt_lengths": (300, 700), "prompt_counts": (2, 1)},
                                     {"phase": "decode", "batch": 64, "context_tokens": 1000, "mtp_draft_tokens": 1,
                                      "mtp_acceptance": 0.8, "overlap": "two-batch"}])
def test_measured_attention_is_projections_then_core(strategy: str, options: dict) -> None:
    """Under compute_model=measured every micro-batch of every layer (dense, MoE, MTP draft) runs its attention as
    two compute nodes in sequence, the projections then the core, holding the FLOPs and bytes of the roofline's
    one ``attention`` node of that layer; the roofline graph has no other compute node for it."""
    model, layout = get_model("deepseek-v3"), ParallelLayout.parse(strategy)
    roof = generate(model, layout, T, WorkloadOptions(**options)).graphs[0].nodes
    meas = generate(model, layout, T, WorkloadOptions(**options, compute_model="measured")).graphs[0].nodes
    assert "attention_projections" not in {n.name for n in roof}
    roof_attention = [n for n in roof if n.name == "attention"]
    for layer in {n.layer for n in meas}:
        names = [n.name for n in meas if n.layer == layer]
        starts = [i for i, name in enumerate(names) if name == "attention_elementwise"]
        assert starts and all(names[i:i + 3] == MEASURED_ATTENTION for i in starts)  # one per micro-batch
        pair = [n for n in meas if n.layer == layer and n.name in MEASURED_ATTENTION[1:]]
        one = [n for n in roof_attention if n.layer == layer]
        assert len(pair) == 2 * len(one)
        assert (sum(n.flops for n in pair), sum(n.bytes_moved for n in pair)) == \
            (sum(n.flops for n in one), sum(n.bytes_moved for n in one))


@pytest.mark.parametrize("strategy", STUDY_STRATEGIES)
def test_collective_members_are_the_layout_groups(strategy: str) -> None:
    """involved_dims (T,F)/(F,T) over logical dims (TP, EP) resolve to the study's TP and EP groups (docs/study.md §3)."""
    layout = ParallelLayout.parse(strategy)
    wl = generate(get_model("deepseek-v4-flash"), layout, T)
    ar = next(n for n in wl.graphs[0].nodes if n.collective is CollectiveType.ALL_REDUCE)
    a2a = next(n for n in wl.graphs[0].nodes if n.collective is CollectiveType.ALL_TO_ALL)
    for r in range(layout.num_ranks):
        assert wl.collective_ranks(r, ar) == layout.tp_group(r)
        assert wl.collective_ranks(r, a2a) == layout.ep_group(r)
    # comm groups: TP groups (ids 1..EP) then EP groups
    expected = [*layout.tp_groups(), *layout.ep_groups()]
    assert wl.comm_groups == tuple((i + 1, g) for i, g in enumerate(expected))


def test_group_addressing_uses_comm_group_ids() -> None:
    layout = ParallelLayout.parse("TP4EP8")
    wl = generate(get_model("deepseek-v4-flash"), layout, T, WorkloadOptions(collective_addressing="groups"))
    for g in wl.graphs:
        for n in g.nodes:
            if n.kind is NodeKind.COLLECTIVE:
                assert n.group > 0 and n.involved_dims == ()
                want = (
                    layout.tp_group(g.rank)
                    if n.collective is CollectiveType.ALL_REDUCE
                    else layout.ep_group(g.rank)
                )
                assert wl.collective_ranks(g.rank, n) == want


def test_size_one_groups_skip_their_collectives() -> None:
    model = get_model("deepseek-v4-flash")
    tp1 = generate(model, ParallelLayout(tp=1, ep=32), T)
    assert not [n for n in tp1.graphs[0].nodes if n.collective is CollectiveType.ALL_REDUCE]
    assert len([n for n in tp1.graphs[0].nodes if n.collective is CollectiveType.ALL_TO_ALL]) == 2 * 43
    ep1 = generate(model, ParallelLayout(tp=32, ep=1), T)
    assert not [n for n in ep1.graphs[0].nodes if n.collective is CollectiveType.ALL_TO_ALL]
    assert all(len(members) == 32 for _, members in ep1.comm_groups)  # only the one TP group


def test_zero_work_compute_nodes_are_skipped() -> None:
    base = get_model("glm-5.3")
    no_dense = dataclasses.replace(base, key="x", dense_ffn_width=0)
    wl = generate(no_dense, ParallelLayout.parse("TP4EP8"), T)
    names = [n.name for n in wl.graphs[0].nodes if n.layer == 0]
    assert names == ["attention", "tp_allreduce_attn", "tp_allreduce_out"]


def test_deterministic() -> None:
    model, layout = get_model("kimi-k3"), ParallelLayout.parse("TP8EP4")
    assert generate(model, layout, T) == generate(model, layout, T)


# --- compute closed forms ------------------------------------------------------------------------


def _by_name(key: str, strategy: str, **opts) -> dict:
    wl = generate(get_model(key), ParallelLayout.parse(strategy), T, WorkloadOptions(**opts))
    layer = max(n.layer for n in wl.graphs[0].nodes)
    return {n.name: n for n in wl.graphs[0].nodes if n.layer == layer}


@pytest.mark.parametrize("key", STUDY_MODELS)
def test_routed_experts_closed_form(key: str) -> None:
    """FLOPs = T·k·6·h·w/32 and bytes = the weight share E·3·h·w·0.5/32, the same on every split."""
    m = get_model(key)
    h, w = m.comm_dim, m.expert_ffn_width
    for strategy in STUDY_STRATEGIES:
        node = _by_name(key, strategy)["routed_experts"]
        assert node.flops == T * m.top_k * 6 * h * w // 32
        assert node.bytes_moved == m.routed_experts * 3 * h * w // 2 // 32
    fp8 = _by_name(key, "TP4EP8", expert_bytes_per_param=1.0)["routed_experts"]
    assert fp8.bytes_moved == m.routed_experts * 3 * h * w // 32


def test_v4_flash_attention_and_shared_ffn_closed_form() -> None:
    """GQA, 64 heads × 128, 1 KV head (replicated), hidden 4096; shared FFN + router replicated."""
    for strategy, tp in (("TP2EP16", 2), ("TP8EP4", 8)):
        nodes = _by_name("deepseek-v4-flash", strategy)
        heads = 64 // tp
        params = 4096 * heads * 128 + 2 * 4096 * 1 * 128 + heads * 128 * 4096
        assert nodes["attention"].flops == 2 * T * params + 2 * T * T * heads * (128 + 128)
        assert nodes["attention"].bytes_moved == params + 2 * T * 4096 * 2
        shared = nodes["shared_ffn"]
        assert shared.flops == 1 * 6 * T * 4096 * 2048 + 2 * T * 4096 * 256
        assert shared.bytes_moved == 3 * 4096 * 2048 + 4096 * 256 + 2 * T * 4096 * 2


def test_mla_attention_closed_form() -> None:
    """MLA: replicated down projections, head-sharded up/output projections, full T×T products."""
    att = AttentionSpec(
        num_heads=8,
        num_kv_heads=8,
        head_dim=24,
        q_lora_rank=16,
        kv_lora_rank=12,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=20,
    )
    m = ModelSpec(
        key="tiny-mla",
        name="tiny",
        hidden_size=64,
        comm_dim=32,
        num_layers=2,
        first_dense_layers=1,
        attention=att,
        dense_ffn_width=96,
        routed_experts=8,
        shared_experts=2,
        top_k=2,
        expert_ffn_width=40,
        vocab_size=10,
    )
    t, tp = 16, 2
    wl = generate(m, ParallelLayout(tp=tp, ep=4), t)
    nodes = {(n.layer, n.name): n for n in wl.graphs[0].nodes}
    hr = 8 // tp
    params = 64 * 16 + 16 * hr * 24 + 64 * (12 + 8) + 12 * hr * (16 + 20) + hr * 20 * 64
    assert nodes[(0, "attention")].flops == 2 * t * params + 2 * t * t * hr * (24 + 20)
    assert nodes[(0, "dense_ffn")].flops == 6 * t * 64 * 96 // tp
    # latent MoE (comm_dim 32 < hidden 64): router on hidden, shared experts at comm_dim, projections 64 ↔ 32
    assert nodes[(1, "shared_ffn")].flops == 2 * t * 64 * 8 + 2 * 6 * t * 32 * 40 + 2 * 2 * t * 64 * 32
    assert nodes[(1, "tp_allreduce_attn")].size_bytes == t * 32 * 2


def test_v4_flash_gpu_time_tp2_matches_calibration() -> None:
    """docs/study.md §8: GPU time 0.036198 s at TP2 (43 layers, roofline 1 PFLOP/s, 1.6 TB/s)."""
    s = summary(generate(get_model("deepseek-v4-flash"), ParallelLayout.parse("TP2EP16"), T))
    assert s.gpu_s_estimate == pytest.approx(0.036198, rel=0.10)


def test_v4_flash_gpu_time_tp8_matches_calibration() -> None:
    """docs/study.md §8: GPU time 0.017360 s at TP8."""
    s = summary(generate(get_model("deepseek-v4-flash"), ParallelLayout.parse("TP8EP4"), T))
    assert s.gpu_s_estimate == pytest.approx(0.017360, rel=0.10)


def test_roofline_estimate_is_sum_of_node_maxima() -> None:
    """The summary sums the engine's roofline: max(FLOPs/peak, bytes/bandwidth) per node, whole ns."""
    wl = generate(get_model("deepseek-v4-flash"), ParallelLayout.parse("TP4EP8"), T)
    comp = [n for n in wl.graphs[0].nodes if n.kind is NodeKind.COMPUTE]
    expected = sum(int(max(n.flops / 1.0e15, n.bytes_moved / 1.6e12) * 1e9) * 1e-9 for n in comp)
    assert summary(wl).gpu_s_estimate == pytest.approx(expected, rel=1e-9)
    assert summary(wl).gpu_s_estimate == sum(roofline_time_s(n, 1.0e15, 1.6e12) for n in comp)


def test_roofline_edge_cases() -> None:
    """No bytes: skipped (0 s); no FLOPs: bytes/bandwidth; roofline off: the recorded duration (1 ns at least)."""
    from moesim.workload.graph import Node

    assert roofline_time_s(Node(0, "x", NodeKind.COMPUTE, flops=10**9), 1e12, 1e9) == 0.0
    assert roofline_time_s(Node(0, "x", NodeKind.COMPUTE, bytes_moved=3000), 1e12, 1e9) == 3e-6
    assert roofline_time_s(Node(0, "x", NodeKind.COMPUTE, flops=10**9, duration_ns=7), 1e12, 1e9, roofline=False) == 7 * 1e-9
    assert roofline_time_s(Node(0, "x", NodeKind.COMPUTE), 1e12, 1e9, roofline=False) == 1e-9


# --- validation ----------------------------------------------------------------------------------


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_rank_count_mismatch() -> None:
    with pytest.raises(MoesimError) as exc:
        generate(get_model("deepseek-v4-flash"), ParallelLayout(tp=4, ep=4), T, WorkloadOptions(num_ranks=32))
    assert "TP × EP = 16" in _one_line(exc) and "32 ranks" in str(exc.value)


def test_ep_must_divide_experts() -> None:
    with pytest.raises(MoesimError) as exc:
        generate(get_model("deepseek-v4-flash"), ParallelLayout(tp=1, ep=3), T)
    assert "does not divide 256 routed experts" in _one_line(exc)
    with pytest.raises(MoesimError):
        generate(get_model("mixtral-8x7b"), ParallelLayout.parse("TP2EP16"), T)


@pytest.mark.parametrize(
    "field,value",
    [
        ("weight_bytes_per_param", 0),
        ("expert_bytes_per_param", -1.0),
        ("num_ranks", 0),
        ("collective_addressing", "rings"),
    ],
)
def test_bad_options(field: str, value) -> None:
    with pytest.raises(MoesimError) as exc:
        WorkloadOptions(**{field: value})
    assert field in _one_line(exc)


def test_bad_tokens() -> None:
    with pytest.raises(MoesimError) as exc:
        generate(get_model("deepseek-v4-flash"), ParallelLayout.parse("TP4EP8"), 0)
    assert "tokens" in _one_line(exc)
