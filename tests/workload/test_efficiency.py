"""Achievable compute (``workload/efficiency.py``, ``compute_model=measured``): the cited tables as typed in,
the interpolation rule, nodes timed at roofline / efficiency, and the default roofline left as it was."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from moesim.experiments.inputs import resolved_inputs
from moesim.models.catalog import get_model
from moesim.system.spec import RunSpec
from moesim.workload.chakra import read_et, write_et
from moesim.workload.costs import (
    Work,
    attention_shard,
    decode_attention_work,
    measured,
    roofline_time_s,
    routed_expert_work,
)
from moesim.workload.efficiency import (
    DECODE_ATTENTION_COMPUTE,
    DECODE_ATTENTION_MEMORY,
    DEEPGEMM_DENSE,
    DEEPGEMM_GROUPED,
    gemm_efficiency,
    grouped_gemm_efficiency,
    prefill_attention_efficiency,
)
from moesim.workload.generator import generate
from moesim.workload.graph import Node, NodeKind
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import WorkloadOptions
from moesim.workload.precision import Precision

H800_FP8, H800_BW = 1979e12, 3.35e12


@pytest.mark.parametrize("row", DEEPGEMM_DENSE + DEEPGEMM_GROUPED, ids=lambda r: f"{r.groups}x{r.m}x{r.n}x{r.k}")
def test_deepgemm_rows_reproduce_their_own_bandwidth_column(row) -> None:
    """The README's GB/s = (A + B in FP8, D in BF16) / (FLOPs / TFLOPS): a mistyped figure breaks this."""
    gbps = row.groups * (row.m * row.k + row.n * row.k + 2 * row.m * row.n) / (row.flops / (row.tflops * 1e12)) / 1e9
    assert gbps == pytest.approx(row.gbps, rel=3e-3)
    assert 0 < row.efficiency <= 1


def test_efficiency_is_roofline_over_measured_time() -> None:
    """Oracle, DeepGEMM 4096 × 7168 × 16384 at 1426 TFLOPS: compute-bound, η = 1426 / 1979."""
    assert gemm_efficiency(4096, 7168, 16384) == pytest.approx(1426 / 1979, rel=1e-12)
    # 64 × 2112 × 7168 at 206 TFLOPS is memory-bound: η = (bytes / 3.35 TB/s) / (FLOPs / 206 TFLOPS)
    flops, moved = 2 * 64 * 2112 * 7168, 64 * 7168 + 2112 * 7168 + 2 * 64 * 2112
    assert gemm_efficiency(64, 2112, 7168) == pytest.approx((moved / H800_BW) / (flops / 206e12), rel=1e-12)


def test_interpolation_is_linear_in_log2_and_held_at_the_ends() -> None:
    at64, at128, at4096 = (gemm_efficiency(m, 7168, 2048) for m in (64, 128, 4096))
    assert gemm_efficiency(math.sqrt(64 * 128), 7168, 2048) == pytest.approx((at64 + at128) / 2, rel=1e-12)
    assert gemm_efficiency(1024, 7168, 2048) == pytest.approx(at128 + (3 / 5) * (at4096 - at128), rel=1e-12)
    assert gemm_efficiency(1, 7168, 2048) == at64 and gemm_efficiency(10**6, 7168, 2048) == at4096
    # a shape not measured takes the nearest measured (N, K) in log2 distance
    assert gemm_efficiency(4096, 7000, 15000) == gemm_efficiency(4096, 7168, 16384)
    # grouped: tokens per expert, between the masked (256, 512, 1024) and contiguous (4096, 8192) rows
    flops, moved = 4 * 2 * 256 * 4096 * 7168, 4 * (256 * 7168 + 4096 * 7168 + 2 * 256 * 4096)  # 4 groups of 256
    assert grouped_gemm_efficiency(256, 4096, 7168) == pytest.approx((moved / H800_BW) / (flops / 932e12), rel=1e-12)
    at1024, at4096 = grouped_gemm_efficiency(1024, 4096, 7168), grouped_gemm_efficiency(4096, 4096, 7168)
    assert grouped_gemm_efficiency(2048, 4096, 7168) == pytest.approx((at1024 + at4096) / 2, rel=1e-12)
    assert prefill_attention_efficiency(2048) == pytest.approx(625 / 989.5, rel=1e-12)
    assert prefill_attention_efficiency(100) == pytest.approx(467 / 989.5, rel=1e-12)
    assert DECODE_ATTENTION_COMPUTE == pytest.approx(660 / 989.5) and DECODE_ATTENTION_MEMORY == pytest.approx(3 / 3.35)


