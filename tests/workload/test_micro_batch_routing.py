"""Two-batch overlap under skewed routing and redundant experts: each micro-batch routes its own tokens over
the pass's placement (``generator.PassRouting``, docs/overlap.md); rows are conserved per micro-batch and in
total."""

from __future__ import annotations

import pytest

from moesim.models.spec import AttentionSpec, ModelSpec
from moesim.workload.generator import generate, micro_batch_sizes, moe_routing
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import WorkloadOptions
from moesim.workload.routing import rank_rows

TINY = ModelSpec(
    key="tiny-moe", name="tiny", hidden_size=64, comm_dim=32, num_layers=3, first_dense_layers=1,
    attention=AttentionSpec(num_heads=4, num_kv_heads=4, head_dim=16), dense_ffn_width=96,
    routed_experts=16, shared_experts=1, top_k=2, expert_ffn_width=40, vocab_size=10,
)
ROW = TINY.comm_dim * TINY.bytes_per_activation


def _dispatches(wl, layer):
    """Per micro-batch (issue order), the rows of one layer's dispatch: its EP×EP pair bytes / row bytes."""
    nodes = [n for n in wl.graphs[0].nodes if n.layer == layer and n.name == "ep_dispatch"]
    return [[p // ROW for p in n.pair_bytes] for n in nodes]


CASES = [
    ("TP1EP4", 33, {"routing": "zipf", "routing_zipf_exponent": 1.2}),
    ("TP1EP4", 40, {"routing": "hot", "routing_hot_fraction": 0.25, "routing_hot_share": 0.8, "micro_batches": 3}),
    ("TP1EP8", 21, {"redundant_experts": 8, "expert_placement": "eplb"}),
    ("DP4EP4", 36, {"routing": "zipf", "routing_zipf_exponent": 1.0, "redundant_experts": 4,
                    "expert_placement": "eplb"}),
    ("TP1EP4", 0, {"phase": "decode", "batch": 7, "routing": "zipf", "routing_zipf_exponent": 1.5}),
]


@pytest.mark.parametrize(("strategy", "tokens", "extra"), CASES)
def test_each_micro_batch_routes_its_own_tokens(strategy, tokens, extra):
    """Micro-batch b of t_b tokens (``micro_batch_sizes``) sends t_b·k rows in every MoE layer, the
    micro-batches together the pass's T·k; its rows per expert are the routing of t_b tokens
    (``moe_routing``) and its rows per EP rank those counts spread over the pass's placement."""
    layout = ParallelLayout.parse(strategy)
    opts = WorkloadOptions(overlap="two-batch", **extra)
    wl = generate(TINY, layout, tokens or 1, opts)
    per_pass = opts.batch if opts.phase == "decode" else tokens
    groups = layout.dp if layout.dp_attention else 1
    sizes = [t * groups for t in micro_batch_sizes(per_pass // groups, opts.micro_batches)]
    whole = moe_routing(TINY, layout, per_pass, opts)
    assert whole is not None
    for layer in range(TINY.first_dense_layers, TINY.num_layers):
        moe = layer - TINY.first_dense_layers
        dispatches = _dispatches(wl, layer)
        assert len(dispatches) == len(sizes)
        for rows, t in zip(dispatches, sizes, strict=True):
            assert sum(rows) == t * TINY.top_k
            own = moe_routing(TINY, layout, t, opts)
            assert own is not None
            counts = own[moe % len(own)].counts
            assert sum(counts) == t * TINY.top_k
            received = tuple(sum(rows[s * layout.ep + d] for s in range(layout.ep)) for d in range(layout.ep))
            assert received == rank_rows(counts, whole[moe % len(whole)].placement)
        assert sum(sum(r) for r in dispatches) == per_pass * TINY.top_k


def test_one_micro_batch_keeps_the_pass_routing():
    """Without overlap the pass is one micro-batch: its dispatch rows are the pass's routing itself."""
    layout = ParallelLayout.parse("TP1EP4")
    opts = WorkloadOptions(routing="zipf", routing_zipf_exponent=1.2)
    wl = generate(TINY, layout, 33, opts)
    whole = moe_routing(TINY, layout, 33, opts)
    assert whole is not None
    for moe, lr in enumerate(whole):
        assert _dispatches(wl, TINY.first_dense_layers + moe) == [list(lr.pairs())]


@pytest.mark.parametrize("extra", [{"redundant_experts": 8, "expert_placement": "eplb"},
                                   {"routing": "zipf", "routing_zipf_exponent": 1.2, "overlap": "two-batch"}])
def test_mtp_verification_and_drafts_route_their_own_tokens(extra):
    """MTP with k = 2 drafts over B = 12 sequences: each main MoE layer dispatches the routing of B·(k + 1)
    tokens per micro-batch, each MTP layer that of B, over the pass's placement."""
    layout, k, b = ParallelLayout.parse("TP1EP8"), 2, 12
    opts = WorkloadOptions(phase="decode", batch=b, mtp_draft_tokens=k, mtp_acceptance=0.8, **extra)
    wl = generate(TINY, layout, 1, opts)
    sizes = micro_batch_sizes(b, opts.micro_batches or 1)
    whole = moe_routing(TINY, layout, b, opts)
    assert whole is not None
    for layer in range(TINY.first_dense_layers, TINY.num_layers + k):
        verified = layer < TINY.num_layers
        moe = (layer - TINY.first_dense_layers) if verified else 0
        for rows, t in zip(_dispatches(wl, layer), sizes, strict=True):
            tokens = t * (k + 1) if verified else t
            assert sum(rows) == tokens * TINY.top_k
            own = moe_routing(TINY, layout, tokens, opts)
            assert own is not None
            received = tuple(sum(rows[s * layout.ep + d] for s in range(layout.ep)) for d in range(layout.ep))
            assert received == rank_rows(own[moe % len(own)].counts, whole[moe % len(whole)].placement)
