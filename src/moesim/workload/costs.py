"""What each node of a layer costs: collective volumes (docs/study.md §3), per-rank compute work (FLOPs
and bytes moved; the formulas are in docs/workload.md) and the one roofline that times a compute node
(the engine's and the summary's). With ``compute_model=measured`` (``Precision.measured``) each node's
peak and bandwidth are further taken at its kernels' measured efficiency (``efficiency.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from moesim.models.spec import ModelSpec
from moesim.workload.efficiency import (
    DECODE_ATTENTION_MEMORY,
    decode_attention_core_efficiency,
    gemm_efficiency,
    grouped_gemm_efficiency,
    prefill_attention_efficiency,
)
from moesim.workload.graph import Node
from moesim.workload.layout import ParallelLayout
from moesim.workload.precision import Precision, peak_scale

STUDY_PRECISION = Precision()
"""Every class unset: the study's model (``precision.py``)."""

# ----------------------------------------------------------------------------------------------
# Communication volumes (docs/study.md §3) and proxies (section 2)


def tp_allreduce_bytes(model: ModelSpec, tokens: int) -> int:
    """V_TP = T · h · 2: the data size of one TP all-reduce."""
    return tokens * model.comm_dim * model.bytes_per_activation


def ep_alltoall_bytes(model: ModelSpec, layout: ParallelLayout, tokens: int, row_bytes: int | None = None) -> int:
    """V_EP = T · h · k · 2 / EP: one rank's buffer for one EP dispatch or combine (floored); with
    ``row_bytes`` (a token's payload, ``Precision.row_bytes``) T · k · row_bytes / EP."""
    if row_bytes is None:
        row_bytes = model.comm_dim * model.bytes_per_activation
    return tokens * row_bytes * model.top_k // layout.ep


def comm_proxies(model: ModelSpec) -> tuple[int, int]:
    """(TP proxy, EP proxy) = (h × layers, h × top-k × MoE layers), docs/study.md §2."""
    return model.tp_proxy, model.ep_proxy


# ----------------------------------------------------------------------------------------------
# Compute work: (FLOPs, bytes moved) per rank. Exact rational arithmetic, floored once at the end.


@dataclass(frozen=True)
class Work:
    """FLOPs and bytes of one compute node on one rank, its peak over the run's ``peak_flops``
    (``precision.peak_scale``; 1 = the run's peak) and its bandwidth over ``mem_bw_bytes_per_s``
    (``efficiency.py``; 1 = the run's)."""

    flops: int
    bytes_moved: int
    peak_scale: float = 1.0
    bw_scale: float = 1.0

    @property
    def empty(self) -> bool:
        """No arithmetic (e.g. a zero-width FFN): the node is left out, its activation traffic too."""
        return self.flops == 0


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def work_of(flops: Fraction | int, bytes_moved: Fraction | int, scale: Fraction | int = 1) -> Work:
    return Work(int(flops), int(bytes_moved), float(scale))


Part = tuple[Fraction | int, float, float]
"""(FLOPs or bytes, rate over the run's peak, efficiency) of one kernel of a node."""


def measured(work: Work, compute: list[Part], memory: list[tuple[Fraction | int, float]]) -> Work:
    """``work`` at its kernels' measured efficiencies (``efficiency.py``): its parts run one after the other,
    so its peak is F / Σ Fᵢ/(rᵢ·ηᵢ) and its bandwidth B / Σ Bⱼ/ηⱼ of the run's; the FLOPs and bytes stay."""
    flops = sum(float(f) for f, _, _ in compute)
    moved = sum(float(b) for b, _ in memory)
    scale = flops / sum(float(f) / (r * e) for f, r, e in compute) if flops else work.peak_scale
    bw = moved / sum(float(b) / e for b, e in memory) if moved else 1.0
    return Work(work.flops, work.bytes_moved, scale, bw)


