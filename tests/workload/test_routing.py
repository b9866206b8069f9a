"""Skewed routing and expert placement (docs/routing.md, "Skewed routing and expert placement"):
uniform special cases bit for bit, the all-to-all matrix of a routing table, monotone skew, EPLB."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.models.catalog import get_model
from moesim.models.spec import AttentionSpec, ModelSpec
from moesim.workload.generator import generate, moe_routing, routing_imbalance
from moesim.workload.graph import CollectiveType
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import WorkloadOptions
from moesim.workload.routing import (
    contiguous_placement,
    eplb_placement,
    imbalance,
    popularity_counts,
    rank_rows,
    zipf_weights,
)

TINY = ModelSpec(
    key="tiny-moe", name="tiny", hidden_size=64, comm_dim=32, num_layers=3, first_dense_layers=1,
    attention=AttentionSpec(num_heads=4, num_kv_heads=4, head_dim=16), dense_ffn_width=96,
    routed_experts=16, shared_experts=1, top_k=2, expert_ffn_width=40, vocab_size=10,
)


def test_zipf_exponent_zero_is_uniform_bit_for_bit():
    """Zipf with s = 0 gives every expert the same share: the generated graphs equal uniform's, node by node
    (prefill and decode, TP > 1 and group addressing)."""
    m = get_model("deepseek-v4-flash")
    for layout, extra in ((ParallelLayout(4, 8), {}), (ParallelLayout(2, 16), {"collective_addressing": "groups"}),
                          (ParallelLayout(4, 8), {"phase": "decode", "batch": 3, "decode_steps": 2})):
        uniform = generate(m, layout, 512, WorkloadOptions(**extra))
        zipf0 = generate(m, layout, 512, WorkloadOptions(routing="zipf", routing_zipf_exponent=0.0, **extra))
        for a, b in zip(uniform.graphs, zipf0.graphs, strict=True):
            assert a.nodes == b.nodes
        assert uniform == zipf0


def _table(path, rows):
    path.write_text("\n".join(",".join(str(c) for c in r) for r in rows) + "\n")
    return str(path)


def test_routing_table_sets_the_all_to_all_bytes_of_every_pair(tmp_path):
    """Structural: with a table whose rows sum to T·k, rank d receives the rows of its experts, split
    evenly over the senders; every pair's dispatch bytes = its rows · h · bytes_per_activation and the
    combine returns the transpose. Expert FLOPs follow the rows received."""
    t, k, h, bpa = 32, TINY.top_k, TINY.comm_dim, TINY.bytes_per_activation
    rows = [[30, 10, 0, 0, 4, 4, 0, 0, 2, 2, 2, 2, 1, 1, 3, 3], [0] * 14 + [32, 32]]  # ≤ T per expert
    assert all(sum(r) == t * k for r in rows)
    path = _table(tmp_path / "routes.csv", [[f"e{i}" for i in range(16)], *rows])  # a header line is skipped
    layout = ParallelLayout(tp=2, ep=4)
    wl = generate(TINY, layout, t, WorkloadOptions(routing="table", routing_table=path))
    for g in wl.graphs:
        ep_index = layout.ep_index(g.rank)
        moe = [n for n in g.nodes if n.layer >= TINY.first_dense_layers]
        for layer, row in enumerate(rows, start=TINY.first_dense_layers):
            recv = [sum(row[4 * d:4 * d + 4]) for d in range(4)]
            dispatch, = (n for n in moe if n.layer == layer and n.name == "ep_dispatch")
            combine, = (n for n in moe if n.layer == layer and n.name == "ep_combine")
            experts = [n for n in moe if n.layer == layer and n.name == "routed_experts"]
            assert dispatch.collective is CollectiveType.ALL_TO_ALL
            for s in range(4):
                for d in range(4):
                    share = recv[d] // 4 + (1 if (s - d) % 4 < recv[d] % 4 else 0)
                    assert dispatch.pair_bytes[s * 4 + d] == share * h * bpa
                    assert combine.pair_bytes[d * 4 + s] == share * h * bpa
            assert sum(dispatch.pair_bytes[ep_index::4]) == recv[ep_index] * h * bpa  # its column
            assert dispatch.size_bytes == sum(dispatch.pair_bytes[4 * ep_index:4 * ep_index + 4])
            assert combine.size_bytes == recv[ep_index] * h * bpa
            flops = recv[ep_index] * 6 * h * TINY.expert_ffn_width // layout.tp
            assert [n.flops for n in experts] == ([flops] if flops else [])  # no rows: no expert node


def test_a_table_not_summing_to_t_k_is_rescaled(tmp_path):
    path = _table(tmp_path / "r.csv", [[3] * 8 + [1] * 8])
    layers = moe_routing(TINY, ParallelLayout(1, 4), 16, WorkloadOptions(routing="table", routing_table=path))
    assert layers is not None and len(layers) == 2  # one row serves every MoE layer
    # 32 rows in shares 3/32 and 1/32: 3 and 1 rows per expert
    assert layers[0].counts == (3,) * 8 + (1,) * 8 and layers[0].rows == (12, 12, 4, 4) == layers[1].rows


def test_bad_routing_inputs_are_one_line_errors(tmp_path):
    with pytest.raises(MoesimError, match="routing_table.*not found"):
        moe_routing(TINY, ParallelLayout(1, 4), 8, WorkloadOptions(routing="table", routing_table="/nope.csv"))
    bad = _table(tmp_path / "bad.csv", [[1, 2, 3]])
    with pytest.raises(MoesimError, match="row 1.*3 columns.*16 experts"):
        moe_routing(TINY, ParallelLayout(1, 4), 8, WorkloadOptions(routing="table", routing_table=bad))
    with pytest.raises(MoesimError, match="routing_zipf_exponent.*only with routing=zipf"):
        WorkloadOptions(routing_zipf_exponent=1.0)
    with pytest.raises(MoesimError, match="routing=table needs a file"):
        WorkloadOptions(routing="table")


def test_parquet_table_matches_csv(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [[2 * i for i in range(16)], [16 - i for i in range(16)]]
    csv_path = _table(tmp_path / "r.csv", rows)
    pq.write_table(pa.table({f"e{i}": [r[i] for r in rows] for i in range(16)}), tmp_path / "r.parquet")
    opts = {"routing": "table", "expert_placement": "eplb"}
    a = generate(TINY, ParallelLayout(2, 4), 16, WorkloadOptions(routing_table=csv_path, **opts))
    b = generate(TINY, ParallelLayout(2, 4), 16, WorkloadOptions(routing_table=str(tmp_path / "r.parquet"), **opts))
    assert a.graphs == b.graphs


@settings(max_examples=60, deadline=None)
@given(s1=st.floats(0, 4), ds=st.floats(0, 4), experts=st.sampled_from([8, 16, 64, 256]),
       ep=st.sampled_from([2, 4, 8]), k=st.sampled_from([1, 2, 6, 8]), tokens=st.integers(1, 5000))
def test_more_skew_never_lowers_the_slowest_rank(s1, ds, experts, ep, k, tokens):
    """Property: the m hottest experts' rows (cumulative flooring of capped Zipf shares) never fall as the
    exponent grows, so the EP rank holding the hottest block receives at least as many rows; every rank's
    rows sum to T·k and no expert gets more than T."""
    k = min(k, experts)
    lo = popularity_counts(zipf_weights(experts, s1), tokens, k)
    hi = popularity_counts(zipf_weights(experts, s1 + ds), tokens, k)
    assert sum(lo) == sum(hi) == tokens * k and max(hi) <= tokens and min(hi) >= 0
    for m in range(1, experts + 1):
        assert sum(hi[:m]) >= sum(lo[:m])
    slowest = max(rank_rows(tuple(hi), contiguous_placement(experts, ep)))
    assert slowest >= max(rank_rows(tuple(lo), contiguous_placement(experts, ep)))
    assert slowest >= -(-tokens * k // ep)  # never below the uniform share


@settings(max_examples=40, deadline=None)
@given(s=st.floats(0, 3), seed=st.integers(0, 2**32 - 1), tokens=st.integers(1, 4096))
def test_seeded_zipf_slowest_rank_is_at_least_the_mean(s, seed, tokens):
    """With the hot experts in a seeded random order, the slowest rank never drops below the mean."""
    opts = WorkloadOptions(routing="zipf", routing_zipf_exponent=s, routing_seed=seed)
    for lr in moe_routing(TINY, ParallelLayout(1, 4), tokens, opts) or ():
        assert sum(lr.rows) == tokens * TINY.top_k and max(lr.rows) * 4 >= sum(lr.rows)


@settings(max_examples=80, deadline=None)
@given(counts=st.lists(st.integers(0, 5000), min_size=16, max_size=16).filter(lambda c: sum(c) > 0),
       ep=st.sampled_from([2, 4, 8]), slots=st.integers(0, 3))
def test_eplb_never_raises_the_imbalance(counts, ep, slots):
    """Property: the balanced placement's max/mean rows per rank is never above contiguous; every replica
    slot is filled, every expert placed, and the rows are conserved."""
    c = tuple(counts)
    placed = eplb_placement(c, ep, slots)
    before, after = rank_rows(c, contiguous_placement(16, ep)), rank_rows(c, placed)
    assert sum(after) == sum(c) and imbalance(after) <= imbalance(before)
    assert {e for held in placed for e in held} == set(range(16))
    assert placed == contiguous_placement(16, ep) or all(len(h) == 16 // ep + slots for h in placed)


def test_eplb_lowers_the_imbalance_of_a_skewed_table():
    """A Zipf-1.2 table over 256 experts on EP 8: EPLB with one redundant slot per rank brings max/mean
    from well above 1 to within 2 % of 1."""
    counts = tuple(popularity_counts(zipf_weights(256, 1.2), 4096, 8))
    before = imbalance(rank_rows(counts, contiguous_placement(256, 8)))
    after = imbalance(rank_rows(counts, eplb_placement(counts, 8, 1)))
    assert before > 3 and after < 1.02


def test_imbalance_summary_and_placement_file(tmp_path):
    layout = ParallelLayout(1, 4)
    opts = dict(routing="hot", routing_hot_fraction=0.125, routing_hot_share=0.75)
    after, before = routing_imbalance(TINY, layout, 64, WorkloadOptions(expert_placement="eplb", **opts))
    assert after < before
    assert routing_imbalance(TINY, layout, 64, WorkloadOptions()) is None
    # a placement file: expert 0 on every rank (replicated 4×), the rest spread
    lines = [[0, 1, 2, 3, 4], [0, 5, 6, 7, 8], [0, 9, 10, 11, 12], [0, 13, 14, 15, 1]]
    f = tmp_path / "place.txt"
    f.write_text("\n".join(",".join(map(str, ln)) for ln in lines))
    layers = moe_routing(TINY, layout, 64, WorkloadOptions(expert_placement=str(f), **opts))
    assert layers is not None
    lr = layers[0]
    assert lr.placement == tuple(tuple(ln) for ln in lines)
    assert sum(lr.rows) == 64 * TINY.top_k and [len(r) for r in lr.replica_rows] == [5] * 4
    # expert 0's rows are split over its 4 replicas, expert 1's over 2
    assert sum(r[0] for r in lr.replica_rows) == lr.counts[0]
    assert lr.replica_rows[0][1] + lr.replica_rows[3][4] == lr.counts[1]


def test_capped_shares_respect_one_over_k():
    counts = popularity_counts([Fraction(1000)] + [Fraction(1)] * 15, 100, 4)
    assert counts[0] == 100 and sum(counts) == 400


def test_decode_steps_route_the_batch(tmp_path):
    """Decode: each step routes the B new tokens; an EP rank reads each replica's weights with probability
    1 − (1 − x/B)^B for its x expected rows (closed form), and every step repeats the same routing."""
    b = 4
    row = [3, 1, 0, 0, 0, 0, 0, 0, 2, 1, 1, 0, 0, 0, 0, 0]  # 8 = B·k rows
    path = _table(tmp_path / "d.csv", [row])
    layout = ParallelLayout(tp=1, ep=4)
    opts = WorkloadOptions(phase="decode", batch=b, context_tokens=16, decode_steps=2, routing="table",
                           routing_table=path)
    wl = generate(TINY, layout, 1, opts)
    h, w = TINY.comm_dim, TINY.expert_ffn_width
    per_expert = Fraction(3 * h * w) * Fraction(1, 2)  # expert_bytes_per_param 0.5
    for ep_index, block in ((0, row[0:4]), (2, row[8:12])):
        nodes = [n for n in wl.graphs[ep_index].nodes if n.name == "routed_experts"]
        read = sum(1 - (1 - Fraction(x, b)) ** b for x in block)
        assert [n.bytes_moved for n in nodes] == [int(per_expert * read)] * 4  # 2 MoE layers × 2 steps
        assert {n.flops for n in nodes} == {sum(block) * 6 * h * w}
    assert not [n for n in wl.graphs[1].nodes if n.name == "routed_experts"]  # rank 1 receives nothing
