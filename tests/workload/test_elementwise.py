"""Memory-bound kernels under ``compute_model=measured`` (``elementwise.py``): one DeepSeek-V3 layer's bytes
against the closed form from each operation's definition; the roofline default has none of them."""

from __future__ import annotations

from moesim.models.catalog import get_model
from moesim.workload.generator import generate
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import WorkloadOptions

V3 = get_model("deepseek-v3")
FP8 = {"expert_dtype": "fp8", "dense_dtype": "fp8", "attention_dtype": "bf16", "kv_dtype": "bf16",
       "dispatch_dtype": "fp8", "combine_dtype": "bf16"}
ELEMENTWISE = {"attention_elementwise", "ffn_input_elementwise", "expert_elementwise", "shared_ffn_elementwise",
               "dense_ffn_elementwise", "output_head", "head_elementwise"}


def cast(rows: int, width: int) -> int:
    """BF16 read, FP8 values + one FP32 scale per 128 channels written."""
    return rows * (2 * width + width + -(-width // 128) * 4)


def _nodes(wl, layer):
    return {n.name: n for n in wl.graphs[0].nodes if n.layer == layer}


def test_one_deepseek_v3_layer_elementwise_bytes_are_the_closed_form():
    """DP32EP32 prefill, 2 prompts of 1024 tokens per GPU (T = 2048 per rank), FP8 GEMMs and dispatch.
    Attention: fused add+RMSNorm 4·T·7168·2 + 7168·2; q/kv latent RMSNorms 2·T·1536·2 + 1536·2, 2·T·512·2 + 512·2;
    rotary on 128 q heads + the shared k, 64 channels: T·129·64·2·2; FP8 casts of x (7168), the q and kv
    latents (1536, 512) and the heads' values (128·128). FFN input: fused add+RMSNorm + one cast of 7168.
    Experts: R = 8T rows; silu·up 3·R·2048·2, cast R·(2048·3 + 64), permute R·2·7392 (the FP8 row with
    scales), unpermute R·2·7168·2. Shared expert: 3·T·2048·2 + cast. Last layer: the final norm and the
    sampling of 2 rows over 129,280 BF16 logits; the head GEMM 2·2·129280·7168 FLOPs."""
    t, h = 2048, 7168
    opts = WorkloadOptions(compute_model="measured", prompt_lengths=(1024,), prompt_counts=(2,), **FP8)
    wl = generate(V3, ParallelLayout.parse("DP32EP32"), 1, opts)
    layer = _nodes(wl, V3.first_dense_layers)
    norm = 4 * t * h * 2 + h * 2
    attention = (norm + 2 * t * 1536 * 2 + 1536 * 2 + 2 * t * 512 * 2 + 512 * 2 + t * 129 * 64 * 2 * 2
                 + cast(t, h) + cast(t, 1536) + cast(t, 512) + cast(t, 128 * 128))
    rows = 8 * t
    experts = 3 * rows * 2048 * 2 + cast(rows, 2048) + rows * 2 * (h + 56 * 4) + rows * 2 * h * 2
    expected = {"attention_elementwise": attention, "ffn_input_elementwise": norm + cast(t, h),
                "expert_elementwise": experts, "shared_ffn_elementwise": 3 * t * 2048 * 2 + cast(t, 2048)}
    assert {n: layer[n].bytes_moved for n in expected} == expected
    assert all(layer[n].flops == 0 for n in expected)
    last = _nodes(wl, V3.num_layers - 1)
    assert last["head_elementwise"].bytes_moved == norm + 2 * 129_280 * 2
    assert last["output_head"].flops == 2 * 2 * 129_280 * h
    assert "output_head" not in layer
    dense = _nodes(wl, 0)
    assert dense["dense_ffn_elementwise"].bytes_moved == 3 * t * 18432 * 2 + cast(t, 18432)


def test_decode_has_no_permute_and_casts_in_the_dispatch():
    """Decode (DeepEP low-latency, DeepGEMM masked layout): the experts' bytes are silu·up and the down cast
    only, and the FFN input is the norm plus the dense GEMMs' cast; the head samples every sequence."""
    b = 64
    opts = WorkloadOptions(compute_model="measured", phase="decode", batch=b * 32, context_tokens=1000, **FP8)
    wl = generate(V3, ParallelLayout.parse("DP32EP32"), 1, opts)
    layer = _nodes(wl, V3.first_dense_layers)
    rows = 8 * b
    assert layer["expert_elementwise"].bytes_moved == 3 * rows * 2048 * 2 + cast(rows, 2048)
    assert layer["ffn_input_elementwise"].bytes_moved == 4 * b * 7168 * 2 + 7168 * 2 + cast(b, 7168)
    assert _nodes(wl, V3.num_layers - 1)["output_head"].flops == 2 * b * 129_280 * 7168


def test_the_roofline_default_has_none():
    """compute_model=roofline (the default): no elementwise node, the graphs as they were."""
    for opts in (WorkloadOptions(**FP8), WorkloadOptions(phase="decode", batch=256)):
        wl = generate(V3, ParallelLayout.parse("DP32EP32"), 4096, opts)
        assert not {n.name for n in wl.graphs[0].nodes} & ELEMENTWISE
