"""Precision per operation class (workload/precision.py) against closed forms.

DeepSeek-V3: hidden = comm_dim = 7168, top-k 8, 256 experts of width 2048, MLA with a 512 + 64 latent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from moesim.errors import MoesimError
from moesim.experiments.inputs import resolved_inputs
from moesim.models.catalog import get_model
from moesim.system.spec import RunSpec
from moesim.workload.chakra import read_et, write_et
from moesim.workload.costs import roofline_time_s
from moesim.workload.generator import generate
from moesim.workload.graph import CollectiveType, Node
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import WorkloadOptions
from moesim.workload.precision import payload_bytes

V3 = "deepseek-v3"
H, K, W, E = 7168, 8, 2048, 256
PEAK, BW = 989.5e12, 3.35e12  # H800 SXM: dense BF16, HBM3


def _layer(strategy: str, tokens: int, **opts: object) -> dict[str, Node]:
    """The nodes of the last MoE layer of rank 0."""
    wl = generate(get_model(V3), ParallelLayout.parse(strategy), tokens, WorkloadOptions(**opts))
    last = max(n.layer for n in wl.graphs[0].nodes)
    return {n.name: n for n in wl.graphs[0].nodes if n.layer == last}


def test_fp8_dispatch_bytes_are_tokens_times_hidden_plus_scales() -> None:
    """Dispatch in FP8: per token row h bytes + h/128 FP32 scales = 7168 + 56·4 = 7392 bytes; the
    all-to-all buffer of a rank is T·k rows over EP. Combine stays BF16: T·k·h·2/EP."""
    tokens, ep = 4096, 8
    nodes = _layer("TP4EP8", tokens, dispatch_dtype="fp8", combine_dtype="bf16")
    assert nodes["ep_dispatch"].size_bytes == tokens * K * (H + H // 128 * 4) // ep
    assert nodes["ep_combine"].size_bytes == tokens * K * H * 2 // ep
    assert payload_bytes(H, "fp8") == 7392
    assert payload_bytes(100, "fp8") == 100 + 4  # a partial block of channels still has its scale


def test_fp8_dispatch_under_skewed_routing_sends_each_row_with_its_scales() -> None:
    """Skewed routing: every (sender, receiver) entry is its token rows × (h + h/128·4) in FP8 dispatch,
    × 2h in BF16 combine, and the rows are the same."""
    fp8 = _layer("TP4EP8", 2048, routing="zipf", dispatch_dtype="fp8")
    bf16 = _layer("TP4EP8", 2048, routing="zipf")
    rows = [b // (2 * H) for b in bf16["ep_dispatch"].pair_bytes]
    assert [r * 2 * H for r in rows] == list(bf16["ep_dispatch"].pair_bytes) and sum(rows) > 0
    assert list(fp8["ep_dispatch"].pair_bytes) == [r * (H + H // 128 * 4) for r in rows]
    assert fp8["ep_combine"].pair_bytes == bf16["ep_combine"].pair_bytes


def test_fp8_expert_gemms_halve_expert_time_when_compute_bound() -> None:
    """Routed experts of T tokens at TP1EP8 (8 GPUs): F = T·k/EP · 6·h·w FLOPs; weights E/EP · 3·h·w at the
    type's width. At T = 65536 the node is compute-bound in both types, so its time is F/peak in BF16 and
    F/(2·peak) in FP8 (whole ns)."""
    tokens, ep = 65536, 8
    flops = tokens * K // ep * 6 * H * W
    times = {}
    for dtype, width in (("bf16", 2), ("fp8", 1)):
        node = _layer("TP1EP8", tokens, expert_dtype=dtype)["routed_experts"]
        assert node.flops == flops and node.bytes_moved == E // ep * 3 * H * W * width
        assert flops / node.bytes_moved > 2 * PEAK / BW  # compute-bound even at the FP8 peak
        times[dtype] = roofline_time_s(node, PEAK, BW)
    assert times["bf16"] == int(flops / PEAK * 1e9) * 1e-9
    assert times["fp8"] == int(flops / (2 * PEAK) * 1e9) * 1e-9
    assert times["fp8"] / times["bf16"] == pytest.approx(0.5, abs=2e-9 / times["bf16"])


def test_mixed_attention_times_projections_and_core_at_their_own_peaks() -> None:
    """Attention with FP8 projections (dense_dtype) and a BF16 core: compute-bound time
    = F_proj/(2·peak) + F_core/peak, and the projection weights read at one byte each."""
    tokens = 8192
    base = _layer("TP8EP1", tokens)["attention"]
    mixed = _layer("TP8EP1", tokens, dense_dtype="fp8", attention_dtype="bf16")["attention"]
    heads = 128 // 8
    core = 2 * tokens * tokens * heads * ((128 + 64) + 128)
    projections = mixed.flops - core
    assert mixed.flops == base.flops and projections % (2 * tokens) == 0
    params = projections // (2 * tokens)
    assert mixed.bytes_moved == base.bytes_moved  # the study's weights are one byte already
    bf16_weights = _layer("TP8EP1", tokens, dense_dtype="bf16")["attention"]
    assert bf16_weights.bytes_moved - mixed.bytes_moved == params
    assert mixed.peak_scale == pytest.approx(mixed.flops / (projections / 2 + core), rel=1e-12)
    expected = projections / (2 * PEAK) + core / PEAK
    assert roofline_time_s(mixed, PEAK, BW) == pytest.approx(expected, abs=1e-9)


def test_fp8_kv_cache_halves_the_cache_read_of_a_decode_step() -> None:
    """Decode: B sequences read a C-token cache of kv_lora + rope = 576 values per token (MLA, not split by
    TP); FP8 reads B·C·576 bytes fewer than BF16, every other byte the same."""
    b, c = 32, 4096
    opts = {"phase": "decode", "batch": b, "context_tokens": c, "decode_steps": 1}
    bf16 = _layer("TP8EP1", 0, kv_dtype="bf16", **opts)["attention"]
    fp8 = _layer("TP8EP1", 0, kv_dtype="fp8", **opts)["attention"]
    unset = _layer("TP8EP1", 0, **opts)["attention"]
    assert bf16.bytes_moved - fp8.bytes_moved == b * c * (512 + 64)
    assert unset.bytes_moved == bf16.bytes_moved and unset.flops == fp8.flops
    assert fp8.peak_scale == unset.peak_scale == 1.0  # the cache type changes bytes, not the peak


def test_unset_precision_leaves_graphs_and_keys_as_they_were() -> None:
    """No precision option: every node at the run's peak and the study's widths (V_EP = T·h·k·2/EP), and the
    run's key holds no precision field; a set one enters the key."""
    tokens, ep = 4096, 8
    nodes = _layer("TP4EP8", tokens)
    assert all(n.peak_scale == 1.0 for n in nodes.values())
    assert nodes["ep_dispatch"].size_bytes == nodes["ep_combine"].size_bytes == tokens * H * K * 2 // ep
    assert nodes["routed_experts"].bytes_moved == E * 3 * H * W // 2 // 32  # FP4 experts, 32 ranks
    spec = RunSpec(V3, "hgx-h800:4", "TP4EP8", "ring_direct", "ib_cc0", "flow", ())
    keyed = resolved_inputs(spec)["workload_options"]
    assert not any(k.endswith("_dtype") for k in keyed)
    fp8 = RunSpec(V3, "hgx-h800:4", "TP4EP8", "ring_direct", "ib_cc0", "flow", (("dispatch_dtype", "fp8"),))
    assert resolved_inputs(fp8)["workload_options"]["dispatch_dtype"] == "fp8"


