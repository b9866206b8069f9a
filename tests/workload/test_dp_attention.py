"""Data-parallel attention with expert parallelism (``DP<d>[TP<t>]EP<e>``, docs/workload.md "Strategies"):
the grammar, the per-rank FLOPs of DeepSeek-V3 against a hand count, the collectives, decode's KV cache,
and runs through every backend and the Chakra export."""

from __future__ import annotations

from pathlib import Path

import pytest

from moesim.errors import MoesimError
from moesim.models.catalog import get_model
from moesim.system.export import export_run
from moesim.system.run import prepare, simulate_run
from moesim.system.spec import RunSpec
from moesim.workload.chakra import read_et, write_et
from moesim.workload.generator import generate
from moesim.workload.graph import CollectiveType, NodeKind
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import WorkloadOptions
from moesim.workload.summary import summary

V3 = get_model("deepseek-v3")
HIDDEN, LAYERS, DENSE, E, K, W, W_DENSE = 7168, 61, 3, 256, 8, 2048, 18432


def v3_attention_flops(tokens: int, tp: int) -> int:
    """DeepSeek-V3 MLA prefill on one TP shard, by hand (config.json: 128 heads, q_lora 1536, kv_lora 512,
    rope 64, nope 128, v 128): projections 2·T·params, scores and values 2·T²·heads·(192 + 128)."""
    heads = 128 // tp
    params = (HIDDEN * 1536 + 1536 * heads * 192        # q down (replicated), q up
              + HIDDEN * (512 + 64) + 512 * heads * 256  # kv down (replicated), kv up (nope + v)
              + heads * 128 * HIDDEN)                    # output
    return 2 * tokens * params + 2 * tokens * tokens * heads * (192 + 128)


def v3_rank_flops(tokens: int, dp: int, tp: int) -> int:
    """One rank's FLOPs for a ``tokens``-token prefill under DP attention: its group's T/DP tokens through
    attention, its own T/(DP·TP) tokens through the router + shared expert (2·T·hidden·E + 6·T·hidden·w),
    the dense FFN of the first 3 layers (6·T·hidden·w_dense, whole) and its T·k/EP routed rows
    (EP = DP·TP ranks, 6·hidden·w each, whole experts)."""
    group, own = tokens // dp, tokens // (dp * tp)
    rows = tokens * K // (dp * tp)
    shared = 2 * own * HIDDEN * E + 6 * own * HIDDEN * W
    routed = rows * 6 * HIDDEN * W
    dense_ffn = 6 * own * HIDDEN * W_DENSE
    return LAYERS * v3_attention_flops(group, tp) + DENSE * dense_ffn + (LAYERS - DENSE) * (shared + routed)


@pytest.mark.parametrize("strategy,dp,tp", [("DP32EP32", 32, 1), ("DP8TP4EP32", 8, 4), ("DP4TP2EP8", 4, 2)])
def test_flops_per_rank_match_the_hand_count_for_deepseek_v3(strategy: str, dp: int, tp: int) -> None:
    wl = generate(V3, ParallelLayout.parse(strategy), 4096)
    per_rank = {r.flops for r in summary(wl).ranks}
    assert per_rank == {v3_rank_flops(4096, dp, tp)}


def test_dp32_rank_does_the_work_of_its_own_128_tokens() -> None:
    """DP32EP32 at 4096 tokens: a rank's FLOPs are those of a 128-token TP1EP1 pass of the whole model
    but its routed experts, which hold 1/32 of the rows of 4096 tokens = 128·k rows, the same count."""
    dp = summary(generate(V3, ParallelLayout.parse("DP32EP32"), 4096)).ranks[0].flops
    single = summary(generate(V3, ParallelLayout(tp=1, ep=1), 128)).ranks[0].flops
    assert dp == single