def test_measured_parts_run_one_after_the_other() -> None:
    """Oracle: peak F / Σ Fᵢ/(rᵢ·ηᵢ), bandwidth B / Σ Bⱼ/ηⱼ."""
    work = measured(Work(300, 60), [(100, 1, 0.5), (200, 2, 0.8)], [(40, 0.5), (20, 1.0)])
    assert work.peak_scale == pytest.approx(300 / (100 / 0.5 + 200 / 1.6), rel=1e-15)
    assert work.bw_scale == pytest.approx(60 / (40 / 0.5 + 20), rel=1e-15)
    assert (work.flops, work.bytes_moved) == (300, 60)


@pytest.mark.parametrize("queries", [1, 2])
def test_mla_decode_core_runs_at_flashmla_tflops_over_the_latent(queries: int) -> None:
    """Oracle (FlashMLA README, MQA mode; its deep dive's FLOP count): the dense MLA decoding kernel executes
    2·h_q·s_q·s_k·(d_k + d_v) FLOPs, d_k = kv_lora + rope = 576 and d_v = kv_lora = 512 for DeepSeek-V3, at
    660 TFLOPS. So 1024 more cached tokens add 2·B·q·1024·128·1088 / 660 TFLOPS to a step's attention compute
    (its projections do not depend on the context), while its FLOPs stay the counted 2·B·q·1024·128·(192 + 128)."""
    model, batch = get_model("deepseek-v3"), 64
    prec = Precision(dense="fp8", attention="bf16", kv="bf16", measured=True)
    small, large = (decode_attention_work(model, 1, batch, c, 1.0, prec, queries) for c in (4096, 5120))

    def compute_s(work: Work) -> float:
        return work.flops / (989.5e12 * work.peak_scale)

    expected = 2 * batch * queries * 1024 * 128 * (576 + 512) / 660e12
    assert compute_s(large) - compute_s(small) == pytest.approx(expected, rel=1e-9)
    assert large.flops - small.flops == 2 * batch * queries * 1024 * 128 * (192 + 128)
    # the roofline model (the study's) keeps its counted FLOPs at the class's peak
    plain = Precision(dense="fp8", attention="bf16", kv="bf16")
    small, large = (decode_attention_work(model, 1, batch, c, 1.0, plain, queries) for c in (4096, 5120))
    assert compute_s(large) - compute_s(small) == pytest.approx(2 * batch * queries * 1024 * 128 * 320 / 989.5e12,
                                                                rel=1e-9)


def test_gqa_decode_core_keeps_flashmla_fraction() -> None:
    """A GQA model has no latent: its counted score and value FLOPs are the kernel's, at 660 of 989.5 TFLOPS."""
    model = get_model("deepseek-v4-flash")
    assert not model.attention.is_mla
    prec = Precision(attention="bf16", kv="bf16", measured=True)
    a = attention_shard(model, 1)
    small, large = (decode_attention_work(model, 1, 16, c, 1.0, prec) for c in (4096, 5120))
    expected = 2 * 16 * 1024 * a.heads * (a.qk_dim + a.v_dim) / 660e12
    assert (large.flops / (989.5e12 * large.peak_scale) - small.flops / (989.5e12 * small.peak_scale)
            == pytest.approx(expected, rel=1e-9))
    assert DECODE_ATTENTION_COMPUTE == pytest.approx(660 / 989.5)


