"""The MoE prefill (and decode-step) workload generator: assembles one execution graph per rank
(docs/study.md §3; decode: docs/workload.md, "Decode").

Per layer and micro-batch the nodes form a chain; with one micro-batch (the default) that chain is the
whole graph (no compute–communication overlap), with several the micro-batches overlap (``_instantiate``,
docs/overlap.md):

* MoE layer: attention → TP all-reduce → EP dispatch all-to-all → routed experts → EP combine
  all-to-all → shared FFN (router + shared experts) → TP output all-reduce;
* dense layer: attention → TP all-reduce → dense FFN → TP output all-reduce;
* under data-parallel attention (``DP<d>[TP<n>]EP<m>``, ``layout.py``) each attention group runs its own
  share of the batch, and the TP all-reduces become a reduce-scatter after attention and an all-gather at
  the end of the layer, between which each rank dispatches and runs the replicated FFNs on its own slice.

Under ``compute_model=measured`` the memory-bound kernels between them (norms, rotary, activation, FP8 casts,
permutes; ``elementwise.py``) are nodes of their own, and the last layer of a pass ends with the output head
and sampling. What each node costs is in ``costs.py``, the knobs in ``options.py``, the per-rank totals in
``summary.py``. Under uniform routing every rank's graph is the same and every MoE layer repeats the
same node sequence (the engine's fast-forward exploits this). Skewed routing (``routing.py``) gives
each MoE layer its own all-to-all matrix and each EP rank its own expert work.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from moesim.errors import input_error
from moesim.models.spec import ModelSpec
from moesim.registry import Registry
from moesim.schema import check_fields
from moesim.workload import mtp
from moesim.workload.costs import (
    EXACT_MISS_BATCH,
    Work,
    attention_nodes,
    decode_attention_nodes,
    decode_routed_expert_work,
    dense_ffn_work,
    ep_alltoall_bytes,
    measured_expert_work,
    mtp_projection_work,
    output_head_work,
    routed_expert_work,
    shared_ffn_work,
    tp_allreduce_bytes,
    work_of,
)
from moesim.workload.elementwise import (
    attention_bytes,
    expert_bytes,
    ffn_input_bytes,
    gated_ffn_bytes,
    head_bytes,
)
from moesim.workload.graph import CollectiveType, Node, NodeKind, RankGraph, Workload
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import STUDY_TOKENS, TOKENS, WorkloadOptions
from moesim.workload.precision import Precision
from moesim.workload.prompts import Prompts, batch_tokens, prompt_attention_nodes, split_prompts
from moesim.workload.routing import (
    PLACEMENT_RULES,
    LayerRouting,
    Placement,
    draw_layer,
    ep_imbalance,
    expert_counts,
    hot_weights,
    layer_routing,
    read_placement,
    read_table,
    scale_counts,
    uniform_counts,
    zipf_weights,
)

GeneratorFn = Callable[..., Workload]
GENERATORS: Registry[GeneratorFn] = Registry("workload generator")

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
    layout.validate(num_ranks=options.num_ranks, routed_experts=model.routed_experts, source=src,
                    redundant_experts=options.redundant_experts)
    what = "batch" if options.phase == "decode" else "prompt_lengths" if options.prompts else "tokens"
    per_pass = pass_tokens(layout, tokens, options)
    layout.check_batch(per_pass, what, "workload options" if what != "tokens" else "workload")
    per_group = per_pass // layout.dp if layout.dp_attention else per_pass
    if options.micro_batches and options.micro_batches > per_group:
        raise input_error("workload options", "micro_batches",
                          f"{options.micro_batches} micro-batches exceed the {per_group} {what} of a pass"
                          + (" per attention group" if layout.dp_attention else ""))
    prompts = options.prompts
    if prompts is not None and options.micro_batches:
        parts = split_prompts(prompts, options.micro_batches)
        if not all(parts):
            raise input_error("workload options", "micro_batches", f"{options.micro_batches} micro-batches exceed "
                              f"the {sum(n for _, n in prompts)} prompts of the batch (each holds whole prompts)")
        if layout.dp_attention and any(batch_tokens(p) % layout.tp for p in parts):
            raise input_error("workload options", "prompt_lengths",
                              f"strategy {layout.name}: the tokens of each of the {options.micro_batches} micro-batches "
                              f"({', '.join(str(batch_tokens(p)) for p in parts)}) must split evenly over TP = "
                              f"{layout.tp} ranks")
    elif options.micro_batches and layout.dp_attention and layout.tp > 1 and \
            per_group % (layout.tp * options.micro_batches):
        raise input_error("workload options", "micro_batches",
                          f"strategy {layout.name}: each of the {options.micro_batches} micro-batches of an attention "
                          f"group's {per_group} {what} must split evenly over its TP = {layout.tp} ranks")


def pass_tokens(layout: ParallelLayout, tokens: int, options: WorkloadOptions) -> int:
    """The tokens one pass routes over all ranks: ``tokens`` (prefill), the batch of prompts on every attention
    group (``prompt_lengths``: DP × Σ), or one decode step's ``batch``."""
    if options.phase == "decode":
        assert options.batch is not None
        return options.batch
    prompts = options.prompts
    if prompts is None:
        return tokens
    return batch_tokens(prompts) * (layout.dp if layout.dp_attention else 1)