def test_collectives_of_dp_attention() -> None:
    """TP1: no TP collective, dispatch/combine of the rank's own T/32 tokens (T/32·k·h·2 bytes) over all 32
    ranks. TP4: a reduce-scatter of the group's T/8 tokens and an all-gather of the rank's T/32 tokens in the
    group of 4, the all-to-all over one group of all 32 ranks."""
    t, h = 4096, HIDDEN
    wl = generate(V3, ParallelLayout.parse("DP32EP32"), t)
    assert wl.logical_dims == (1, 32)
    nodes = wl.graphs[7].nodes
    a2a = [n for n in nodes if n.kind is NodeKind.COLLECTIVE]
    assert {n.collective for n in a2a} == {CollectiveType.ALL_TO_ALL} and len(a2a) == 2 * (LAYERS - DENSE)
    assert {n.size_bytes for n in a2a} == {t // 32 * K * h * 2}
    assert wl.collective_ranks(7, a2a[0]) == tuple(range(32))

    wl = generate(V3, ParallelLayout.parse("DP8TP4EP32"), t)
    assert wl.logical_dims == (4, 8)
    nodes = wl.graphs[9].nodes
    rs = [n for n in nodes if n.collective is CollectiveType.REDUCE_SCATTER]
    ag = [n for n in nodes if n.collective is CollectiveType.ALL_GATHER]
    a2a = [n for n in nodes if n.collective is CollectiveType.ALL_TO_ALL]
    assert len(rs) == len(ag) == LAYERS and not any(n.collective is CollectiveType.ALL_REDUCE for n in nodes)
    assert {n.size_bytes for n in rs} == {t // 8 * h * 2} and {n.size_bytes for n in ag} == {t // 32 * h * 2}
    assert wl.collective_ranks(9, rs[0]) == (8, 9, 10, 11)
    assert {n.size_bytes for n in a2a} == {t // 32 * K * h * 2}
    assert wl.collective_ranks(9, a2a[0]) == tuple(range(32)) and a2a[0].group != 0
    assert summary(wl).ranks[9].tp_bytes == LAYERS * (t // 8 + t // 32) * h * 2
    names = [n.name for n in nodes if n.layer == DENSE]
    assert names == ["attention", "tp_reduce_scatter_attn", "ep_dispatch", "routed_experts", "ep_combine",
                     "shared_ffn", "tp_allgather_out"]


def test_decode_keeps_each_groups_kv_cache() -> None:
    """Decode, B = 64 sequences over DP32: a rank reads the cache of its own 2 sequences,
    2·C·(kv_lora + rope)·2 bytes per layer, beside its weights and activations."""
    b, c = 64, 1000
    layout = ParallelLayout.parse("DP32EP32")
    wl = generate(V3, layout, options=WorkloadOptions(phase="decode", batch=b, context_tokens=c))
    att = next(n for n in wl.graphs[0].nodes if n.name == "attention")
    empty = next(n for n in generate(V3, layout, options=WorkloadOptions(phase="decode", batch=b, context_tokens=0))
                 .graphs[0].nodes if n.name == "attention")
    assert att.bytes_moved - empty.bytes_moved == b // 32 * c * (512 + 64) * 2
    a2a = next(n for n in wl.graphs[0].nodes if n.name == "ep_dispatch")
    assert a2a.size_bytes == b // 32 * K * HIDDEN * 2


@pytest.mark.parametrize("text,name,ranks", [("DP32EP32", "DP32EP32", 32), ("dp8tp4ep32", "DP8TP4EP32", 32),
                                             ("DP16TP1EP16", "DP16EP16", 16), ("DP1TP8EP8", "DP1TP8EP8", 8)])
def test_grammar(text: str, name: str, ranks: int) -> None:
    layout = ParallelLayout.parse(text)
    assert layout.name == name and layout.num_ranks == ranks and layout.dp_attention
    assert layout.batch_multiple == ranks and ParallelLayout.parse("TP4EP8").batch_multiple == 1
    assert ParallelLayout.parse("TP4EP8") == ParallelLayout(tp=4, ep=8) and ParallelLayout(4, 8).experts == \
        ParallelLayout(4, 8)


@pytest.mark.parametrize("text,needle", [("DP8TP4EP16", "EP = 16 must equal DP × TP = 32"),
                                         ("DP8", "expected the form"), ("DP0EP4", "'dp'"),
                                         ("TP4DP8EP32", "expected the form")])
def test_bad_strategies_give_one_line(text: str, needle: str) -> None:
    with pytest.raises(MoesimError) as exc:
        ParallelLayout.parse(text)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_batch_must_split_evenly() -> None:
    with pytest.raises(MoesimError) as exc:
        generate(V3, ParallelLayout.parse("DP8TP4EP32"), 4008)
    assert "'tokens': 4008 is not a multiple of DP × TP = 32" in str(exc.value)
    with pytest.raises(MoesimError) as exc:
        generate(V3, ParallelLayout.parse("DP32EP32"), options=WorkloadOptions(phase="decode", batch=48))
    assert "'batch': 48" in str(exc.value)
    with pytest.raises(MoesimError) as exc:
        generate(V3, ParallelLayout.parse("DP8TP4EP32"), 4096, WorkloadOptions(num_ranks=64))
    assert "DP × TP = 32 does not match 64 ranks" in str(exc.value)
    with pytest.raises(MoesimError) as exc:
        generate(V3, ParallelLayout.parse("DP2TP4EP8"), 40, WorkloadOptions(overlap="two-batch", micro_batches=3))
    assert "split evenly over its TP = 4 ranks" in str(exc.value)


def test_two_batch_overlap_splits_each_groups_tokens() -> None:
    """Micro-batches split a group's own T/DP tokens: the FLOPs of a DP32 rank stay its 128 tokens'
    projections, experts and FFNs; attention counts each micro-batch's queries against all 128 keys."""
    layout = ParallelLayout.parse("DP32EP32")
    one = summary(generate(V3, layout, 4096)).ranks[0].flops
    two = summary(generate(V3, layout, 4096, WorkloadOptions(overlap="two-batch"))).ranks[0].flops
    assert one == two


def test_skewed_routing_under_dp_attention_conserves_rows() -> None:
    """Zipf routing over DP8EP8: the EP ranks' routed rows add up to T·k, each rank sends its own T/8·k."""
    model = get_model("qwen3-30b-a3b")
    wl = generate(model, ParallelLayout.parse("DP8EP8"), 512, WorkloadOptions(routing="zipf"))
    layer = model.first_dense_layers
    dispatch = [next(n for n in g.nodes if n.layer == layer and n.name == "ep_dispatch") for g in wl.graphs]
    pairs = dispatch[0].pair_bytes
    row = model.comm_dim * 2
    assert sum(pairs) == 512 * model.top_k * row
    assert [sum(pairs[s * 8:(s + 1) * 8]) for s in range(8)] == [n.size_bytes for n in dispatch]
    rows = [next(n for n in g.nodes if n.layer == layer and n.name == "routed_experts").flops for g in wl.graphs]
    assert sum(rows) == 512 * model.top_k * 6 * model.comm_dim * model.expert_ffn_width


def test_chakra_round_trip(tmp_path: Path) -> None:
    for strategy in ("DP8TP4EP32", "DP32EP32"):
        wl = generate(V3, ParallelLayout.parse(strategy), 1024)
        write_et(wl, tmp_path / strategy, "wl")
        assert read_et(tmp_path / strategy) == wl


@pytest.mark.parametrize("backend", ["analytical", "flow", "fluid"])
@pytest.mark.parametrize("strategy", ["DP8EP8", "DP2TP4EP8"])
def test_runs_on_every_backend(backend: str, strategy: str) -> None:
    """A DP-attention run finishes with every rank at the same GPU time (uniform routing, one graph), and
    its GPU time is its 1/8 share of the tokens: below TP1EP8's, whose ranks all run the whole batch."""
    spec = RunSpec("qwen3-30b-a3b", "hgx-h100:1", strategy, "ring_direct", "ib_cc0", backend, (("tokens", 256),))
    result = simulate_run(spec)
    assert len({r.gpu_s for r in result.ranks}) == 1 and result.wall_s > result.gpu_s > 0
    wide = simulate_run(RunSpec("qwen3-30b-a3b", "hgx-h100:1", "TP1EP8", "ring_direct", "ib_cc0", "analytical",
                                (("tokens", 256),)))
    assert result.gpu_s < wide.gpu_s
    assert result.summary()["strategy"] == strategy


@pytest.mark.parametrize("backend", ["analytical", "fluid", "packet"])
def test_decode_runs_and_reports_the_global_batch(backend: str) -> None:
    """Decode under DP2TP4EP8: B = 64 sequences in all (32 per attention group), 64 tokens per step."""
    spec = RunSpec("qwen3-30b-a3b", "hgx-h100:1", "DP2TP4EP8", "ring_direct", "ib_cc0", backend,
                   (("batch", 64), ("context_tokens", 512), ("phase", "decode")))
    record = simulate_run(spec).summary()
    assert record["tokens_per_s"] == pytest.approx(64 / record["wall_s"], rel=1e-12) and record["gpu_s"] > 0


@pytest.mark.slow
def test_packet_backend_and_astra_round_trip(tmp_path: Path) -> None:
    """The packet backend runs DP attention, and `moesim export` + the ASTRA-sim reader give it back bit for
    bit (ASTRA-sim's receives and ns-3's NIC bookkeeping, as tests/system/test_astra_input.py)."""
    from moesim.network import BACKENDS
    from moesim.system.astra_input import find_paths, read_inputs
    from moesim.system.run import simulate as run_simulate

    spec = RunSpec("qwen3-30b-a3b", "hgx-h100:1", "DP2TP4EP8", "ring_direct", "ib_cc0", "packet",
                   (("astra_receives", True), ("nic_model", "ns3"), ("tokens", 64)))
    expected = simulate_run(spec).ranks
    export_run(spec, tmp_path)
    inputs = read_inputs(find_paths(tmp_path))
    got = run_simulate(inputs.workload, inputs.topology, BACKENDS.get("packet")(inputs.topology, inputs.params),
                       inputs.settings)
    assert [(t.wall_s, t.gpu_s, t.comm_s) for t in got] == [(t.wall_s, t.gpu_s, t.comm_s) for t in expected]


def test_prepare_places_dp_ranks_and_checks_the_gpu_count() -> None:
    run = prepare(RunSpec("deepseek-v3", "hgx-h800:4", "DP8TP4EP32", "ring_direct", "ib_cc0", "analytical", ()))
    assert run.placement.num_ranks == 32 and run.layout.dp == 8
    with pytest.raises(MoesimError) as exc:
        prepare(RunSpec("deepseek-v3", "hgx-h800:2", "DP8TP4EP32", "ring_direct", "ib_cc0", "analytical", ()))
    assert "DP × TP = 32 does not match 16 ranks" in str(exc.value)


def test_existing_strategies_keep_their_simulation_keys() -> None:
    """A TP×EP run keys its layout as before (tp, ep, dp, pp) and no prompt option; a DP run keys its own."""
    from moesim.experiments.inputs import input_hash, resolved_inputs

    def spec(strategy: str, *overrides: tuple[str, object]) -> RunSpec:
        return RunSpec("deepseek-v3", "hgx-h800:4", strategy, "ring_direct", "ib_cc0", "flow", overrides)

    plain = resolved_inputs(spec("TP1EP32"))
    assert plain["layout"] == {"tp": 1, "ep": 32, "dp": 1, "pp": 1}
    assert not {"prompt_lengths", "prompt_counts"} & set(plain["workload_options"])
    assert resolved_inputs(spec("DP32EP32"))["layout"] == {"tp": 1, "ep": 32, "dp": 32, "pp": 1, "dp_attention": True}
    assert input_hash(spec("TP1EP32")) != input_hash(spec("TP1EP32", ("prompt_lengths", [4096])))
