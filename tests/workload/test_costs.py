"""The attention's compute nodes (``workload/costs.py``, ``_attention``): one roofline node in the study's model,
under ``compute_model=measured`` its projections and its core as two nodes, each timed by its own roofline
(research/decode-breakdown.md, "Attention node: projections and core")."""

from __future__ import annotations

import pytest

from moesim.models.catalog import get_model
from moesim.workload.costs import (
    Work,
    as_one,
    attention_nodes,
    attention_shard,
    attention_work,
    decode_attention_nodes,
    decode_attention_work,
    roofline_time_s,
)
from moesim.workload.efficiency import gemm_efficiency, prefill_attention_efficiency
from moesim.workload.graph import Node, NodeKind
from moesim.workload.precision import Precision

V3 = get_model("deepseek-v3")
H800_BF16, H800_BW = 989.5e12, 3.35e12
"""The run's peak (BF16; FP8 GEMMs at twice it) and bandwidth on an H800."""
STACK = dict(dense="fp8", attention="bf16", kv="bf16")
"""DeepSeek's serving precision (benchmarks/bench_deployments.py)."""
MEASURED, ROOFLINE = Precision(**STACK, measured=True), Precision(**STACK)


def time_s(work: Work) -> float:
    node = Node(0, "attention", NodeKind.COMPUTE, flops=work.flops, bytes_moved=work.bytes_moved,
                peak_scale=work.peak_scale, bw_scale=work.bw_scale)
    return roofline_time_s(node, H800_BF16, H800_BW)


def test_decode_projections_are_memory_bound_and_the_core_compute_bound_at_128_rows() -> None:
    """Oracle, DeepSeek-V3 on one H800, 128 sequences of one query over 2000 cached tokens (SGLang's decode
    micro-batch). Projections: Σ N·K weight bytes (FP8) / (3.35 TB/s · η_DeepGEMM(128, N, K)) + the 128
    rows in at the full bandwidth, memory-bound. Core: FlashMLA executes 2·128·2000·128·(576 + 512) FLOPs
    at 660 TFLOPS, compute-bound (its 128·2000·576·2 cache bytes at 3000 GB/s take less)."""
    shard = attention_shard(V3, 1)
    projections, core = decode_attention_nodes(V3, 1, 128, 2000, 1.0, MEASURED)
    memory = (sum(n * k / gemm_efficiency(128, n, k) for n, k in shard.shapes) + 128 * 7168 * 2) / H800_BW
    assert projections.flops / (H800_BF16 * projections.peak_scale) < memory  # memory-bound
    assert time_s(projections) == pytest.approx(memory, abs=1e-9)
    flashmla = 2 * 128 * 2000 * 128 * (576 + 512) / 660e12
    cache = 128 * 2000 * 576 * 2 / 3000e9 + 128 * 7168 * 2 / H800_BW
    assert cache < flashmla  # compute-bound
    assert time_s(core) == pytest.approx(flashmla, abs=1e-9)
    # one roofline over both kernels, max(Σ compute, Σ memory), let the core's compute hide behind the
    # projections' weight reads: the kernels in sequence take 9 µs longer
    projections_compute = projections.flops / (H800_BF16 * projections.peak_scale)
    one = max(projections_compute + flashmla, memory + cache)
    assert time_s(as_one((projections, core))) == pytest.approx(one, abs=1e-9)
    assert time_s(projections) + time_s(core) == pytest.approx(memory + flashmla, abs=2e-9)
    assert memory + flashmla > one + 5e-6