def moe_routing(model: ModelSpec, layout: ParallelLayout, tokens: int, options: WorkloadOptions,
                placements: tuple[Placement, ...] | None = None) -> tuple[LayerRouting, ...] | None:
    """Per MoE layer, the skewed routing of ``tokens`` tokens (``pass_tokens``) and its placement on the EP
    ranks (uniform routing over redundant experts: one for all layers); None under uniform routing without
    them. ``placements``: one per layer, kept as given (a micro-batch routed over its pass's placement)."""
    if not options.per_expert:
        return None
    layout = layout.experts
    experts, k = model.routed_experts, model.top_k
    layers = model.num_layers - model.first_dense_layers
    if not options.skewed:  # uniform routing over redundant experts: one layer stands for every MoE layer
        counts: tuple[tuple[int, ...], ...] = (uniform_counts(experts, tokens, k),)
    elif options.routing == "table":
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
    if placements is not None:
        return tuple(layer_routing(c, layout.ep, "contiguous", 1, p, options.redundancy)
                     for c, p in zip(counts, placements, strict=True))
    rule = options.expert_placement
    fixed = None if rule in PLACEMENT_RULES else read_placement(rule, experts, layout.ep, options.redundant_experts)
    return tuple(layer_routing(c, layout.ep, rule, options.expert_slots, fixed, options.redundancy) for c in counts)


DRAW_STREAM = 0x64726177
"""Tags the draws' seed (``routing_seed``, this, MoE layer, tokens), apart from ``routing_seed``'s hot-expert order."""


def drawn_routing(model: ModelSpec, expected: tuple[LayerRouting, ...], tokens: int,
                  options: WorkloadOptions) -> tuple[LayerRouting, ...]:
    """``routing_draws``: per MoE layer, ``tokens`` drawn tokens over the expected routing's shares and placement
    (``routing.draw_layer``; one expected layer standing for all is drawn anew in each), seeded by
    ``routing_seed``, the layer and ``tokens``."""
    layers = model.num_layers - model.first_dense_layers
    expected = expected * layers if len(expected) == 1 else expected
    return tuple(draw_layer(lr, tokens, (options.routing_seed, DRAW_STREAM, i, tokens), options.redundant_experts)
                 for i, lr in enumerate(expected))


