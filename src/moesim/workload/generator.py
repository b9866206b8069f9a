"""The MoE prefill (and decode-step) workload generator: assembles one execution graph per rank
(docs/study.md §3; decode: docs/workload.md, "Decode").

Per layer and micro-batch the nodes form a chain; with one micro-batch (the default) that chain is the
whole graph (no compute–communication overlap), with several the micro-batches overlap (``_instantiate``,
docs/overlap.md):

* MoE layer: attention → TP all-reduce → EP dispatch all-to-all → routed experts → EP combine
  all-to-all → shared FFN (router + shared experts) → TP output all-reduce;
* dense layer: attention → TP all-reduce → dense FFN → TP output all-reduce.

What each node costs is in ``costs.py``, the knobs in ``options.py``, the per-rank totals in
``summary.py``. Under uniform routing every rank's graph is the same and every MoE layer repeats the
same node sequence (the engine's fast-forward exploits this). Skewed routing (``routing.py``) gives
each MoE layer its own all-to-all matrix and each EP rank its own expert work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
    attention_work,
    decode_attention_work,
    decode_routed_expert_work,
    dense_ffn_work,
    ep_alltoall_bytes,
    measured_expert_work,
    mtp_projection_work,
    routed_expert_work,
    shared_ffn_work,
    tp_allreduce_bytes,
    work_of,
)
from moesim.workload.graph import CollectiveType, Node, NodeKind, RankGraph, Workload
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import STUDY_TOKENS, TOKENS, WorkloadOptions
from moesim.workload.precision import Precision
from moesim.workload.routing import (
    PLACEMENT_RULES,
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
    layout.validate(num_ranks=options.num_ranks, routed_experts=model.routed_experts, source=src)
    per_pass = options.batch if options.phase == "decode" else tokens
    if options.micro_batches and per_pass is not None and options.micro_batches > per_pass:
        what = "batch" if options.phase == "decode" else "tokens"
        raise input_error("workload options", "micro_batches",
                          f"{options.micro_batches} micro-batches exceed the {per_pass} {what} of a pass")


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
                        ep_index: int, expert_bytes_per_param: float, decode: bool, precision: Precision) -> Work:
    """Routed experts of EP rank ``ep_index`` under skewed routing: its R rows, R·6·h·w/TP FLOPs, and the
    weights of the replicas it holds (decode: each replica read with probability 1 − (1 − x/B)^B for its
    x expected rows of B tokens; every replica with rows above ``EXACT_MISS_BATCH``)."""
    h, w = model.comm_dim, model.expert_ffn_width
    per_expert = Fraction(3 * h * w, layout.tp) * precision.weight_bytes(precision.expert, expert_bytes_per_param)
    replicas = routing.replica_rows[ep_index]
    if not decode:
        read = Fraction(len(replicas))
    elif tokens > EXACT_MISS_BATCH:
        read = Fraction(sum(1 for x in replicas if x))
    else:
        read = sum((1 - (1 - Fraction(min(x, tokens), tokens)) ** tokens for x in replicas), Fraction(0))
    work = work_of(Fraction(routing.rows[ep_index] * 6 * h * w, layout.tp), per_expert * read,
                   precision.rate(precision.expert))
    return measured_expert_work(model, layout, work, Fraction(routing.rows[ep_index], max(len(replicas), 1)),
                                precision)


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
    keys: int | None = None,
    queries_per_sequence: int = 1,
) -> Templates:
    """The (dense layer, MoE layers) node sequences of one rank: a prefill of ``tokens`` tokens (whose
    queries attend to ``keys`` tokens, default ``tokens``: a micro-batch of a longer sequence), or
    with ``context_tokens`` one decode step of ``tokens`` sequences over a cache that long. The MoE
    layers are one sequence for all under uniform routing, else one per MoE layer. A decode step's
    ``tokens`` may be ``queries_per_sequence`` per sequence (multi-token prediction, ``mtp.py``)."""
    tp_kw: dict[str, Any] = {"group": tp_group} if tp_group else {"involved_dims": (True, False)}
    ep_kw: dict[str, Any] = {"group": ep_group} if ep_group else {"involved_dims": (False, True)}
    v_tp = tp_allreduce_bytes(model, tokens)
    wb, eb, prec = options.weight_bytes_per_param, options.expert_bytes_per_param, options.precision
    dispatch_row = prec.row_bytes(prec.dispatch, model.comm_dim, model.bytes_per_activation)
    combine_row = prec.row_bytes(prec.combine, model.comm_dim, model.bytes_per_activation)

    def comp(name: str, work: Work) -> list[_Op]:
        return [] if work.empty else [_Op(name, NodeKind.COMPUTE, work=work)]

    def tp_ar(name: str) -> list[_Op]:
        if layout.tp == 1:
            return []
        return [
            _Op(name, NodeKind.COLLECTIVE, collective=CollectiveType.ALL_REDUCE, size_bytes=v_tp, **tp_kw)
        ]

    def ep_a2a(name: str, row_bytes: int, pairs: tuple[int, ...] = ()) -> list[_Op]:
        """One EP all-to-all of ``row_bytes`` per token row."""
        if layout.ep == 1:
            return []
        if not pairs:
            return [_Op(name, NodeKind.COLLECTIVE, collective=CollectiveType.ALL_TO_ALL,
                        size_bytes=ep_alltoall_bytes(model, layout, tokens, row_bytes), **ep_kw)]
        pair_bytes = tuple(p * row_bytes for p in pairs)
        own = sum(pair_bytes[ep_index * layout.ep:(ep_index + 1) * layout.ep])
        return [_Op(name, NodeKind.COLLECTIVE, collective=CollectiveType.ALL_TO_ALL, size_bytes=own,
                    pair_bytes=pair_bytes, **ep_kw)]

    if context_tokens is None:
        attention = attention_work(model, layout.tp, tokens, wb, keys, prec)
        experts = routed_expert_work(model, layout, tokens, eb, prec)
    else:
        attention = decode_attention_work(model, layout.tp, tokens // queries_per_sequence, context_tokens, wb, prec,
                                          queries_per_sequence)
        experts = decode_routed_expert_work(model, layout, tokens, eb, prec)
    head = comp("attention", attention) + tp_ar("tp_allreduce_attn")
    dense = head + comp("dense_ffn", dense_ffn_work(model, layout.tp, tokens, wb, prec)) + tp_ar("tp_allreduce_out")
    tail = comp("shared_ffn", shared_ffn_work(model, tokens, wb, prec)) + tp_ar("tp_allreduce_out")
    if routing is None:
        moe = (head + ep_a2a("ep_dispatch", dispatch_row) + comp("routed_experts", experts)
               + ep_a2a("ep_combine", combine_row) + tail)
        return tuple(dense), (tuple(moe),)
    layers = []
    for lr in routing:
        pairs = lr.pairs()
        ep = layout.ep
        back = tuple(pairs[s * ep + d] for d in range(ep) for s in range(ep))  # combine: each receiver returns its rows
        work = _skewed_expert_work(model, layout, tokens, lr, ep_index, eb, context_tokens is not None, prec)
        layers.append(tuple(head + ep_a2a("ep_dispatch", dispatch_row, pairs) + comp("routed_experts", work)
                            + ep_a2a("ep_combine", combine_row, back) + tail))
    return tuple(dense), tuple(layers)


Templates = tuple[tuple[_Op, ...], tuple[tuple[_Op, ...], ...]]


def micro_batch_sizes(total: int, count: int) -> list[int]:
    """``total`` tokens (prefill) or sequences (decode) split into ``count`` micro-batches, the first
    ``total mod count`` one larger."""
    return [total // count + (1 if b < total % count else 0) for b in range(count)]


def _passes(
    model: ModelSpec, layout: ParallelLayout, tokens: int, options: WorkloadOptions, tp_group: int, ep_group: int,
    routing: tuple[LayerRouting, ...] | None = None, ep_index: int = 0,
) -> list[list[Templates]]:
    """Per forward pass (the prefill, or each decode step: step s reads a cache of ``context_tokens`` + s
    tokens, the tokens of the earlier steps join it), the layer templates of each micro-batch. A prefill
    micro-batch's queries attend to the whole sequence; a decode micro-batch holds whole sequences.
    ``routing``: the skewed routing of one pass (``moe_routing``), the same in every decode step."""
    count = options.micro_batches or 1
    if options.phase == "prefill":
        keys = tokens if count > 1 else None
        return [[_layer_templates(model, layout, t, options, tp_group, ep_group, None, routing, ep_index, keys)
                 for t in micro_batch_sizes(tokens, count)]]
    assert options.batch is not None and options.context_tokens is not None and options.decode_steps is not None
    q = mtp.verified_tokens(options.mtp_draft_tokens)

    def step_templates(b: int, context: int) -> Templates:
        main = _layer_templates(model, layout, b * q, options, tp_group, ep_group, context, routing, ep_index, None, q)
        if options.mtp_draft_tokens is None:
            return main
        draft = _layer_templates(model, layout, b, options, tp_group, ep_group, context, routing, ep_index)
        work = mtp_projection_work(model, b, options.weight_bytes_per_param, options.precision)
        projection = (_Op("mtp_projection", NodeKind.COMPUTE, work=work),)
        return mtp.with_mtp_layers(main, draft, projection, model.moe_layers, options.mtp_draft_tokens)

    return [[step_templates(b, options.context_tokens + step) for b in micro_batch_sizes(options.batch, count)]
            for step in range(options.decode_steps)]


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
            cache[(*key, ep_index)] = _instantiate(mtp.step_model(model, options.mtp_draft_tokens), passes)
        graphs.append(RankGraph(rank=rank, nodes=cache[(*key, ep_index)]))
    name = f"{model.key}_{layout.name}_T{tokens}"
    if options.phase == "decode":
        name = f"{model.key}_{layout.name}_decode_B{options.batch}_C{options.context_tokens}_S{options.decode_steps}"
    if options.mtp_draft_tokens:
        name += f"_MTP{options.mtp_draft_tokens}"
    if options.micro_batches:
        name += f"_MB{options.micro_batches}"
    return Workload(
        name=name,
        graphs=tuple(graphs),
        logical_dims=(layout.tp, layout.ep),
        comm_groups=table,
    )