def test_a_compute_bound_expert_node_takes_its_roofline_time_over_its_efficiency() -> None:
    """DeepSeek-V3, TP1EP8, FP8 experts, 4096 tokens per expert: gate/up (N 4096, K 7168) and down (N 7168,
    K 2048) at DeepGEMM's contiguous-layout figures for 4096 rows, 1346 and 1214 TFLOPS."""
    model, layout = get_model("deepseek-v3"), ParallelLayout(1, 8)
    tokens = 4096 * model.routed_experts // model.top_k
    prec = Precision(expert="fp8", measured=True)
    work = routed_expert_work(model, layout, tokens, 0.5, prec)
    node = Node(0, "routed_experts", NodeKind.COMPUTE, flops=work.flops, bytes_moved=work.bytes_moved,
                peak_scale=work.peak_scale, bw_scale=work.bw_scale)
    up, down = (next(r for r in DEEPGEMM_GROUPED if (r.m, r.n) == (4096, n)) for n in (4096, 7168))
    expected = work.flops * (2 / 3 / up.tflops + 1 / 3 / down.tflops) / 1e12  # both compute-bound on the H800
    assert roofline_time_s(node, H800_FP8 / 2, H800_BW) == pytest.approx(expected, rel=1e-6)
    plain = routed_expert_work(model, layout, tokens, 0.5, Precision(expert="fp8"))
    assert (plain.flops, plain.bytes_moved) == (work.flops, work.bytes_moved)


def test_projection_shapes_sum_to_the_attention_parameters() -> None:
    for key in ("deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b", "kimi-k3", "glm-5.3"):
        for tp in (1, 2, 8):
            shard = attention_shard(get_model(key), tp)
            assert sum(n * k for n, k in shard.shapes) == shard.params, (key, tp)


def _nodes(**options: object):
    opts = WorkloadOptions(expert_dtype="fp8", dense_dtype="fp8", **options)  # type: ignore[arg-type]
    return generate(get_model("deepseek-v3"), ParallelLayout(4, 8), 2048, opts).graphs[0].nodes


@pytest.mark.parametrize("phase", [{}, {"phase": "decode", "batch": 64, "context_tokens": 4096}])
def test_measured_nodes_never_beat_their_roofline(phase: dict) -> None:
    roof = _nodes(**phase)
    meas: list[list[Node]] = []  # less the kernels only it times (elementwise.py); its attention is two nodes
    for n in _nodes(compute_model="measured", **phase):
        if meas and meas[-1][-1].name == "attention_projections":
            meas[-1].append(n)
        elif not (n.name.endswith("_elementwise") or n.name == "output_head"):
            meas.append([n])
    assert len(roof) == len(meas)
    slower = 0
    for a, b in zip(roof, meas, strict=True):
        assert (a.name, a.flops, a.bytes_moved) == (b[-1].name, sum(n.flops for n in b), sum(n.bytes_moved for n in b))
        if a.kind is NodeKind.COMPUTE:
            assert a.bw_scale == 1.0
            t_roof, t_meas = roofline_time_s(a, 989.5e12, 3.35e12), sum(roofline_time_s(n, 989.5e12, 3.35e12) for n in b)
            assert t_meas >= t_roof
            slower += t_meas > 1.2 * t_roof
    assert slower  # and some much slower: every efficiency here is below 0.9


def test_default_roofline_keeps_the_run_key_and_chakra_keeps_bw_scale(tmp_path: Path) -> None:
    spec = RunSpec("qwen3-30b-a3b", "hgx-h800:1", "TP1EP8")
    assert "compute_model" not in resolved_inputs(spec)["workload_options"]
    measured_spec = RunSpec("qwen3-30b-a3b", "hgx-h800:1", "TP1EP8", overrides=(("compute_model", "measured"),))
    assert resolved_inputs(measured_spec)["workload_options"]["compute_model"] == "measured"
    wl = generate(get_model("qwen3-30b-a3b"), ParallelLayout(1, 8), 512, WorkloadOptions(compute_model="measured"))
    write_et(wl, tmp_path, "m")
    assert read_et(tmp_path) == wl
    assert any(n.bw_scale != 1.0 for n in wl.graphs[0].nodes)
