"""Batches of prompts in one prefill pass (``prompt_lengths``, ``prompt_counts``; docs/workload.md): attention
per prompt (Σ nᵢ·Lᵢ² terms), everything else over the batch's Σ nᵢ·Lᵢ tokens."""

from __future__ import annotations

import pytest

from moesim.errors import MoesimError
from moesim.models.catalog import get_model
from moesim.system.run import prepare
from moesim.system.spec import RunSpec
from moesim.workload.costs import attention_nodes, attention_shard, attention_work, roofline_time_s
from moesim.workload.efficiency import prefill_attention_efficiency
from moesim.workload.generator import generate
from moesim.workload.graph import Node, NodeKind
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import WorkloadOptions
from moesim.workload.prompts import (
    batch_tokens,
    prompt_attention_nodes,
    prompt_attention_work,
    prompt_batch,
    split_prompts,
)

V3 = get_model("deepseek-v3")


def _nodes(wl, layer: int) -> dict:
    return {n.name: n for n in wl.graphs[0].nodes if n.layer == layer}


@pytest.mark.parametrize("tp", [1, 4])
def test_attention_is_per_prompt(tp: int) -> None:
    """FLOPs 2·(Σ nL)·params + 2·Σ n·L²·heads·(qk + v); bytes: the shard's weights once + 2·(Σ nL)·hidden·2."""
    lengths, counts = (512, 1024, 2048), (3, 1, 2)
    shard = attention_shard(V3, tp)
    total = sum(n * x for x, n in zip(lengths, counts, strict=True))
    squares = sum(n * x * x for x, n in zip(lengths, counts, strict=True))
    work = prompt_attention_work(V3, tp, prompt_batch(lengths, counts), 1.0)
    assert work.flops == 2 * total * shard.params + 2 * squares * shard.heads * (shard.qk_dim + shard.v_dim)
    assert work.bytes_moved == shard.params + 2 * total * V3.hidden_size * 2
    whole = attention_work(V3, tp, total, 1.0)  # one sequence as long: (Σ nL)² scores
    assert whole.flops - work.flops == 2 * (total * total - squares) * shard.heads * (shard.qk_dim + shard.v_dim)


def test_peak_of_a_mixed_precision_batch_weights_each_part() -> None:
    """FP8 projections (twice the BF16 peak) beside a BF16 core: the batch's time is the sum of its prompts'."""
    options = WorkloadOptions(dense_dtype="fp8", attention_dtype="bf16")
    prec = options.precision
    batch = prompt_batch((256, 4096))
    work = prompt_attention_work(V3, 1, batch, 1.0, prec)
    parts = [attention_work(V3, 1, x, 1.0, precision=prec) for x in (256, 4096)]
    assert work.flops / work.peak_scale == pytest.approx(sum(p.flops / p.peak_scale for p in parts), rel=1e-12)


def test_generated_pass_uses_the_batch() -> None:
    """TP4EP8: attention per prompt; all-reduce, dispatch, experts and shared FFN over Σ nL tokens; one
    prompt of T tokens is the plain T-token pass."""
    layout = ParallelLayout.parse("TP4EP8")
    wl = generate(V3, layout, options=WorkloadOptions(prompt_lengths=(1000, 3000), prompt_counts=(2, 1)))
    plain = generate(V3, layout, 5000)
    assert wl.name == "deepseek-v3_TP4EP8_T5000_P3"
    got, ref = _nodes(wl, 5), _nodes(plain, 5)
    for name in ("tp_allreduce_attn", "ep_dispatch", "routed_experts", "ep_combine", "shared_ffn"):
        assert (got[name].flops, got[name].bytes_moved, got[name].size_bytes) == \
            (ref[name].flops, ref[name].bytes_moved, ref[name].size_bytes)
    assert got["attention"].flops == prompt_attention_work(V3, 4, ((1000, 2), (3000, 1)), 1.0).flops
    assert got["attention"].flops < ref["attention"].flops
    one = generate(V3, layout, options=WorkloadOptions(prompt_lengths=(5000,)))
    assert one.graphs == plain.graphs


def test_each_dp_group_carries_the_batch() -> None:
    """DP8EP8: every attention group runs the prompts; the pass routes 8 × Σ nL tokens, Σ nL / 1 per rank."""
    model = get_model("qwen3-30b-a3b")
    options = WorkloadOptions(prompt_lengths=(100, 300))
    wl = generate(model, ParallelLayout.parse("DP8EP8"), options=options)
    assert wl.name.endswith("_T3200_P2")
    dispatch = _nodes(wl, 1)["ep_dispatch"]
    assert dispatch.size_bytes == 400 * model.top_k * model.comm_dim * 2
    rank_att = _nodes(wl, 1)["attention"].flops
    assert rank_att == prompt_attention_work(model, 1, ((100, 1), (300, 1)), 1.0).flops


