"""Decode-step workloads (docs/workload.md, "Decode"): collective volumes, KV-cache reads, experts hit,
the step structure, and that the default (prefill) graphs do not depend on the decode knobs."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from moesim.errors import MoesimError
from moesim.models.catalog import STUDY_MODELS, get_model
from moesim.workload.costs import attention_shard, expert_hit_fraction
from moesim.workload.generator import generate
from moesim.workload.graph import CollectiveType, NodeKind
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import STUDY_STRATEGIES, WorkloadOptions


def decode(model: str, strategy: str, batch: int, context: int = 512, steps: int = 1):
    return generate(get_model(model), ParallelLayout.parse(strategy),
                    options=WorkloadOptions(phase="decode", batch=batch, context_tokens=context, decode_steps=steps))


def first_layer(workload, name: str, layer: int | None = None):
    """The first node called ``name`` (in ``layer`` if given) of rank 0."""
    nodes = workload.graphs[0].nodes
    return next(n for n in nodes if n.name == name and (layer is None or n.layer == layer))


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "kimi-k3"])
@pytest.mark.parametrize("strategy", ["TP2EP16", "TP8EP4"])
@pytest.mark.parametrize("batch", [1, 3, 64, 4096])
def test_collective_bytes_follow_the_batch(model, strategy, batch):
    """Oracle: dispatch/combine = ⌊B·k·h·bytes/EP⌋ per rank, TP all-reduce = B·h·2 (h = comm_dim)."""
    spec, layout = get_model(model), ParallelLayout.parse(strategy)
    wl = decode(model, strategy, batch)
    a2a = batch * spec.top_k * spec.comm_dim * spec.bytes_per_activation // layout.ep
    ar = batch * spec.comm_dim * 2
    for g in wl.graphs:
        sizes = {(n.collective, n.size_bytes) for n in g.nodes if n.kind is NodeKind.COLLECTIVE}
        assert sizes == {(CollectiveType.ALL_TO_ALL, a2a), (CollectiveType.ALL_REDUCE, ar)}


def test_kv_cache_bytes_per_token():
    """Oracle: GQA caches 2·⌈kv_heads/TP⌉·head_dim values, MLA kv_lora + rope (not split by TP), 2 B each."""
    flash = get_model("deepseek-v4-flash")  # GQA with one KV head: replicated on every TP shard
    for tp in (1, 2, 8):
        assert attention_shard(flash, tp).kv_cache_bytes_per_token == 2 * 1 * 128 * 2
    kimi = get_model("kimi-k3")  # MLA: kv_lora 512 + rope 64
    assert {attention_shard(kimi, tp).kv_cache_bytes_per_token for tp in (1, 4, 16)} == {(512 + 64) * 2}
    qwen = get_model("qwen3-30b-a3b")  # GQA, 4 KV heads of 128
    att = qwen.attention
    for tp in (1, 2, 4, 8):
        assert attention_shard(qwen, tp).kv_cache_bytes_per_token == \
            2 * math.ceil(att.num_kv_heads / tp) * att.head_dim * 2


@pytest.mark.parametrize("model", STUDY_MODELS)
def test_attention_work_per_step(model):
    """Oracle: FLOPs 2·B·params + 2·B·C·heads·(qk+v); bytes weights + B·C·kv + 2·B·hidden·2. The context
    grows by one token per step, so consecutive steps differ by exactly B·kv bytes and 2·B·heads·(qk+v) FLOPs."""
    spec, batch, context = get_model(model), 8, 1000
    wl = decode(model, "TP4EP8", batch, context, steps=3)
    a = attention_shard(spec, 4)
    for step in range(3):
        node = first_layer(wl, "attention", layer=step * spec.num_layers)
        c = context + step
        assert node.flops == 2 * batch * a.params + 2 * batch * c * a.heads * (a.qk_dim + a.v_dim)
        assert node.bytes_moved == a.params * 1 + batch * c * a.kv_cache_bytes_per_token \
            + 2 * batch * spec.hidden_size * 2


def test_routed_experts_read_only_the_experts_hit():
    """Oracle: B = 1 hits k of E experts, so a rank reads k/E of its expert weights; the expectation
    1 − (1 − k/E)^B grows with B to every expert."""
    spec = get_model("deepseek-v4-flash")
    E, k = spec.routed_experts, spec.top_k
    share = E * 3 * spec.comm_dim * spec.expert_ffn_width // 2 // 32  # FP4 weights over TP·EP = 32 ranks
    assert expert_hit_fraction(spec, 1) == Fraction(k, E)
    assert expert_hit_fraction(spec, 2) == 1 - Fraction(E - k, E) ** 2
    one = first_layer(decode("deepseek-v4-flash", "TP4EP8", 1), "routed_experts")
    assert one.bytes_moved == share * k // E
    assert one.flops == Fraction(1 * k, 8) * 6 * spec.comm_dim * spec.expert_ffn_width / 4
    fractions = [expert_hit_fraction(spec, b) for b in (1, 8, 64, 512, 4096)]
    assert fractions == sorted(fractions) and 0 < 1 - fractions[-1] < 1e-40
    big = first_layer(decode("deepseek-v4-flash", "TP4EP8", 100_000), "routed_experts")
    assert big.bytes_moved == share  # beyond EXACT_MISS_BATCH every expert counts as hit


def test_steps_repeat_the_layer_structure():
    """Every step is the model's layers again (layer ids continue), each step's MoE layers are identical
    (the engine's fast-forward needs it), and the graph is one chain."""
    spec = get_model("kimi-k3")  # one leading dense layer
    wl = decode("kimi-k3", "TP4EP8", batch=16, steps=3)
    nodes = wl.graphs[0].nodes
    assert [n.id for n in nodes] == list(range(len(nodes)))
    assert all(n.deps == ((n.id - 1,) if n.id else ()) for n in nodes)
    assert sorted({n.layer for n in nodes}) == list(range(3 * spec.num_layers))
    per_step = len(nodes) // 3
    for step in range(3):
        block = nodes[step * per_step:(step + 1) * per_step]
        assert {n.layer // spec.num_layers for n in block} == {step}
        assert [n.name for n in block] == [n.name for n in nodes[:per_step]]
        moe = [[(n.name, n.flops, n.bytes_moved, n.size_bytes) for n in block if n.layer == layer]
               for layer in range(step * spec.num_layers + spec.first_dense_layers, (step + 1) * spec.num_layers)]
        assert all(layer == moe[0] for layer in moe)
    assert wl.name == "kimi-k3_TP4EP8_decode_B16_C512_S3"


@pytest.mark.parametrize("model", STUDY_MODELS)
def test_a_step_of_batch_t_shares_the_prefill_ffn_and_volumes(model):
    """A decode step with B = T tokens moves the prefill's collective volumes and does its shared and
    dense FFN work; only attention and the routed experts' weight reads differ."""
    spec, layout = get_model(model), ParallelLayout.parse("TP8EP4")
    prefill = generate(spec, layout, 256).graphs[0].nodes
    step = decode(model, "TP8EP4", batch=256).graphs[0].nodes
    assert [n.name for n in prefill] == [n.name for n in step]
    for p, d in zip(prefill, step, strict=True):
        if p.name in ("shared_ffn", "dense_ffn") or p.kind is NodeKind.COLLECTIVE:
            assert p == d
        if p.name == "routed_experts":
            assert p.flops == d.flops and p.bytes_moved > d.bytes_moved


@pytest.mark.parametrize("model", STUDY_MODELS)
@pytest.mark.parametrize("strategy", STUDY_STRATEGIES)
def test_prefill_graphs_ignore_the_phase_default(model, strategy):
    """The default options and an explicit phase=prefill give the same prefill graphs, node by node."""
    spec, layout = get_model(model), ParallelLayout.parse(strategy)
    if spec.routed_experts % layout.ep:
        pytest.skip("strategy does not divide the experts")
    a = generate(spec, layout, 1024)
    b = generate(spec, layout, 1024, WorkloadOptions(phase="prefill"))
    assert a == b and a.name == f"{model}_{strategy}_T1024"


@pytest.mark.parametrize("kwargs,needle", [
    ({"batch": 4}, "field 'batch': applies only with phase=decode"),
    ({"phase": "decode", "decode_steps": 0}, "field 'decode_steps': 0 is not allowed (int in [1, 1024])"),
    ({"phase": "decode", "context_tokens": -1}, "field 'context_tokens'"),
    ({"phase": "chat"}, "field 'phase': 'chat' is not allowed (one of prefill, decode)"),
])
def test_bad_decode_options_are_one_line_errors(kwargs, needle):
    with pytest.raises(MoesimError) as err:
        WorkloadOptions(**kwargs)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_decode_knobs_left_unset_take_their_defaults():
    options = WorkloadOptions(phase="decode", batch=32)
    assert (options.batch, options.context_tokens, options.decode_steps) == (32, 4096, 1)
    assert options == WorkloadOptions(phase="decode", batch=32, context_tokens=4096, decode_steps=1)