def _gemms(tokens: Fraction | int, shapes: list[tuple[int, int]], rate: float, weight_bytes: Fraction,
           ) -> tuple[list[Part], list[tuple[Fraction | int, float]]]:
    """Dense GEMMs of ``tokens`` rows, one per (N, K) of ``shapes``: their (FLOPs, rate, efficiency) and
    (weight bytes, efficiency) parts at DeepGEMM's measured efficiency for the shape."""
    effs = [gemm_efficiency(float(tokens), n, k) for n, k in shapes]
    return ([(2 * tokens * n * k, rate, e) for (n, k), e in zip(shapes, effs, strict=True)],
            [(n * k * weight_bytes, e) for (n, k), e in zip(shapes, effs, strict=True)])


@dataclass(frozen=True)
class AttentionShard:
    """One TP shard's attention: its projection parameters, heads, score and value widths, and the
    KV-cache bytes it keeps per token per layer."""

    params: int
    heads: int
    qk_dim: int
    v_dim: int
    kv_cache_bytes_per_token: int
    shapes: tuple[tuple[int, int], ...] = ()
    """Each projection's (outputs N, inputs K); ``params`` is their Σ N·K."""
    decode_width: int = 0
    """d_k + d_v per head of the decode kernel: MLA decodes over its cached latent ((kv_lora + rope) +
    kv_lora, FlashMLA's MQA mode); 0 = ``qk_dim + v_dim`` (GQA)."""

    @property
    def decode_core_width(self) -> int:
        return self.decode_width or self.qk_dim + self.v_dim


def attention_shard(model: ModelSpec, tp: int, kv_bytes: int | None = None) -> AttentionShard:
    """Heads split over TP (ceil), projections column/row-split.

    GQA: Q (hidden → heads·d), K and V (hidden → kv_heads·d each; KV heads are replicated when
    fewer than TP), O (heads·d → hidden); the shard caches K and V of its KV heads,
    2·⌈kv_heads/TP⌉·d values per token. MLA: q down (hidden → q_lora, replicated) and q up
    (q_lora → heads·qk_dim), kv down (hidden → kv_lora + rope, replicated), kv up (kv_lora →
    heads·(nope + v)), O (heads·v → hidden); the shard caches the whole compressed latent,
    kv_lora + rope values per token (it is shared by all heads, so TP does not split it).
    Cached values take ``kv_bytes`` bytes each (default the model's ``bytes_per_activation``).
    """
    att = model.attention
    hidden = model.hidden_size
    heads = _ceil_div(att.num_heads, tp)
    if att.is_mla:
        nope = att.qk_nope_head_dim if att.qk_nope_head_dim is not None else att.head_dim
        rope = att.qk_rope_head_dim or 0
        v_dim = att.v_head_dim if att.v_head_dim is not None else att.head_dim
        qk_dim = nope + rope
        kv_lora = att.kv_lora_rank or 0
        if att.q_lora_rank:
            shapes = [(att.q_lora_rank, hidden), (heads * qk_dim, att.q_lora_rank)]
        else:
            shapes = [(heads * qk_dim, hidden)]
        shapes += [(kv_lora + rope, hidden), (heads * (nope + v_dim), kv_lora), (hidden, heads * v_dim)]
        cached = kv_lora + rope
    else:
        qk_dim = v_dim = att.head_dim
        kv_heads = _ceil_div(att.num_kv_heads, tp)
        shapes = [(heads * qk_dim, hidden), (2 * kv_heads * qk_dim, hidden), (hidden, heads * v_dim)]  # Q, KV, O
        cached = 2 * kv_heads * att.head_dim
    params = sum(n * k for n, k in shapes)
    return AttentionShard(params, heads, qk_dim, v_dim, cached * (model.bytes_per_activation if kv_bytes is None
                                                                 else kv_bytes), tuple(shapes),
                          cached + att.kv_lora_rank if att.is_mla and att.kv_lora_rank else 0)


