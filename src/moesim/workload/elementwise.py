"""The memory-bound kernels of a transformer layer that its GEMM and attention nodes leave out, and the output
head and sampling of a pass: timed under ``compute_model=measured`` only, as the bytes they read and write at
the GPU's memory bandwidth (its data sheet's; a node of bytes and no FLOPs, ``costs.roofline_time_s``). The
roofline default has none of them (docs/workload.md, "Elementwise kernels").

Every byte count follows the operation's definition; nothing is fitted. Which kernels a DeepSeek-V3 layer runs
is its reference implementation (github.com/deepseek-ai/DeepSeek-V3, inference/model.py: ``Block``: RMSNorm
before attention and before the FFN; ``MLA``: RMSNorm of the q and kv latents, rotary embedding of the rope
part of q and k; ``MLP``/``Expert``: w2(silu(w1 x) · w3 x); ``Transformer``: a final RMSNorm, then the head on
each sequence's last token). Serving stacks fuse the residual add into the norm (vLLM/SGLang
``fused_add_rmsnorm``: it reads x and the residual and writes both). FP8 GEMM inputs are cast per token in
1×128-channel groups with one FP32 scale each (DeepSeek-V3 technical report §3.3.2; DeepGEMM's input layout),
written as ``precision.payload_bytes``. The routed experts' grouped GEMM takes DeepGEMM's contiguous layout in
prefill (each expert's rows gathered: a permute before and an unpermute after) and its masked layout in
decode, which DeepEP's low-latency dispatch writes directly and its combine reads, casting to FP8 on the fly
(DeepGEMM README, "grouped GEMMs (masked layout)"; DeepEP README, low-latency kernels): so in decode neither
a permute nor a cast before the dispatch. Activations are the model's ``bytes_per_activation`` wide (BF16).
"""

from __future__ import annotations

from fractions import Fraction

from moesim.models.spec import ModelSpec
from moesim.workload.costs import attention_shard
from moesim.workload.precision import Precision, payload_bytes

Rows = Fraction | int


def rms_norm_bytes(rows: Rows, width: int, act: int, residual: bool = False) -> Fraction:
    """RMSNorm of ``rows`` × ``width``: reads x, writes y, reads its ``width`` weights; with the residual add
    fused (``fused_add_rmsnorm``) it also reads the residual and writes the sum back."""
    return Fraction(rows) * width * act * (4 if residual else 2) + width * act


def fp8_cast_bytes(rows: Rows, width: int, act: int) -> Fraction:
    """A BF16 → FP8 cast of ``rows`` × ``width`` activations: reads them, writes ``width`` bytes and one FP32
    scale per 128 channels per row (``payload_bytes(width, "fp8")``)."""
    return Fraction(rows) * (width * act + payload_bytes(width, "fp8"))


def rotary_bytes(rows: Rows, heads: int, rope_dim: int, act: int) -> Fraction:
    """Rotary embedding of ``heads`` × ``rope_dim`` channels per row: reads and writes them."""
    return Fraction(rows) * heads * rope_dim * act * 2


def silu_mul_bytes(rows: Rows, width: int, act: int) -> Fraction:
    """silu(gate) · up of ``rows`` × ``width``: reads gate and up (2·width), writes width."""
    return Fraction(rows) * width * act * 3


def attention_bytes(model: ModelSpec, tp: int, tokens: Rows, precision: Precision) -> Fraction:
    """Before and inside one TP shard's attention over ``tokens`` queries: the input norm (residual fused),
    the FP8 casts of each projection's input when the dense GEMMs are FP8 (MLA: x, the q and kv latents, the
    heads' values before O; GQA: x and the heads' values), MLA's q and kv latent norms, and the rotary
    embedding (MLA: the rope part of every q head and of the shared k; GQA: every q and kv head)."""
    act, hidden, att = model.bytes_per_activation, model.hidden_size, model.attention
    shard = attention_shard(model, tp)
    out = rms_norm_bytes(tokens, hidden, act, residual=True)
    casts = [hidden, shard.heads * shard.v_dim]
    if att.is_mla:
        latents = [w for w in (att.q_lora_rank, att.kv_lora_rank) if w]
        out += sum((rms_norm_bytes(tokens, w, act) for w in latents), Fraction(0))
        casts += latents
        out += rotary_bytes(tokens, shard.heads + 1, att.qk_rope_head_dim or 0, act)
    else:
        kv_heads = -(-att.num_kv_heads // tp)
        out += rotary_bytes(tokens, shard.heads + kv_heads, att.head_dim, act)
    if precision.dense == "fp8":
        out += sum((fp8_cast_bytes(tokens, w, act) for w in casts), Fraction(0))
    return out


def ffn_input_bytes(model: ModelSpec, tokens: Rows, precision: Precision, prefill: bool) -> Fraction:
    """Before the FFN of ``tokens`` rows: the post-attention norm (residual fused) and the FP8 casts of its
    output for FP8 dense GEMMs (router, shared experts, dense FFN) and, in prefill, for an FP8 dispatch (one
    cast when both take the same ``hidden``-wide rows)."""
    act, hidden, h = model.bytes_per_activation, model.hidden_size, model.comm_dim
    out = rms_norm_bytes(tokens, hidden, act, residual=True)
    widths = set()
    if precision.dense == "fp8":
        widths.add(hidden)
    if prefill and precision.dispatch == "fp8":
        widths.add(h)
    return out + sum((fp8_cast_bytes(tokens, w, act) for w in sorted(widths)), Fraction(0))


def gated_ffn_bytes(model: ModelSpec, rows: Rows, width: int, dtype: str | None) -> Fraction:
    """Between a gated FFN's GEMMs on ``rows`` rows of ``width`` (per rank): silu(gate) · up, then the FP8
    cast of its output when the down GEMM is FP8 (``dtype``)."""
    act = model.bytes_per_activation
    out = silu_mul_bytes(rows, width, act)
    return out + fp8_cast_bytes(rows, width, act) if dtype == "fp8" else out


def expert_bytes(model: ModelSpec, tp: int, rows: Rows, precision: Precision, prefill: bool,
                 dispatch_row: int) -> Fraction:
    """Around one rank's grouped expert GEMMs of ``rows`` token–expert rows (expert width over TP): silu · up
    and the down GEMM's input cast (``gated_ffn_bytes``); in prefill (contiguous layout) the permute of the
    received rows into expert order (reads and writes ``dispatch_row`` bytes each) and the unpermute of the
    outputs back to token order (reads and writes ``comm_dim`` activations each)."""
    w = max(model.expert_ffn_width // tp, 1)
    out = gated_ffn_bytes(model, rows, w, precision.expert)
    if prefill:
        out += Fraction(rows) * 2 * (dispatch_row + model.comm_dim * model.bytes_per_activation)
    return out


def head_bytes(model: ModelSpec, tokens: Rows, sampled: Rows) -> Fraction:
    """The end of a pass on one rank: the final norm of its ``tokens`` rows (residual fused) and the sampling
    of its ``sampled`` rows, one read of their BF16 logits over the whole vocabulary (a fused sampling kernel;
    the head's TP shards gather their logits first)."""
    act = model.bytes_per_activation
    return rms_norm_bytes(tokens, model.hidden_size, act, residual=True) + Fraction(sampled) * model.vocab_size * act
