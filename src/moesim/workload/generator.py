"""The MoE prefill (and decode-step) workload generator: one serial execution graph per rank
(docs/study.md §3; decode: docs/workload.md, "Decode").

Per layer the critical path is a chain (no compute–communication overlap):

* MoE layer: attention → TP all-reduce → EP dispatch all-to-all → routed experts → EP combine
  all-to-all → shared FFN (router + shared experts) → TP output all-reduce;
* dense layer: attention → TP all-reduce → dense FFN → TP output all-reduce.

Collective volumes follow docs/study.md §3 exactly (V_TP = T·h·2, V_EP = T·h·k·2/EP with h = ``comm_dim``).
Compute nodes carry FLOPs and bytes for a roofline; the formulas are in docs/workload.md. Under uniform
routing every rank's graph is the same and every MoE layer repeats the same node sequence (the engine's
fast-forward exploits this). Skewed routing (``routing.py``) gives each MoE layer its own all-to-all
matrix and each EP rank its own expert work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from moesim.errors import input_error
from moesim.models.spec import ModelSpec
from moesim.registry import Registry
from moesim.schema import MAX_COUNT, Constraint, Param, check_fields, constraint
from moesim.workload.graph import CollectiveType, Node, NodeKind, RankGraph, Workload
from moesim.workload.layout import ParallelLayout
from moesim.workload.routing import (
    PLACEMENT_RULES,
    ROUTINGS,
    LayerRouting,
    ep_imbalance,
    expert_counts,
    hot_weights,
    layer_routing,
    read_placement,
    read_table,
    scale_counts,
    zipf_weights,
)

STUDY_TOKENS = 4096
STUDY_STRATEGIES = ("TP2EP16", "TP4EP8", "TP8EP4", "TP16EP2")
STUDY_RANKS = 32
# Roofline constants of docs/study.md §3, used only for the summary's GPU-time estimate; the system
# layer does the real timing with its own (overridable) settings.
STUDY_PEAK_FLOPS = 1.0e15
STUDY_MEM_BW_BYTES_PER_S = 1.6e12
ROOFLINE = (Param("peak_flops", "workload", float, "FLOP/s", Constraint(low=0, low_open=True)),
            Param("mem_bw_bytes_per_s", "workload", float, "B/s", Constraint(low=0, low_open=True)))

COLLECTIVE_ADDRESSING = ("dims", "groups")
PHASES = ("prefill", "decode")
MAX_DECODE_TOKENS = 10**9
MAX_DECODE_STEPS = 1024
TOKENS = Param("tokens", "workload", int, "tokens", Constraint(low=1, high=MAX_DECODE_TOKENS))
"""The prefill length of a run: every message size stays an exact float64 up to 10^9 tokens."""
"""Every step is its own copy of the layers in the graph, so the node count grows with the steps."""
DECODE_KNOBS = {
    "batch": (1, 1, MAX_DECODE_TOKENS),
    "context_tokens": (STUDY_TOKENS, 0, MAX_DECODE_TOKENS),
    "decode_steps": (1, 1, MAX_DECODE_STEPS),
}
"""Decode knob → (its value when a decode run leaves it unset, smallest, largest allowed)."""
ROUTING_KNOBS = {
    "routing_zipf_exponent": ("zipf", 1.0),
    "routing_hot_fraction": ("hot", 0.1),
    "routing_hot_share": ("hot", 0.5),
    "routing_table": ("table", None),
}
"""Routing knob → (the routing it belongs to, its value when that routing leaves it unset)."""
MAX_EXPERT_SLOTS = 64

GeneratorFn = Callable[..., Workload]
GENERATORS: Registry[GeneratorFn] = Registry("workload generator")


@dataclass(frozen=True)
class WorkloadOptions:
    """Knobs of the generator that the study (docs/study.md) leaves to the implementation.

    ``weight_bytes_per_param``: attention, dense-FFN, router and shared-expert weights (FP8 = 1).
    ``expert_bytes_per_param``: routed-expert weights (FP4 = 0.5, as in the study checkpoints).
    ``num_ranks``: if set, TP × EP must equal it (the study: 32).
    ``collective_addressing``: ``"dims"`` = global group + ``involved_dims`` (docs/study.md §6);
    ``"groups"`` = communicator-group ids (Chakra ``pg_name``, docs/reference-semantics.md C.4).
    ``phase``: ``"prefill"`` (one pass over ``tokens`` tokens) or ``"decode"``: ``decode_steps``
    steps of ``batch`` sequences, one new token each, whose KV cache holds ``context_tokens`` tokens
    at the first step. The decode knobs are refused in prefill; in decode an unset one takes its
    ``DECODE_KNOBS`` default.
    ``routing``: token-to-expert routing, ``"uniform"`` or skewed (``routing.py``): ``"zipf"`` (share
    ∝ 1/(i+1)^``routing_zipf_exponent``), ``"hot"`` (``routing_hot_fraction`` of the experts get
    ``routing_hot_share`` of the rows), ``"table"`` (``routing_table``: a CSV/Parquet file of tokens per
    MoE layer × expert); ``routing_seed`` picks which experts are hot in each layer.
    ``expert_placement``: ``"contiguous"`` (E/EP experts per EP rank), ``"eplb"`` (balanced, with
    ``expert_slots`` redundant replicas per rank) or a placement file (one line of expert ids per EP rank).
    """

    weight_bytes_per_param: float = field(default=1.0, metadata=constraint(low=0, high=64, low_open=True))
    expert_bytes_per_param: float = field(default=0.5, metadata=constraint(low=0, high=64, low_open=True))
    num_ranks: int | None = field(default=None, metadata=constraint(low=1, high=MAX_COUNT))
    collective_addressing: str = field(default="dims", metadata=constraint(choices=COLLECTIVE_ADDRESSING))
    phase: str = field(default="prefill", metadata=constraint(choices=PHASES))
    batch: int | None = field(default=None, metadata=constraint(low=1, high=MAX_DECODE_TOKENS))
    context_tokens: int | None = field(default=None, metadata=constraint(low=0, high=MAX_DECODE_TOKENS))
    decode_steps: int | None = field(default=None, metadata=constraint(low=1, high=MAX_DECODE_STEPS))
    routing: str = field(default="uniform", metadata=constraint(choices=ROUTINGS))
    routing_zipf_exponent: float | None = field(default=None, metadata=constraint(low=0, high=16))
    routing_hot_fraction: float | None = field(default=None, metadata=constraint(low=0, high=1, low_open=True))
    routing_hot_share: float | None = field(default=None, metadata=constraint(low=0, high=1))
    routing_table: str | None = None
    routing_seed: int = field(default=0, metadata=constraint(low=0, high=2**32 - 1))
    expert_placement: str = field(default="contiguous", metadata={"note": f"{', '.join(PLACEMENT_RULES)} or a "
                                                                          "placement file"})
    expert_slots: int = field(default=1, metadata=constraint(low=0, high=MAX_EXPERT_SLOTS))

    def __post_init__(self) -> None:
        check_fields(self, "workload options")
        self._check_phase()
        self._check_routing()

    @property
    def skewed(self) -> bool:
        """Routing other than uniform (Zipf with exponent 0 is uniform)."""
        return self.routing != "uniform" and not (self.routing == "zipf" and self.routing_zipf_exponent == 0)

    def _check_routing(self) -> None:
        if self.routing not in ROUTINGS:
            raise input_error("workload options", "routing", f"unknown value {self.routing!r}", ROUTINGS)
        for name, (routing, default) in ROUTING_KNOBS.items():
            if getattr(self, name) is not None and routing != self.routing:
                raise input_error("workload options", name, f"applies only with routing={routing}")
            if routing == self.routing and getattr(self, name) is None:
                if default is None:
                    raise input_error("workload options", name, f"routing={routing} needs a file path")
                object.__setattr__(self, name, default)
        if self.expert_placement not in PLACEMENT_RULES and not Path(self.expert_placement).is_file():
            raise input_error("workload options", "expert_placement", f"{self.expert_placement!r} is neither a "
                              "rule nor a file", [*PLACEMENT_RULES, "a placement file"])

    def _check_phase(self) -> None:
        if self.phase not in PHASES:
            raise input_error("workload options", "phase", f"unknown value {self.phase!r}", PHASES)
        for name, (default, _, _) in DECODE_KNOBS.items():
            value = getattr(self, name)
            if self.phase == "prefill" and value is not None:
                raise input_error("workload options", name, "applies only with phase=decode")
            if self.phase == "decode" and value is None:
                object.__setattr__(self, name, default)  # a decode run states every knob (and hashes so)


# ----------------------------------------------------------------------------------------------
# Communication volumes (docs/study.md §3) and proxies (section 2)


def tp_allreduce_bytes(model: ModelSpec, tokens: int) -> int:
    """V_TP = T · h · 2: the data size of one TP all-reduce."""
    return tokens * model.comm_dim * model.bytes_per_activation


def ep_alltoall_bytes(model: ModelSpec, layout: ParallelLayout, tokens: int) -> int:
    """V_EP = T · h · k · 2 / EP: one rank's buffer for one EP dispatch or combine (floored)."""
    return tokens * model.comm_dim * model.top_k * model.bytes_per_activation // layout.ep