def _attention(model: ModelSpec, tp: int, queries: int, keys: int, weight_bytes_per_param: float,
               precision: Precision, cached_tokens: int) -> tuple[Work, ...]:
    """Attention of one TP shard as compute nodes: the projections are dense GEMMs, the score and value
    products the attention core, each at its class's peak and weight width; ``cached_tokens`` tokens of KV
    cache read. On the roofline one node holds both. Measured (``compute_model=measured``): the kernels run
    one after the other (DeepSeek's decode schedule: ATTN-0 = MLA projections, ATTN-1 = core attention), so
    they are two nodes, each timed by its own roofline: (projections, core). The projections are DeepGEMM
    GEMMs reading the weights and the rows in; the core reads the KV cache (FlashMLA's efficiencies in a
    decode step, an MLA core as FlashMLA executes it over the latent, ``decode_attention_core_efficiency``;
    else FlashAttention-3's) and writes the rows out. A core without FLOPs leaves the projections alone
    with all the bytes."""
    a = attention_shard(model, tp, precision.kv_bytes(model.bytes_per_activation))
    projections = 2 * queries * a.params
    core = 2 * queries * keys * a.heads * (a.qk_dim + a.v_dim)
    act = 2 * queries * model.hidden_size * model.bytes_per_activation
    wb = precision.weight_bytes(precision.dense, weight_bytes_per_param)
    weights = a.params * wb
    cache = cached_tokens * a.kv_cache_bytes_per_token
    dense, attention = precision.rate(precision.dense), precision.rate(precision.attention)
    if not precision.measured:
        return (work_of(projections + core, weights + cache + act, peak_scale([(projections, dense),
                                                                                (core, attention)])),)
    compute, memory = _gemms(queries, list(a.shapes), dense, wb)
    if not core:
        return (measured(work_of(projections, weights + cache + act, dense), compute,
                         [*memory, (cache, DECODE_ATTENTION_MEMORY), (act, 1.0)]),)
    rows = act // 2  # in to the projections, out of the core
    core_eff = (decode_attention_core_efficiency(a.qk_dim + a.v_dim, a.decode_core_width) if cached_tokens
                else prefill_attention_efficiency(keys))
    return (measured(work_of(projections, weights + rows, dense), compute, [*memory, (rows, 1.0)]),
            measured(work_of(core, cache + rows, attention), [(core, attention, core_eff)],
                     [(cache, DECODE_ATTENTION_MEMORY), (rows, 1.0)]))


def as_one(nodes: tuple[Work, ...]) -> Work:
    """Compute nodes run one after the other as one ``Work``: their FLOPs and bytes summed, its peak
    F / Σ Fᵢ/sᵢ and bandwidth B / Σ Bᵢ/bᵢ of theirs (one node: itself)."""
    if len(nodes) == 1:
        return nodes[0]
    base = Work(sum(n.flops for n in nodes), sum(n.bytes_moved for n in nodes), nodes[0].peak_scale)
    return measured(base, [(n.flops, n.peak_scale, 1.0) for n in nodes], [(n.bytes_moved, n.bw_scale) for n in nodes])


def attention_nodes(model: ModelSpec, tp: int, tokens: int, weight_bytes_per_param: float,
                    keys: int | None = None, precision: Precision = STUDY_PRECISION) -> tuple[Work, ...]:
    """Prefill attention of one TP shard (``attention_shard``) as its compute nodes (``_attention``). Every
    projection costs 2·T·in·out FLOPs; the score and value products cost 2·T·K·heads·qk_dim +
    2·T·K·heads·v_dim for T queries over K keys (K = T by default: full T×T, no causal halving; a
    micro-batch of a longer sequence attends to all of it). Bytes: the shard's weights + activations in
    and out (T·hidden·2 each).
    """
    return _attention(model, tp, tokens, tokens if keys is None else keys, weight_bytes_per_param, precision, 0)


def attention_work(model: ModelSpec, tp: int, tokens: int, weight_bytes_per_param: float,
                   keys: int | None = None, precision: Precision = STUDY_PRECISION) -> Work:
    """``attention_nodes`` as one ``Work`` (``as_one``): on the roofline its one node; measured, its FLOPs and
    bytes (serving's interpolation reads them; the generator times the two nodes)."""
    return as_one(attention_nodes(model, tp, tokens, weight_bytes_per_param, keys, precision))