@pytest.mark.parametrize(("opts", "needle"), [
    ({"expert_dtype": "fp4"}, "field 'expert_dtype': 'fp4' is not allowed (one of bf16, fp8)"),
    ({"expert_dtype": "fp8", "expert_bytes_per_param": 0.25},
     "field 'expert_bytes_per_param': expert_dtype=fp8 sets the weight width"),
    ({"dense_dtype": "bf16", "weight_bytes_per_param": 2.0},
     "field 'weight_bytes_per_param': dense_dtype=bf16 sets the weight width"),
])
def test_bad_precision_options_are_one_line_errors(opts: dict, needle: str) -> None:
    with pytest.raises(MoesimError) as exc:
        WorkloadOptions(**opts)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_chakra_round_trip_keeps_each_nodes_peak(tmp_path: Path) -> None:
    wl = generate(get_model("qwen3-30b-a3b"), ParallelLayout.parse("TP2EP4"), 256,
                  WorkloadOptions(dense_dtype="fp8", expert_dtype="fp8", dispatch_dtype="fp8"))
    write_et(wl, tmp_path, "wl")
    back = read_et(tmp_path)
    assert back == wl
    assert {n.peak_scale for n in back.graphs[0].nodes if n.name == "routed_experts"} == {2.0}
    a2a = [n for n in back.graphs[0].nodes if n.collective is CollectiveType.ALL_TO_ALL]
    assert a2a and all(n.size_bytes for n in a2a)