def test_prefill_core_runs_at_flashattention3s_efficiency_for_its_keys() -> None:
    """Oracle: a 4096-token prefill's core, 2·T·T·heads·(qk + v) FLOPs in BF16, takes FLOPs / (989.5 TFLOPS ·
    η_FA3(4096)) = FLOPs / 638 TFLOPS; its projections FLOPs / (2 · 989.5 TFLOPS · η) summed over the GEMMs."""
    shard, t = attention_shard(V3, 1), 4096
    projections, core = attention_nodes(V3, 1, t, 1.0, precision=MEASURED)
    assert core.flops == 2 * t * t * shard.heads * (shard.qk_dim + shard.v_dim)
    assert prefill_attention_efficiency(t) == pytest.approx(638 / 989.5, rel=1e-12)
    assert time_s(core) == pytest.approx(core.flops / 638e12, abs=1e-9)
    gemms = sum(2 * t * n * k / (2 * H800_BF16 * gemm_efficiency(t, n, k)) for n, k in shard.shapes)
    assert time_s(projections) == pytest.approx(gemms, abs=1e-9)


@pytest.mark.parametrize("model", ["deepseek-v3", "qwen3-30b-a3b", "deepseek-v4-flash"])
@pytest.mark.parametrize("tp", [1, 4])
def test_measured_nodes_keep_the_roofline_nodes_flops_and_bytes(model: str, tp: int) -> None:
    """Conservation: the projections and the core hold the FLOPs and bytes of the one roofline node, in prefill
    (T queries over T or more keys) and decode (with and without MTP's two queries per sequence)."""
    spec = get_model(model)
    cases = [(attention_nodes, (spec, tp, 512, 1.0, None)), (attention_nodes, (spec, tp, 300, 1.0, 4096)),
             (decode_attention_nodes, (spec, tp, 64, 2000, 1.0)), (decode_attention_nodes, (spec, tp, 7, 333, 0.5))]
    for fn, args in cases:
        for q in ((1, 2) if fn is decode_attention_nodes else (None,)):
            extra = () if q is None else (q,)
            (one,) = fn(*args, ROOFLINE, *extra)  # type: ignore[operator]
            nodes = fn(*args, MEASURED, *extra)  # type: ignore[operator]
            assert len(nodes) == 2
            assert (sum(n.flops for n in nodes), sum(n.bytes_moved for n in nodes)) == (one.flops, one.bytes_moved)
            assert all(n.flops > 0 and n.bytes_moved > 0 for n in nodes)  # ASTRA-sim skips a node without bytes


def test_roofline_attention_is_one_node_as_the_single_work() -> None:
    """The study's model: one node, the very ``Work`` ``attention_work`` and ``decode_attention_work`` give."""
    assert attention_nodes(V3, 8, 4096, 1.0) == (attention_work(V3, 8, 4096, 1.0),)
    assert decode_attention_nodes(V3, 8, 64, 4096, 1.0, ROOFLINE) == (decode_attention_work(V3, 8, 64, 4096, 1.0,
                                                                                            ROOFLINE),)


def test_as_one_runs_its_nodes_one_after_the_other() -> None:
    """Oracle: peak F / Σ Fᵢ/sᵢ, bandwidth B / Σ Bᵢ/bᵢ; the measured single ``Work`` is the two nodes as one."""
    work = as_one((Work(100, 40, 2.0, 0.5), Work(300, 20, 0.5, 1.0)))
    assert (work.flops, work.bytes_moved) == (400, 60)
    assert work.peak_scale == pytest.approx(400 / (100 / 2.0 + 300 / 0.5), rel=1e-15)
    assert work.bw_scale == pytest.approx(60 / (40 / 0.5 + 20 / 1.0), rel=1e-15)
    nodes = decode_attention_nodes(V3, 1, 64, 4096, 1.0, MEASURED)
    assert decode_attention_work(V3, 1, 64, 4096, 1.0, MEASURED) == as_one(nodes)


def test_a_core_without_keys_leaves_one_node_with_every_byte() -> None:
    """No query–key pairs (no FLOPs in the core): the projections alone, holding the rows in and out."""
    (only,) = attention_nodes(V3, 1, 16, 1.0, 0, MEASURED)
    (one,) = attention_nodes(V3, 1, 16, 1.0, 0, ROOFLINE)
    assert (only.flops, only.bytes_moved) == (one.flops, one.bytes_moved)