def decode_attention_nodes(
    model: ModelSpec, tp: int, batch: int, context_tokens: int, weight_bytes_per_param: float,
    precision: Precision = STUDY_PRECISION, queries_per_sequence: int = 1,
) -> tuple[Work, ...]:
    """One decode step's attention on one TP shard as its compute nodes (``_attention``): B sequences of q
    new tokens each (q = 1, or k + 1 with k MTP drafts, ``mtp.py``), each attending to a C-token cache.

    FLOPs: 2·B·q·params (projections) + 2·B·q·C·heads·(qk_dim + v_dim) (scores and values).
    Bytes: the shard's weights + the KV cache it reads once per sequence, B·C·``kv_cache_bytes_per_token``
    (its q queries share it, as FlashMLA's ``s_q``) + the activations in and out (B·q·hidden·2 each).
    """
    return _attention(model, tp, batch * queries_per_sequence, context_tokens, weight_bytes_per_param, precision,
                      batch * context_tokens)


def decode_attention_work(
    model: ModelSpec, tp: int, batch: int, context_tokens: int, weight_bytes_per_param: float,
    precision: Precision = STUDY_PRECISION, queries_per_sequence: int = 1,
) -> Work:
    """``decode_attention_nodes`` as one ``Work`` (``as_one``): on the roofline its one node; measured, its
    FLOPs and bytes (the generator times the two nodes)."""
    return as_one(decode_attention_nodes(model, tp, batch, context_tokens, weight_bytes_per_param, precision,
                                         queries_per_sequence))


def routed_expert_work(
    model: ModelSpec, layout: ParallelLayout, tokens: int, expert_bytes_per_param: float,
    precision: Precision = STUDY_PRECISION,
) -> Work:
    """Routed experts on one rank: T·k/EP token–expert rows, expert width split over TP.

    FLOPs = (T·k/EP) · 6 · h_moe · w / TP (gate, up, down: 3 GEMMs × 2 FLOPs per MAC).
    Bytes = E · 3 · h_moe · w · expert_bytes / (TP · EP): this rank's 1/(TP·EP) share of the layer's
    expert weights. docs/study.md §3: a memory-bound expert FFN "reads its rank's share of those
    weights, whatever the TP/EP split"; token rows stay in on-chip/L2-resident tiles and are not counted.
    """
    h, w, k = model.comm_dim, model.expert_ffn_width, model.top_k
    rows = Fraction(tokens * k, layout.ep)
    flops = rows * 6 * h * w / layout.tp
    weights = Fraction(model.routed_experts * 3 * h * w, layout.tp * layout.ep) * precision.weight_bytes(
        precision.expert, expert_bytes_per_param)
    return measured_expert_work(model, layout, work_of(flops, weights, precision.rate(precision.expert)),
                                Fraction(tokens * k, model.routed_experts), precision)