@pytest.mark.parametrize("kwargs,needle", [
    ({"prompt_counts": (2,)}, "applies only with prompt_lengths"),
    ({"prompt_lengths": (10, 20), "prompt_counts": (1,)}, "1 counts for 2 prompt_lengths"),
    ({"prompt_lengths": (10,), "phase": "decode"}, "applies only with phase=prefill"),
    ({"prompt_lengths": (0,)}, "'prompt_lengths'"),
    ({"prompt_lengths": (10**9,), "prompt_counts": (2,)}, "prompt_lengths × prompt_counts"),
])
def test_bad_prompt_options_give_one_line(kwargs: dict, needle: str) -> None:
    with pytest.raises(MoesimError) as exc:
        WorkloadOptions(**kwargs)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_a_run_records_the_batchs_tokens() -> None:
    """``--set prompt_lengths=[...]``: the run's tokens are the batch's, DP × Σ nL under DP attention; a batch
    that does not split over a group's TP ranks is refused before anything is built."""
    spec = RunSpec("qwen3-30b-a3b", "hgx-h100:1", "DP8EP8", "ring_direct", "ib_cc0", "analytical",
                   (("prompt_lengths", [64, 192]),))
    run = prepare(spec)
    assert run.tokens == 8 * 256 and run.workload_options.prompts == ((64, 1), (192, 1))
    with pytest.raises(MoesimError) as exc:
        prepare(RunSpec("qwen3-30b-a3b", "hgx-h100:1", "DP2TP4EP8", "ring_direct", "ib_cc0", "analytical",
                        (("prompt_lengths", [63]),)))
    assert "'prompt_lengths': 126 tokens is not a multiple of DP × TP = 8" in str(exc.value)
    with pytest.raises(MoesimError) as exc:
        prepare(RunSpec("qwen3-30b-a3b", "hgx-h100:1", "DP8EP8", "ring_direct", "ib_cc0", "analytical",
                        (("prompt_lengths", [64]), ("tokens", 512))))
    assert "field 'tokens': a batch of prompts" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_split_prompts_deals_whole_prompts_round_robin() -> None:
    """Each length's count split evenly, remainders dealt in turn: no micro-batch takes every odd prompt."""
    parts = split_prompts(((100, 3), (200, 3), (50, 4)), 2)
    assert parts == [((100, 2), (200, 1), (50, 2)), ((100, 1), (200, 2), (50, 2))]
    assert sum(batch_tokens(p) for p in parts) == 300 + 600 + 200
    assert split_prompts(((7, 1),), 2) == [((7, 1),), ()]


def test_two_batch_overlap_splits_the_batch_into_whole_prompts() -> None:
    """DP8EP8, 4 prompts in 2 micro-batches of whole prompts: the same FLOPs as one batch (attention stays per
    prompt), each micro-batch's attention its own prompts'; a single prompt cannot make 2 micro-batches."""
    model = get_model("qwen3-30b-a3b")
    layout = ParallelLayout.parse("DP8EP8")
    lengths = (256, 512, 768, 1024)
    one = generate(model, layout, options=WorkloadOptions(prompt_lengths=lengths))
    two = generate(model, layout, options=WorkloadOptions(prompt_lengths=lengths, overlap="two-batch"))
    flops = [sum(n.flops for n in wl.graphs[0].nodes) for wl in (one, two)]
    assert flops[0] == flops[1]
    attention = [n.flops for n in two.graphs[0].nodes if n.layer == 0 and n.name == "attention"]
    assert attention == [prompt_attention_work(model, 1, p, 1.0).flops
                         for p in split_prompts(prompt_batch(lengths), 2)]
    with pytest.raises(MoesimError) as exc:
        generate(model, layout, options=WorkloadOptions(prompt_lengths=(4096,), overlap="two-batch"))
    assert "2 micro-batches exceed the 1 prompts" in str(exc.value)
    with pytest.raises(MoesimError) as exc:
        generate(model, ParallelLayout.parse("DP2TP4EP8"),
                 options=WorkloadOptions(prompt_lengths=(6, 6), overlap="two-batch"))
    assert "(6, 6) must split evenly over TP = 4" in str(exc.value)


def test_measured_batch_runs_one_projection_pass_then_each_prompts_core() -> None:
    """Oracle, compute_model=measured (varlen FlashAttention): the projections are one GEMM pass over the batch's
    Σ nL tokens (DeepGEMM's efficiency at M = Σ nL); the core is each prompt's L×L scores at FlashAttention-3's
    efficiency for its L keys, one after another: Σ n·2·L²·heads·(qk + v) / (989.5 TFLOPS · η_FA3(L)) (BF16,
    compute-bound). Together they hold the roofline node's FLOPs and bytes."""
    prec = WorkloadOptions(dense_dtype="fp8", attention_dtype="bf16", compute_model="measured").precision
    batch, shard = prompt_batch((512, 4096), (6, 1)), attention_shard(V3, 1)
    projections, core = prompt_attention_nodes(V3, 1, batch, 1.0, prec)
    assert projections == attention_nodes(V3, 1, 6 * 512 + 4096, 1.0, precision=prec)[0]
    expected = sum(n * 2 * x * x * shard.heads * (shard.qk_dim + shard.v_dim) / (989.5e12 * prefill_attention_efficiency(x))
                   for x, n in batch)
    node = Node(0, "attention", NodeKind.COMPUTE, flops=core.flops, bytes_moved=core.bytes_moved,
                peak_scale=core.peak_scale, bw_scale=core.bw_scale)
    assert roofline_time_s(node, 989.5e12, 3.35e12) == pytest.approx(expected, abs=1e-9)
    one = prompt_attention_work(V3, 1, batch, 1.0, WorkloadOptions(dense_dtype="fp8", attention_dtype="bf16").precision)
    assert (projections.flops + core.flops, projections.bytes_moved + core.bytes_moved) == (one.flops, one.bytes_moved)
    assert prompt_attention_nodes(V3, 1, ((4096, 1),), 1.0, prec) == attention_nodes(V3, 1, 4096, 1.0, precision=prec)