def comm_proxies(model: ModelSpec) -> tuple[int, int]:
    """(TP proxy, EP proxy) = (h × layers, h × top-k × MoE layers), docs/study.md §2."""
    return model.tp_proxy, model.ep_proxy


# ----------------------------------------------------------------------------------------------
# Compute work: (FLOPs, bytes moved) per rank. Exact rational arithmetic, floored once at the end.


@dataclass(frozen=True)
class Work:
    """FLOPs and bytes of one compute node on one rank."""

    flops: int
    bytes_moved: int

    @property
    def empty(self) -> bool:
        """No arithmetic (e.g. a zero-width FFN): the node is left out, its activation traffic too."""
        return self.flops == 0


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _work(flops: Fraction | int, bytes_moved: Fraction | int) -> Work:
    return Work(int(flops), int(bytes_moved))


@dataclass(frozen=True)
class AttentionShard:
    """One TP shard's attention: its projection parameters, heads, score and value widths, and the
    KV-cache bytes it keeps per token per layer."""

    params: int
    heads: int
    qk_dim: int
    v_dim: int
    kv_cache_bytes_per_token: int


def attention_shard(model: ModelSpec, tp: int) -> AttentionShard:
    """Heads split over TP (ceil), projections column/row-split.

    GQA: Q (hidden → heads·d), K and V (hidden → kv_heads·d each; KV heads are replicated when
    fewer than TP), O (heads·d → hidden); the shard caches K and V of its KV heads,
    2·⌈kv_heads/TP⌉·d values per token. MLA: q down (hidden → q_lora, replicated) and q up
    (q_lora → heads·qk_dim), kv down (hidden → kv_lora + rope, replicated), kv up (kv_lora →
    heads·(nope + v)), O (heads·v → hidden); the shard caches the whole compressed latent,
    kv_lora + rope values per token (it is shared by all heads, so TP does not split it).
    Cached values take ``bytes_per_activation`` bytes each.
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
            params = hidden * att.q_lora_rank + att.q_lora_rank * heads * qk_dim
        else:
            params = hidden * heads * qk_dim
        params += hidden * (kv_lora + rope) + kv_lora * heads * (nope + v_dim)
        params += heads * v_dim * hidden
        cached = kv_lora + rope
    else:
        qk_dim = v_dim = att.head_dim
        kv_heads = _ceil_div(att.num_kv_heads, tp)
        params = hidden * heads * qk_dim + 2 * hidden * kv_heads * qk_dim + heads * v_dim * hidden
        cached = 2 * kv_heads * att.head_dim
    return AttentionShard(params, heads, qk_dim, v_dim, cached * model.bytes_per_activation)


def attention_work(model: ModelSpec, tp: int, tokens: int, weight_bytes_per_param: float) -> Work:
    """Prefill attention of one TP shard (``attention_shard``). Every projection costs 2·T·in·out
    FLOPs; the score and value products cost 2·T²·heads·qk_dim + 2·T²·heads·v_dim (full T×T, no
    causal halving). Bytes: the shard's weights + activations in and out (T·hidden·2 each).
    """
    a = attention_shard(model, tp)
    flops = 2 * tokens * a.params + 2 * tokens * tokens * a.heads * (a.qk_dim + a.v_dim)
    act = 2 * tokens * model.hidden_size * model.bytes_per_activation
    return _work(flops, a.params * Fraction(weight_bytes_per_param) + act)


def decode_attention_work(
    model: ModelSpec, tp: int, batch: int, context_tokens: int, weight_bytes_per_param: float
) -> Work:
    """One decode step's attention on one TP shard: B new tokens, each attending to a C-token cache.

    FLOPs: 2·B·params (projections) + 2·B·C·heads·(qk_dim + v_dim) (scores and values).
    Bytes: the shard's weights + the KV cache it reads, B·C·``kv_cache_bytes_per_token`` + the
    activations in and out (B·hidden·2 each).
    """
    a = attention_shard(model, tp)
    flops = 2 * batch * a.params + 2 * batch * context_tokens * a.heads * (a.qk_dim + a.v_dim)
    kv = batch * context_tokens * a.kv_cache_bytes_per_token
    act = 2 * batch * model.hidden_size * model.bytes_per_activation
    return _work(flops, a.params * Fraction(weight_bytes_per_param) + kv + act)


def routed_expert_work(
    model: ModelSpec, layout: ParallelLayout, tokens: int, expert_bytes_per_param: float
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
    weights = Fraction(model.routed_experts * 3 * h * w, layout.tp * layout.ep) * Fraction(
        expert_bytes_per_param
    )
    return _work(flops, weights)


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
    model: ModelSpec, layout: ParallelLayout, batch: int, expert_bytes_per_param: float
) -> Work:
    """Routed experts on one rank at one decode step: B·k/EP rows; only the experts that some token
    hits are read, so the weight bytes are the rank's share times ``expert_hit_fraction`` (the
    expectation E·(1 − (1 − k/E)^B) experts per layer, spread evenly over the ranks)."""
    full = routed_expert_work(model, layout, batch, expert_bytes_per_param)
    weights = Fraction(model.routed_experts * 3 * model.comm_dim * model.expert_ffn_width,
                       layout.tp * layout.ep) * Fraction(expert_bytes_per_param)
    return _work(full.flops, weights * expert_hit_fraction(model, batch))


def shared_ffn_work(model: ModelSpec, tokens: int, weight_bytes_per_param: float) -> Work:
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
    return _work(flops, params * Fraction(weight_bytes_per_param) + act)


def dense_ffn_work(model: ModelSpec, tp: int, tokens: int, weight_bytes_per_param: float) -> Work:
    """Dense FFN of the leading dense layers, width split over TP: 6·T·hidden·w_dense/TP FLOPs."""
    hidden, w = model.hidden_size, model.dense_ffn_width
    params = Fraction(3 * hidden * w, tp)
    act = 2 * tokens * hidden * model.bytes_per_activation
    return _work(2 * tokens * params, params * Fraction(weight_bytes_per_param) + act)


# ----------------------------------------------------------------------------------------------
# Graph construction


@dataclass(frozen=True)
class _Op:
    """A node before it gets its id, deps and layer (one layer's template)."""

    name: str
    kind: NodeKind
    work: Work = Work(0, 0)
    collective: CollectiveType | None = None
    size_bytes: int = 0
    group: int = 0
    involved_dims: tuple[bool, ...] = ()
    pair_bytes: tuple[int, ...] = ()


def _validate(model: ModelSpec, layout: ParallelLayout, tokens: int, options: WorkloadOptions) -> None:
    src = f"model {model.key}"
    if options.phase == "prefill":  # decode: batch × decode_steps, each declared with its range
        TOKENS.check(tokens, "workload", strict=True)
    check_fields(model, src)
    if model.first_dense_layers > model.num_layers:
        raise input_error(
            src, "first_dense_layers", f"must be in 0..{model.num_layers}, got {model.first_dense_layers}"
        )
    if model.top_k > model.routed_experts:
        raise input_error(src, "top_k", f"{model.top_k} exceeds routed_experts {model.routed_experts}")
    layout.validate(num_ranks=options.num_ranks, routed_experts=model.routed_experts, source=src)


def moe_routing(model: ModelSpec, layout: ParallelLayout, tokens: int,
                options: WorkloadOptions) -> tuple[LayerRouting, ...] | None:
    """Per MoE layer, the skewed routing of ``tokens`` tokens (one decode step: the batch) and its
    placement on the EP ranks; None under uniform routing."""
    if not options.skewed:
        return None
    experts, k = model.routed_experts, model.top_k
    layers = model.num_layers - model.first_dense_layers
    if options.routing == "table":
        assert options.routing_table is not None
        counts = tuple(scale_counts(row, tokens, k) for row in read_table(options.routing_table, experts, layers))
    else:
        if options.routing == "zipf":
            assert options.routing_zipf_exponent is not None
            weights = zipf_weights(experts, options.routing_zipf_exponent)
        else:
            assert options.routing_hot_fraction is not None and options.routing_hot_share is not None
            weights = hot_weights(experts, options.routing_hot_fraction, options.routing_hot_share)
        counts = expert_counts(weights, experts, layers, tokens, k, options.routing_seed)
    rule = options.expert_placement
    fixed = None if rule in PLACEMENT_RULES else read_placement(rule, experts, layout.ep)
    return tuple(layer_routing(c, layout.ep, rule, options.expert_slots, fixed) for c in counts)


def routing_imbalance(model: ModelSpec, layout: ParallelLayout, tokens: int,
                      options: WorkloadOptions) -> tuple[float, float] | None:
    """(after, before balancing) EP imbalance, max/mean rows per EP rank summed over the MoE layers
    (``routing.ep_imbalance``) of one pass (prefill, or one decode step); None under uniform routing."""
    _validate(model, layout, tokens, options)
    per_pass = options.batch if options.phase == "decode" and options.batch is not None else tokens
    layers = moe_routing(model, layout, per_pass, options)
    return None if not layers else ep_imbalance(layers)


def _skewed_expert_work(model: ModelSpec, layout: ParallelLayout, tokens: int, routing: LayerRouting,
                        ep_index: int, expert_bytes_per_param: float, decode: bool) -> Work:
    """Routed experts of EP rank ``ep_index`` under skewed routing: its R rows, R·6·h·w/TP FLOPs, and the
    weights of the replicas it holds (decode: each replica read with probability 1 − (1 − x/B)^B for its
    x expected rows of B tokens; every replica with rows above ``EXACT_MISS_BATCH``)."""
    h, w = model.comm_dim, model.expert_ffn_width
    per_expert = Fraction(3 * h * w, layout.tp) * Fraction(expert_bytes_per_param)
    replicas = routing.replica_rows[ep_index]
    if not decode:
        read = Fraction(len(replicas))
    elif tokens > EXACT_MISS_BATCH:
        read = Fraction(sum(1 for x in replicas if x))
    else:
        read = sum((1 - (1 - Fraction(min(x, tokens), tokens)) ** tokens for x in replicas), Fraction(0))
    return _work(Fraction(routing.rows[ep_index] * 6 * h * w, layout.tp), per_expert * read)


def _layer_templates(
    model: ModelSpec,
    layout: ParallelLayout,
    tokens: int,
    options: WorkloadOptions,
    tp_group: int,
    ep_group: int,
    context_tokens: int | None = None,
    routing: tuple[LayerRouting, ...] | None = None,
    ep_index: int = 0,
) -> Templates:
    """The (dense layer, MoE layers) node sequences of one rank: a prefill of ``tokens`` tokens, or
    with ``context_tokens`` one decode step of ``tokens`` sequences over a cache that long. The MoE
    layers are one sequence for all under uniform routing, else one per MoE layer."""
    tp_kw: dict[str, Any] = {"group": tp_group} if tp_group else {"involved_dims": (True, False)}
    ep_kw: dict[str, Any] = {"group": ep_group} if ep_group else {"involved_dims": (False, True)}
    v_tp = tp_allreduce_bytes(model, tokens)
    v_ep = ep_alltoall_bytes(model, layout, tokens)
    wb, eb = options.weight_bytes_per_param, options.expert_bytes_per_param

    def comp(name: str, work: Work) -> list[_Op]:
        return [] if work.empty else [_Op(name, NodeKind.COMPUTE, work=work)]

    def tp_ar(name: str) -> list[_Op]:
        if layout.tp == 1:
            return []
        return [
            _Op(name, NodeKind.COLLECTIVE, collective=CollectiveType.ALL_REDUCE, size_bytes=v_tp, **tp_kw)
        ]

    def ep_a2a(name: str, pairs: tuple[int, ...] = ()) -> list[_Op]:
        if layout.ep == 1:
            return []
        if not pairs:
            return [_Op(name, NodeKind.COLLECTIVE, collective=CollectiveType.ALL_TO_ALL, size_bytes=v_ep, **ep_kw)]
        row_bytes = model.comm_dim * model.bytes_per_activation
        pair_bytes = tuple(p * row_bytes for p in pairs)
        own = sum(pair_bytes[ep_index * layout.ep:(ep_index + 1) * layout.ep])
        return [_Op(name, NodeKind.COLLECTIVE, collective=CollectiveType.ALL_TO_ALL, size_bytes=own,
                    pair_bytes=pair_bytes, **ep_kw)]

    if context_tokens is None:
        attention = attention_work(model, layout.tp, tokens, wb)
        experts = routed_expert_work(model, layout, tokens, eb)
    else:
        attention = decode_attention_work(model, layout.tp, tokens, context_tokens, wb)
        experts = decode_routed_expert_work(model, layout, tokens, eb)
    head = comp("attention", attention) + tp_ar("tp_allreduce_attn")
    dense = head + comp("dense_ffn", dense_ffn_work(model, layout.tp, tokens, wb)) + tp_ar("tp_allreduce_out")
    tail = comp("shared_ffn", shared_ffn_work(model, tokens, wb)) + tp_ar("tp_allreduce_out")
    if routing is None:
        moe = head + ep_a2a("ep_dispatch") + comp("routed_experts", experts) + ep_a2a("ep_combine") + tail
        return tuple(dense), (tuple(moe),)
    layers = []
    for lr in routing:
        pairs = lr.pairs()
        ep = layout.ep
        back = tuple(pairs[s * ep + d] for d in range(ep) for s in range(ep))  # combine: each receiver returns its rows
        work = _skewed_expert_work(model, layout, tokens, lr, ep_index, eb, context_tokens is not None)
        layers.append(tuple(head + ep_a2a("ep_dispatch", pairs) + comp("routed_experts", work)
                            + ep_a2a("ep_combine", back) + tail))
    return tuple(dense), tuple(layers)


Templates = tuple[tuple[_Op, ...], tuple[tuple[_Op, ...], ...]]


def _passes(
    model: ModelSpec, layout: ParallelLayout, tokens: int, options: WorkloadOptions, tp_group: int, ep_group: int,
    routing: tuple[LayerRouting, ...] | None = None, ep_index: int = 0,
) -> list[Templates]:
    """The layer templates of each forward pass: the prefill, or each decode step (step s reads a
    cache of ``context_tokens`` + s tokens: the tokens of the earlier steps join it). ``routing``: the
    skewed routing of one pass (``moe_routing``), the same in every decode step."""
    if options.phase == "prefill":
        return [_layer_templates(model, layout, tokens, options, tp_group, ep_group, None, routing, ep_index)]
    assert options.batch is not None and options.context_tokens is not None and options.decode_steps is not None
    return [
        _layer_templates(model, layout, options.batch, options, tp_group, ep_group, options.context_tokens + step,
                         routing, ep_index)
        for step in range(options.decode_steps)
    ]


def _instantiate(model: ModelSpec, passes: list[Templates]) -> tuple[Node, ...]:
    """Lay the passes' layers out as one chain: ids 0, 1, 2, … and deps = (previous id,); pass p's
    layer L gets ``layer`` = p·num_layers + L."""
    nodes: list[Node] = []
    for index in range(len(passes) * model.num_layers):
        step, layer = divmod(index, model.num_layers)
        dense, moe = passes[step]
        moe_layer = (layer - model.first_dense_layers) % len(moe)
        for op in dense if layer < model.first_dense_layers else moe[moe_layer]:
            nid = len(nodes)
            nodes.append(
                Node(
                    id=nid,
                    name=op.name,
                    kind=op.kind,
                    deps=(nid - 1,) if nid else (),
                    flops=op.work.flops,
                    bytes_moved=op.work.bytes_moved,
                    collective=op.collective,
                    size_bytes=op.size_bytes,
                    group=op.group,
                    involved_dims=op.involved_dims,
                    layer=index,
                    pair_bytes=op.pair_bytes,
                )
            )
    return tuple(nodes)


def _comm_groups(
    layout: ParallelLayout,
) -> tuple[dict[int, int], dict[int, int], tuple[tuple[int, tuple[int, ...]], ...]]:
    """Group ids: TP groups (size > 1) first, then EP groups (size > 1), numbered from 1.

    Returns (rank → TP group id, rank → EP group id, the (id, members) table); id 0 = no group.
    """
    table: list[tuple[int, tuple[int, ...]]] = []
    tp_of: dict[int, int] = dict.fromkeys(range(layout.num_ranks), 0)
    ep_of: dict[int, int] = dict.fromkeys(range(layout.num_ranks), 0)
    for groups, owner in ((layout.tp_groups(), tp_of), (layout.ep_groups(), ep_of)):
        for members in groups:
            if len(members) < 2:
                continue
            gid = len(table) + 1
            table.append((gid, members))
            for r in members:
                owner[r] = gid
    return tp_of, ep_of, tuple(table)


@GENERATORS.register("moe_prefill", "serial MoE prefill forward pass (or decode steps), uniform or skewed routing",
                     "docs/study.md §3")
def generate(
    model: ModelSpec,
    layout: ParallelLayout,
    tokens: int = STUDY_TOKENS,
    options: WorkloadOptions | None = None,
) -> Workload:
    """Build the per-rank graphs of one ``tokens``-token prefill pass of ``model`` under ``layout``,
    or with ``options.phase == "decode"`` of its decode steps (``tokens`` is then unused)."""
    options = options or WorkloadOptions()
    _validate(model, layout, tokens, options)
    tp_of, ep_of, table = _comm_groups(layout)
    by_groups = options.collective_addressing == "groups"
    cache: dict[tuple[int, int, int], tuple[Node, ...]] = {}
    routing = moe_routing(model, layout, options.batch if options.phase == "decode" else tokens, options)  # type: ignore[arg-type]
    graphs = []
    for rank in range(layout.num_ranks):
        key = (tp_of[rank], ep_of[rank]) if by_groups else (0, 0)
        ep_index = layout.ep_index(rank) if options.skewed else 0
        if (*key, ep_index) not in cache:  # ranks with the same groups and load share one node tuple
            passes = _passes(model, layout, tokens, options, *key, routing, ep_index)
            cache[(*key, ep_index)] = _instantiate(model, passes)
        graphs.append(RankGraph(rank=rank, nodes=cache[(*key, ep_index)]))
    name = f"{model.key}_{layout.name}_T{tokens}"
    if options.phase == "decode":
        name = f"{model.key}_{layout.name}_decode_B{options.batch}_C{options.context_tokens}_S{options.decode_steps}"
    return Workload(
        name=name,
        graphs=tuple(graphs),
        logical_dims=(layout.tp, layout.ep),
        comm_groups=table,
    )


# ----------------------------------------------------------------------------------------------
# Summary


@dataclass(frozen=True)
class RankSummary:
    """Per-rank totals. TP bytes = all-reduce data sizes, EP bytes = all-to-all buffer sizes."""

    rank: int
    nodes: int
    compute_nodes: int
    collective_nodes: int
    flops: int
    bytes_moved: int
    tp_bytes: int
    ep_bytes: int
    other_comm_bytes: int
    gpu_s_estimate: float


@dataclass(frozen=True)
class WorkloadSummary:
    """What `moesim workload generate/inspect` prints."""

    name: str
    num_ranks: int
    logical_dims: tuple[int, ...]
    comm_groups: int
    ranks: tuple[RankSummary, ...]

    @property
    def tp_bytes(self) -> int:
        return sum(r.tp_bytes for r in self.ranks)

    @property
    def ep_bytes(self) -> int:
        return sum(r.ep_bytes for r in self.ranks)

    @property
    def flops(self) -> int:
        return sum(r.flops for r in self.ranks)

    @property
    def nodes(self) -> int:
        return sum(r.nodes for r in self.ranks)

    @property
    def gpu_s_estimate(self) -> float:
        """The slowest rank's summed roofline time (no communication)."""
        return max((r.gpu_s_estimate for r in self.ranks), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "num_ranks": self.num_ranks,
            "logical_dims": list(self.logical_dims),
            "comm_groups": self.comm_groups,
            "nodes": self.nodes,
            "tp_bytes": self.tp_bytes,
            "ep_bytes": self.ep_bytes,
            "flops": self.flops,
            "gpu_s_estimate": self.gpu_s_estimate,
            "ranks": [dataclasses.asdict(r) for r in self.ranks],
        }


def roofline_s(node: Node, peak_flops: float, mem_bw_bytes_per_s: float) -> float:
    """max(FLOPs/peak, bytes/bandwidth) for a node with work, else its replay duration."""
    if node.flops or node.bytes_moved:
        return max(node.flops / peak_flops, node.bytes_moved / mem_bw_bytes_per_s)
    return node.duration_ns * 1e-9


def _rank_summary(
    rank: int, nodes: tuple[Node, ...], peak_flops: float, mem_bw_bytes_per_s: float
) -> RankSummary:
    comp = [n for n in nodes if n.kind is NodeKind.COMPUTE]
    coll = [n for n in nodes if n.kind is NodeKind.COLLECTIVE]
    tp = sum(n.size_bytes for n in coll if n.collective is CollectiveType.ALL_REDUCE)
    ep = sum(n.size_bytes for n in coll if n.collective is CollectiveType.ALL_TO_ALL)
    return RankSummary(
        rank=rank,
        nodes=len(nodes),
        compute_nodes=len(comp),
        collective_nodes=len(coll),
        flops=sum(n.flops for n in comp),
        bytes_moved=sum(n.bytes_moved for n in comp),
        tp_bytes=tp,
        ep_bytes=ep,
        other_comm_bytes=sum(n.size_bytes for n in coll) - tp - ep,
        gpu_s_estimate=sum(roofline_s(n, peak_flops, mem_bw_bytes_per_s) for n in comp),
    )


def summary(
    workload: Workload,
    peak_flops: float = STUDY_PEAK_FLOPS,
    mem_bw_bytes_per_s: float = STUDY_MEM_BW_BYTES_PER_S,
) -> WorkloadSummary:
    """Per-rank node counts, communication bytes, FLOPs and a roofline GPU-time estimate."""
    for p, value in zip(ROOFLINE, (peak_flops, mem_bw_bytes_per_s), strict=True):
        p.check(value, "summary", strict=True)
    cache: dict[int, RankSummary] = {}
    ranks = []
    for g in workload.graphs:
        key = id(g.nodes)
        if key not in cache:
            cache[key] = _rank_summary(g.rank, g.nodes, peak_flops, mem_bw_bytes_per_s)
        ranks.append(dataclasses.replace(cache[key], rank=g.rank))
    return WorkloadSummary(
        name=workload.name,
        num_ranks=workload.num_ranks,
        logical_dims=workload.logical_dims,
        comm_groups=len(workload.comm_groups),
        ranks=tuple(ranks),
    )