def measured_expert_work(model: ModelSpec, layout: ParallelLayout, work: Work, tokens_per_expert: Fraction,
                         precision: Precision) -> Work:
    """Routed-expert ``work`` at DeepGEMM's grouped-GEMM efficiency for ``tokens_per_expert`` rows per
    expert (``compute_model=measured``; else ``work`` as it is): gate and up (N = 2·w/TP, K = h) take two
    thirds of its FLOPs and weights, down (N = h, K = w/TP) one third."""
    if not precision.measured:
        return work
    h, w, rate = model.comm_dim, model.expert_ffn_width, precision.rate(precision.expert)
    up = grouped_gemm_efficiency(float(tokens_per_expert), max(2 * w // layout.tp, 1), h)
    down = grouped_gemm_efficiency(float(tokens_per_expert), h, max(w // layout.tp, 1))
    f, b = Fraction(work.flops, 3), Fraction(work.bytes_moved, 3)
    return measured(work, [(2 * f, rate, up), (f, rate, down)], [(2 * b, up), (b, down)])


EXACT_MISS_BATCH = 65536
"""Above this batch every routed expert counts as hit: its miss probability (1 − k/E)^B is then below
e^(−65536·k/E), under 2e-28 for any k/E ≥ 1/1024, and the exact power would be needlessly large."""


def expert_hit_fraction(model: ModelSpec, batch: int) -> Fraction:
    """Expected fraction of routed experts that receive at least one of B tokens under uniform top-k
    routing: 1 − (1 − k/E)^B (each token picks k of the E experts)."""
    if batch > EXACT_MISS_BATCH:
        return Fraction(1)
    return 1 - Fraction(model.routed_experts - model.top_k, model.routed_experts) ** batch


def decode_routed_expert_work(
    model: ModelSpec, layout: ParallelLayout, batch: int, expert_bytes_per_param: float,
    precision: Precision = STUDY_PRECISION,
) -> Work:
    """Routed experts on one rank at one decode step: B·k/EP rows; only the experts that some token
    hits are read, so the weight bytes are the rank's share times ``expert_hit_fraction`` (the
    expectation E·(1 − (1 − k/E)^B) experts per layer, spread evenly over the ranks)."""
    full = routed_expert_work(model, layout, batch, expert_bytes_per_param, precision)
    weights = Fraction(model.routed_experts * 3 * model.comm_dim * model.expert_ffn_width,
                       layout.tp * layout.ep) * precision.weight_bytes(precision.expert, expert_bytes_per_param)
    work = work_of(full.flops, weights * expert_hit_fraction(model, batch), precision.rate(precision.expert))
    return measured_expert_work(model, layout, work, Fraction(batch * model.top_k, model.routed_experts), precision)


def shared_ffn_work(model: ModelSpec, tokens: int, weight_bytes_per_param: float,
                    precision: Precision = STUDY_PRECISION) -> Work:
    """Router + shared experts (+ latent projections), replicated on every rank (not TP-sharded).

    Router: 2·T·hidden·E FLOPs. Shared experts: S·6·T·h_moe·w_s FLOPs (w_s = the shared-expert
    width, default the routed width). Models whose MoE runs in a latent dimension (comm_dim <
    hidden_size, Kimi K3) add the down and up projections hidden ↔ h_moe: 2·2·T·hidden·h_moe FLOPs.
    Bytes: these weights + activations in and out.
    """
    hidden, h = model.hidden_size, model.comm_dim
    w = model.shared_expert_ffn_width or model.expert_ffn_width
    params = hidden * model.routed_experts + model.shared_experts * 3 * h * w
    if h != hidden:
        params += 2 * hidden * h
    flops = 2 * tokens * params  # the router, shared experts and latent projections are all GEMMs
    act = 2 * tokens * hidden * model.bytes_per_activation
    wb = precision.weight_bytes(precision.dense, weight_bytes_per_param)
    work = work_of(flops, params * wb + act, precision.rate(precision.dense))
    shapes = [(model.routed_experts, hidden), (2 * model.shared_experts * w, h), (h, model.shared_experts * w)]
    if h != hidden:
        shapes += [(h, hidden), (hidden, h)]
    return _measured_gemms(work, tokens, [s for s in shapes if s[0] * s[1]], precision, wb, act)


def _measured_gemms(work: Work, tokens: Fraction | int, shapes: list[tuple[int, int]], precision: Precision,
                    weight_bytes: Fraction, act: Fraction | int) -> Work:
    """A node of dense GEMMs (``shapes``, weights ``weight_bytes`` each, ``act`` activation bytes) at DeepGEMM's
    measured efficiencies (``compute_model=measured``; else ``work`` as it is)."""
    if not precision.measured:
        return work
    compute, memory = _gemms(tokens, shapes, precision.rate(precision.dense), weight_bytes)
    return measured(work, compute, [*memory, (act, 1.0)])


def mtp_projection_work(model: ModelSpec, tokens: int, weight_bytes_per_param: float,
                        precision: Precision = STUDY_PRECISION) -> Work:
    """The MTP module's projection (DeepSeek-V3 technical report §2.2: M_k ∈ R^{h×2h} joins the previous
    depth's hidden state and the next token's embedding), replicated on every rank: 2·T·2·hidden²
    FLOPs; bytes: its 2·hidden² weights + activations in (two rows) and out."""
    hidden = model.hidden_size
    params = 2 * hidden * hidden
    act = 3 * tokens * hidden * model.bytes_per_activation
    wb = precision.weight_bytes(precision.dense, weight_bytes_per_param)
    work = work_of(2 * tokens * params, params * wb + act, precision.rate(precision.dense))
    return _measured_gemms(work, tokens, [(hidden, 2 * hidden)], precision, wb, act)


def output_head_work(model: ModelSpec, tp: int, rows: int, precision: Precision) -> Work:
    """The output head on one rank (measured compute only): ``rows`` sampled rows times its 1/TP share of the
    vocabulary (vocabulary-parallel over the attention group), in BF16 (DeepSeek-V3 technical report §3.3.1
    keeps the output head in its original precision), at DeepGEMM's measured efficiency for its shape.
    FLOPs 2·rows·⌈V/TP⌉·hidden; bytes: its weights + the rows in and their logits out."""
    n, k, act = _ceil_div(model.vocab_size, tp), model.hidden_size, model.bytes_per_activation
    wb = Precision.weight_bytes("bf16", 0)
    moved = rows * (k + n) * act
    work = work_of(2 * rows * n * k, n * k * wb + moved, Precision.rate("bf16"))
    compute, memory = _gemms(rows, [(n, k)], Precision.rate("bf16"), wb)
    return measured(work, compute, [*memory, (moved, 1.0)])


def dense_ffn_work(model: ModelSpec, tp: int, tokens: int, weight_bytes_per_param: float,
                   precision: Precision = STUDY_PRECISION) -> Work:
    """Dense FFN of the leading dense layers, width split over TP: 6·T·hidden·w_dense/TP FLOPs."""
    hidden, w = model.hidden_size, model.dense_ffn_width
    params = Fraction(3 * hidden * w, tp)
    act = 2 * tokens * hidden * model.bytes_per_activation
    wb = precision.weight_bytes(precision.dense, weight_bytes_per_param)
    work = work_of(2 * tokens * params, params * wb + act, precision.rate(precision.dense))
    return _measured_gemms(work, tokens, [(max(2 * w // tp, 1), hidden), (hidden, max(w // tp, 1))], precision, wb,
                           act)


def roofline_time_s(node: Node, peak_flops: float, mem_bw_bytes_per_s: float, roofline: bool = True) -> float:
    """A compute node's time as ASTRA-sim's ``Roofline.cc`` gives it (docs/reference-semantics.md B.6):
    max(FLOPs/peak, bytes/bandwidth), truncated to whole ns; peak = ``peak_flops`` × the node's
    ``peak_scale`` (its data types', ``precision.py``), bandwidth = ``mem_bw_bytes_per_s`` × its ``bw_scale``
    (its kernels' measured efficiency, ``efficiency.py``).

    With roofline on, a node without FLOPs takes bytes/bandwidth (not truncated) and one without bytes
    is skipped (zero time); with it off, the node's recorded duration is replayed (1 ns when zero).
    """
    if not roofline:
        return max(node.duration_ns, 1) * 1e-9
    if node.bw_scale != 1.0:
        mem_bw_bytes_per_s *= node.bw_scale
    if node.bytes_moved <= 0 or node.flops <= 0:
        return node.bytes_moved / mem_bw_bytes_per_s if node.flops <= 0 and node.bytes_moved > 0 else 0.0
    intensity = node.flops / node.bytes_moved
    if node.peak_scale != 1.0:
        peak_flops *= node.peak_scale
    perf = min(mem_bw_bytes_per_s * intensity, peak_flops)
    return int(node.flops / perf * 1e9) * 1e-9