@dataclass
class PassRouting:
    """The routing of one pass (``moe_routing``) and of each micro-batch of it: a micro-batch of t tokens routes
    its own t tokens (the same expert shares and hot experts per layer, rows rounded for t) over the pass's
    placement (the balancer places replicas once for the pass; each expert's rows spread over its replicas as
    ``routing.replica_rows`` does). Every micro-batch keeps t·k rows, so the micro-batches route the pass's T·k.
    With ``routing_draws`` each size of micro-batch (the pass included) draws its tokens (``drawn_routing``);
    micro-batches of one size share their draws."""

    model: ModelSpec
    layout: ParallelLayout
    options: WorkloadOptions
    tokens: int
    whole: tuple[LayerRouting, ...]
    _parts: dict[int, tuple[LayerRouting, ...]] = field(default_factory=dict)

    def of(self, tokens: int) -> tuple[LayerRouting, ...]:
        """Per MoE layer, the routing of a micro-batch of ``tokens`` tokens (the pass itself when it is whole)."""
        if tokens == self.tokens and not self.options.routing_draws:
            return self.whole
        if tokens not in self._parts:
            routed = self.whole if tokens == self.tokens else moe_routing(
                self.model, self.layout, tokens, self.options, tuple(lr.placement for lr in self.whole))
            assert routed is not None
            self._parts[tokens] = (drawn_routing(self.model, routed, tokens, self.options)
                                   if self.options.routing_draws else routed)
        return self._parts[tokens]


def routing_imbalance(model: ModelSpec, layout: ParallelLayout, tokens: int,
                      options: WorkloadOptions) -> tuple[float, float] | None:
    """(after, before balancing) EP imbalance, max/mean rows per EP rank summed over the MoE layers
    (``routing.ep_imbalance``) of one pass (prefill, or one decode step); None under uniform routing."""
    _validate(model, layout, tokens, options)
    per_pass = pass_tokens(layout, tokens, options)
    layers = moe_routing(model, layout, per_pass, options)
    if layers and options.routing_draws:
        layers = drawn_routing(model, layers, per_pass, options)
    return None if not layers else ep_imbalance(layers)


def _skewed_expert_work(model: ModelSpec, layout: ParallelLayout, tokens: int, routing: LayerRouting,
                        ep_index: int, expert_bytes_per_param: float, decode: bool, precision: Precision) -> Work:
    """Routed experts of EP rank ``ep_index`` under skewed routing: its R rows, R·6·h·w/TP FLOPs, and the
    weights of the replicas it holds (decode: each replica read with probability 1 − (1 − x/B)^B for its
    x expected rows of B tokens; every replica with rows above ``EXACT_MISS_BATCH`` or when the rows are drawn)."""
    h, w = model.comm_dim, model.expert_ffn_width
    per_expert = Fraction(3 * h * w, layout.tp) * precision.weight_bytes(precision.expert, expert_bytes_per_param)
    replicas = routing.replica_rows[ep_index]
    if not decode:
        read = Fraction(len(replicas))
    elif tokens > EXACT_MISS_BATCH or routing.drawn:  # drawn rows: a replica is read iff it got any
        read = Fraction(sum(1 for x in replicas if x))
    else:
        read = Fraction(math.fsum(_hit_probability(x, tokens) for x in replicas))
    work = work_of(Fraction(routing.rows[ep_index] * 6 * h * w, layout.tp), per_expert * read,
                   precision.rate(precision.expert))
    return measured_expert_work(model, layout, work, Fraction(routing.rows[ep_index], max(len(replicas), 1)),
                                precision)


def _hit_probability(rows: int, batch: int) -> float:
    """1 − (1 − x/B)^B: the chance that a replica expecting x of B tokens' rows is read, within an ulp (the
    exact power has B·log2 B bits, too costly for decode batches of thousands of sequences)."""
    return 1.0 if rows >= batch else -math.expm1(batch * math.log1p(-rows / batch))


@dataclass(frozen=True)
class _Batch:
    """The tokens of one micro-batch of one pass, as one rank's layer sees them.

    ``queries``: tokens of the rank's attention group (TP×EP: the whole pass; DP attention: its group's
    share); ``routed``: tokens all ranks route to the experts together (the pass's, over all groups);
    ``local``: tokens of the rank's replicated FFNs (TP×EP: ``queries``; DP attention: its own slice,
    ``routed`` / ranks). Prefill: ``keys`` each query attends to (None: ``queries``) or ``prompts``, a
    batch of prompts each attending to itself; decode: ``context_tokens`` cached tokens per sequence, and
    ``queries_per_sequence`` queries of each sequence (k + 1 with multi-token prediction).
    """

    queries: int
    routed: int
    local: int
    keys: int | None = None
    context_tokens: int | None = None
    prompts: Prompts | None = None
    queries_per_sequence: int = 1


def _batch(layout: ParallelLayout, queries: int, **kw: Any) -> _Batch:
    """A micro-batch of ``queries`` tokens (or sequences) per attention group."""
    if not layout.dp_attention:
        return _Batch(queries, queries, queries, **kw)
    return _Batch(queries, queries * layout.dp, queries // layout.tp, **kw)


def _layer_templates(
    model: ModelSpec,
    layout: ParallelLayout,
    batch: _Batch,
    options: WorkloadOptions,
    tp_group: int,
    ep_group: int,
    routing: PassRouting | None = None,
    ep_index: int = 0,
) -> Templates:
    """The (dense layer, MoE layers) node sequences of one rank for one micro-batch (``_Batch``): a prefill,
    or one decode step. The MoE layers are one sequence for all under uniform routing, else one per MoE layer.
    TP×EP: attention and the dense FFN TP-split, each followed by a TP all-reduce. DP attention: attention
    TP-split inside the group, then a TP reduce-scatter leaves each rank its slice of the group's tokens,
    which it dispatches, runs through the replicated FFNs and all-gathers back at the end of the layer. A
    decode step's queries may be ``queries_per_sequence`` per sequence (multi-token prediction, ``mtp.py``)."""
    tp_kw: dict[str, Any] = {"group": tp_group} if tp_group else {"involved_dims": (True, False)}
    ep_kw: dict[str, Any] = {"group": ep_group} if ep_group else {"involved_dims": (False, True)}
    wb, eb, prec = options.weight_bytes_per_param, options.expert_bytes_per_param, options.precision
    experts_layout, dp = layout.experts, layout.dp_attention
    dispatch_row = prec.row_bytes(prec.dispatch, model.comm_dim, model.bytes_per_activation)
    combine_row = prec.row_bytes(prec.combine, model.comm_dim, model.bytes_per_activation)

    def comp(name: str, work: Work) -> list[_Op]:
        return [] if work.empty else [_Op(name, NodeKind.COMPUTE, work=work)]

    def tp_coll(name: str, kind: CollectiveType, tokens: int) -> list[_Op]:
        if layout.tp == 1:
            return []
        return [_Op(name, NodeKind.COLLECTIVE, collective=kind, size_bytes=tp_allreduce_bytes(model, tokens), **tp_kw)]

    def ep_a2a(name: str, row_bytes: int, pair_bytes: tuple[int, ...] = ()) -> list[_Op]:
        """One EP all-to-all of ``row_bytes`` per token row (skewed: ``pair_bytes`` per member pair)."""
        if layout.ep == 1:
            return []
        if not pair_bytes:
            return [_Op(name, NodeKind.COLLECTIVE, collective=CollectiveType.ALL_TO_ALL,
                        size_bytes=ep_alltoall_bytes(model, experts_layout, batch.routed, row_bytes), **ep_kw)]
        own = sum(pair_bytes[ep_index * layout.ep:(ep_index + 1) * layout.ep])
        return [_Op(name, NodeKind.COLLECTIVE, collective=CollectiveType.ALL_TO_ALL, size_bytes=own,
                    pair_bytes=pair_bytes, **ep_kw)]

    decode = batch.context_tokens is not None
    if decode:
        assert batch.context_tokens is not None
        q = batch.queries_per_sequence
        attention = decode_attention_nodes(model, layout.tp, batch.queries // q, batch.context_tokens, wb, prec, q)
        experts = decode_routed_expert_work(model, experts_layout, batch.routed, eb, prec)
    else:
        attention = (prompt_attention_nodes(model, layout.tp, batch.prompts, wb, prec) if batch.prompts
                     else attention_nodes(model, layout.tp, batch.queries, wb, batch.keys, prec))
        experts = routed_expert_work(model, experts_layout, batch.routed, eb, prec)
    def mem(name: str, moved: Fraction) -> list[_Op]:
        """A memory-bound kernel (measured compute only, ``elementwise.py``): its bytes at the GPU's bandwidth."""
        return [_Op(name, NodeKind.COMPUTE, work=Work(0, int(moved)))] if prec.measured and moved else []

    *projections, core = attention  # measured: the projections' kernels, then the core's (``costs._attention``)
    head = mem("attention_elementwise", attention_bytes(model, layout.tp, batch.queries, prec))
    head += [op for work in projections for op in comp("attention_projections", work)] + comp("attention", core)
    if dp:
        head += tp_coll("tp_reduce_scatter_attn", CollectiveType.REDUCE_SCATTER, batch.queries)
        out = tp_coll("tp_allgather_out", CollectiveType.ALL_GATHER, batch.local)
    else:
        head += tp_coll("tp_allreduce_attn", CollectiveType.ALL_REDUCE, batch.queries)
        out = tp_coll("tp_allreduce_out", CollectiveType.ALL_REDUCE, batch.queries)
    head += mem("ffn_input_elementwise", ffn_input_bytes(model, batch.local, prec, not decode))
    dense_tp = 1 if dp else layout.tp
    dense = head + comp("dense_ffn", dense_ffn_work(model, dense_tp, batch.local, wb, prec))
    if model.dense_ffn_width:
        dense += mem("dense_ffn_elementwise", gated_ffn_bytes(model, batch.local, max(model.dense_ffn_width // dense_tp,
                                                                                      1), prec.dense))
    dense += out
    tail = comp("shared_ffn", shared_ffn_work(model, batch.local, wb, prec))
    if model.shared_experts:
        width = model.shared_experts * (model.shared_expert_ffn_width or model.expert_ffn_width)
        tail += mem("shared_ffn_elementwise", gated_ffn_bytes(model, batch.local, width, prec.dense))
    tail += out

    def around_experts(rows: Fraction | int) -> list[_Op]:
        return mem("expert_elementwise", expert_bytes(model, experts_layout.tp, rows, prec, not decode, dispatch_row))

    if routing is None:
        rows = Fraction(batch.routed * model.top_k, experts_layout.ep)
        moe = (head + ep_a2a("ep_dispatch", dispatch_row) + comp("routed_experts", experts) + around_experts(rows)
               + ep_a2a("ep_combine", combine_row) + tail)
        return tuple(dense), (tuple(moe),)
    layers = []
    for lr in routing.of(batch.routed):  # the micro-batch's own routing over the pass's placement
        dispatch, combine = lr.pair_bytes(dispatch_row, combine_row)  # one pair of tuples per layer for all ranks
        work = _skewed_expert_work(model, experts_layout, batch.routed, lr, ep_index, eb, decode, prec)
        layers.append(tuple(head + ep_a2a("ep_dispatch", dispatch_row, dispatch) + comp("routed_experts", work)
                            + around_experts(lr.rows[ep_index]) + ep_a2a("ep_combine", combine_row, combine) + tail))
    return tuple(dense), tuple(layers)


Templates = tuple[tuple[_Op, ...], tuple[tuple[_Op, ...], ...]]


def micro_batch_sizes(total: int, count: int) -> list[int]:
    """``total`` tokens (prefill) or sequences (decode) split into ``count`` micro-batches, the first
    ``total mod count`` one larger."""
    return [total // count + (1 if b < total % count else 0) for b in range(count)]


def _passes(
    model: ModelSpec, layout: ParallelLayout, tokens: int, options: WorkloadOptions, tp_group: int, ep_group: int,
    routing: PassRouting | None = None, ep_index: int = 0,
) -> list[list[Templates]]:
    """Per forward pass (the prefill, or each decode step: step s reads a cache of ``context_tokens`` + s
    tokens, the tokens of the earlier steps join it), the layer templates of each micro-batch. A prefill
    micro-batch's queries attend to the whole sequence; a decode micro-batch holds whole sequences. Under
    data-parallel attention each attention group holds 1/DP of ``tokens`` (decode: of ``batch``), or with
    ``prompt_lengths`` the whole batch of prompts (micro-batches: whole prompts, ``split_prompts``). ``routing``: the skewed routing of one pass
    (``PassRouting``: each micro-batch routes its own tokens), the same in every decode step."""
    count = options.micro_batches or 1
    groups = layout.dp if layout.dp_attention else 1
    if options.phase == "prefill":
        prompts = options.prompts
        if prompts is not None:
            return [[_with_head(model, layout, options, _layer_templates(
                model, layout, _batch(layout, batch_tokens(part), prompts=part), options, tp_group, ep_group, routing,
                ep_index), batch_tokens(part), sum(n for _, n in part)) for part in split_prompts(prompts, count)]]
        per_group = tokens // groups
        keys = per_group if count > 1 else None
        sizes = micro_batch_sizes(per_group, count)
        return [[_with_head(model, layout, options, _layer_templates(
            model, layout, _batch(layout, t, keys=keys), options, tp_group, ep_group, routing, ep_index), t,
            int(b == len(sizes) - 1)) for b, t in enumerate(sizes)]]
    assert options.batch is not None and options.context_tokens is not None and options.decode_steps is not None
    q = mtp.verified_tokens(options.mtp_draft_tokens)

    def step_templates(b: int, context: int) -> Templates:
        main = _layer_templates(model, layout, _batch(layout, b * q, context_tokens=context, queries_per_sequence=q),
                                options, tp_group, ep_group, routing, ep_index)
        if options.mtp_draft_tokens is None:
            return _with_head(model, layout, options, main, b, b)
        draft = _layer_templates(model, layout, _batch(layout, b, context_tokens=context), options, tp_group,
                                 ep_group, routing, ep_index)
        work = mtp_projection_work(model, b, options.weight_bytes_per_param, options.precision)
        projection = (_Op("mtp_projection", NodeKind.COMPUTE, work=work),)
        rows = b * (q + options.mtp_draft_tokens)  # logits of the k + 1 verified tokens and of each draft
        return _with_head(model, layout, options, mtp.with_mtp_layers(main, draft, projection, model.moe_layers,
                                                                      options.mtp_draft_tokens), rows, rows)

    return [[step_templates(b, options.context_tokens + step) for b in micro_batch_sizes(options.batch // groups, count)]
            for step in range(options.decode_steps)]


def _with_head(model: ModelSpec, layout: ParallelLayout, options: WorkloadOptions, templates: Templates,
               queries: int, sampled: int) -> Templates:
    """A micro-batch's templates with the end of the pass on its last layer (measured compute only,
    ``elementwise.py``): the output head over its ``sampled`` rows (a prefill: one per sequence ending in it;
    decode: every sequence, with MTP every verified and drafted token), then the final norm of its ``queries``
    rows and the sampling. The MoE layers' one shared template, if so, is spelled out per layer."""
    precision = options.precision
    if not precision.measured or not model.moe_layers:
        return templates
    ops: tuple[_Op, ...] = (_Op("output_head", NodeKind.COMPUTE,
                                work=output_head_work(model, layout.tp, sampled, precision)),) if sampled else ()
    ops += (_Op("head_elementwise", NodeKind.COMPUTE, work=Work(0, int(head_bytes(model, queries, sampled)))),)
    dense, moe = templates
    total = mtp.step_model(model, options.mtp_draft_tokens).moe_layers
    layers = moe if len(moe) == total else moe * total
    return dense, (*layers[:-1], layers[-1] + ops)


def _instantiate(model: ModelSpec, passes: list[list[Templates]]) -> tuple[Node, ...]:
    """Lay the passes' layers out as a DAG; pass p's layer L gets ``layer`` = p·num_layers + L.

    One micro-batch: one chain, ids 0, 1, 2, … and deps = (previous id,). Several (docs/workload.md,
    docs/overlap.md): each micro-batch's ops form a chain, cut into stages where it switches
    between compute and communication; the nodes are ordered by (layer, stage, micro-batch, position)
    and that order is also the order of one compute stream and one communication stream, so every
    node depends on its micro-batch's previous node and on the previous node of its stream. The
    stream order makes every rank issue its collectives in the same order, and lets micro-batch b's
    communication run while micro-batch b+1 computes.
    """
    entries: list[tuple[tuple[int, int, int, int], int, _Op]] = []
    for index in range(len(passes) * model.num_layers):
        step, layer = divmod(index, model.num_layers)
        for b, (dense, moe) in enumerate(passes[step]):
            ops = dense if layer < model.first_dense_layers else moe[(layer - model.first_dense_layers) % len(moe)]
            stage = 0
            for pos, op in enumerate(ops):
                if pos and (op.kind is NodeKind.COMPUTE) != (ops[pos - 1].kind is NodeKind.COMPUTE):
                    stage += 1
                entries.append(((index, stage, b, pos), b, op))
    overlapped = any(len(p) > 1 for p in passes)
    if overlapped:
        entries.sort(key=lambda e: e[0])
    nodes: list[Node] = []
    last_of_batch: dict[int, int] = {}
    last_of_stream: dict[NodeKind, int] = {}
    for (index, _, _, _), b, op in entries:
        nid = len(nodes)
        if overlapped:
            deps = tuple(sorted({d for d in (last_of_batch.get(b), last_of_stream.get(op.kind)) if d is not None}))
        else:
            deps = (nid - 1,) if nid else ()
        last_of_batch[b] = last_of_stream[op.kind] = nid
        nodes.append(
            Node(
                id=nid,
                name=op.name,
                kind=op.kind,
                deps=deps,
                flops=op.work.flops,
                bytes_moved=op.work.bytes_moved,
                collective=op.collective,
                size_bytes=op.size_bytes,
                group=op.group,
                involved_dims=op.involved_dims,
                layer=index,
                pair_bytes=op.pair_bytes,
                peak_scale=op.work.peak_scale,
                bw_scale=op.work.bw_scale,
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
    or with ``options.phase == "decode"`` of its decode steps, or with ``options.prompt_lengths`` of a batch of
    prompts (``tokens`` is then unused). Under data-parallel attention ``tokens`` is the pass's, over all groups."""
    options = options or WorkloadOptions()
    _validate(model, layout, tokens, options)
    tp_of, ep_of, table = _comm_groups(layout)
    by_groups = options.collective_addressing == "groups"
    # an all-rank EP group over TP > 1 spans two logical dimensions: addressed by its group, it stays one flat all-to-all
    flat_ep = layout.dp_attention and layout.tp > 1
    cache: dict[tuple[int, int, int], tuple[Node, ...]] = {}
    per_pass = pass_tokens(layout, tokens, options)
    whole = moe_routing(model, layout, per_pass, options)
    routing = None if whole is None else PassRouting(model, layout, options, per_pass, whole)
    graphs = []
    for rank in range(layout.num_ranks):
        key = (tp_of[rank] if by_groups else 0, ep_of[rank] if by_groups or flat_ep else 0)
        ep_index = layout.ep_index(rank) if options.per_expert else 0
        if (*key, ep_index) not in cache:  # ranks with the same groups and load share one node tuple
            passes = _passes(model, layout, tokens, options, *key, routing, ep_index)
            cache[(*key, ep_index)] = _instantiate(mtp.step_model(model, options.mtp_draft_tokens), passes)
        graphs.append(RankGraph(rank=rank, nodes=cache[(*key, ep_index)]))
    name = f"{model.key}_{layout.name}_T{per_pass}"
    if options.prompts:
        name += f"_P{sum(count for _, count in options.prompts)}"
    if options.phase == "decode":
        name = f"{model.key}_{layout.name}_decode_B{options.batch}_C{options.context_tokens}_S{options.decode_steps}"
    if options.mtp_draft_tokens:
        name += f"_MTP{options.mtp_draft_tokens}"
    if options.micro_batches:
        name += f"_MB{options.micro_batches}"
    return Workload(
        name=name,
        graphs=tuple(graphs),
        logical_dims=layout.grid,
        comm_groups=table,
    )
