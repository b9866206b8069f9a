"""Routing as drawn tokens (``routing_draws``, docs/routing.md "Drawn tokens"): each token picks k distinct
experts with probability c_e/T, every sender sends T_s·k rows, seeded draws repeat bit for bit, and the
knob left unset changes no graph and no run key."""

from __future__ import annotations

import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.experiments.inputs import resolved_inputs
from moesim.models.spec import AttentionSpec, ModelSpec
from moesim.system.spec import RunSpec
from moesim.workload.generator import drawn_routing, generate, moe_routing, routing_imbalance
from moesim.workload.graph import CollectiveType
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import WorkloadOptions
from moesim.workload.routing import (
    Redundancy,
    draw_layer,
    draw_tokens,
    layer_routing,
    sender_tokens,
    uniform_counts,
)

TINY = ModelSpec(
    key="tiny-moe", name="tiny", hidden_size=64, comm_dim=32, num_layers=4, first_dense_layers=1,
    attention=AttentionSpec(num_heads=4, num_kv_heads=4, head_dim=16), dense_ffn_width=96,
    routed_experts=16, shared_experts=1, top_k=2, expert_ffn_width=40, vocab_size=10,
)
ROUTINGS = (
    {},
    {"routing": "zipf", "routing_zipf_exponent": 1.2},
    {"routing": "hot", "routing_hot_fraction": 0.25, "routing_hot_share": 0.6},
    {"redundant_experts": 4, "expert_placement": "eplb"},
    {"routing": "zipf", "routing_zipf_exponent": 1.0, "redundant_experts": 4, "expert_placement": "eplb"},
)


def _pairs(lr) -> np.ndarray:
    ep = len(lr.rows)
    return np.asarray(lr.pairs()).reshape(ep, ep)


def test_each_token_picks_k_distinct_experts_at_rates_c_over_t():
    """Every drawn token holds k distinct expert ids, and over N tokens expert e is picked n_e times with
    E[n_e] = N·c_e/T (each pick a Bernoulli(c_e/T) per token): |n_e − N·c_e/T| stays below 5 standard
    deviations √(N·p(1 − p)) for every expert (chance of a false failure < 1e-5 over the 16)."""
    counts = (64, 64, 64, 36, 30, 20, 10, 8, 6, 6, 4, 2, 2, 1, 1, 2)  # ≤ T each, Σ = T·k
    t, k = 64, 5
    assert sum(counts) == t * k and max(counts) <= t
    n = 20000
    picked = draw_tokens(counts, t, n, np.random.default_rng(7))
    assert picked.shape == (n, k)
    assert all(len(set(row)) == k for row in picked.tolist())
    hits = np.bincount(picked.ravel(), minlength=len(counts))
    assert hits[:3].tolist() == [n] * 3  # c_e = T: picked by every token
    for e, c in enumerate(counts):
        p = c / t
        assert abs(hits[e] - n * p) <= 5 * np.sqrt(n * p * (1 - p)) + 1e-9, (e, hits[e], n * p)


@pytest.mark.parametrize("extra", ROUTINGS, ids=["uniform", "zipf", "hot", "redundant", "zipf-redundant"])
def test_draws_conserve_rows_per_sender_and_per_receiver(extra):
    """Per MoE layer: sender s sends exactly T_s·k rows (row sums of the pair matrix), receiver d gets its
    column sum = R_d = Σ of its replicas' rows, the expert counts sum to T·k with none above T (k distinct
    experts per token), and the combine matrix is the dispatch one transposed."""
    layout, t = ParallelLayout(1, 4), 70
    options = WorkloadOptions(routing_draws=True, routing_seed=3, **extra)
    layers = routing_imbalance(TINY, layout, t, options)
    assert layers is not None
    expected = moe_routing(TINY, layout, t, options)
    assert expected is not None
    drawn = drawn_routing(TINY, expected, t, options)
    assert len(drawn) == TINY.num_layers - TINY.first_dense_layers
    for lr in drawn:
        pairs = _pairs(lr)
        assert pairs.sum(axis=1).tolist() == [s * TINY.top_k for s in sender_tokens(t, 4)]
        assert pairs.sum(axis=0).tolist() == list(lr.rows) == [sum(r) for r in lr.replica_rows]
        assert sum(lr.counts) == t * TINY.top_k and max(lr.counts) <= t
        dispatch, combine = lr.pair_bytes(3, 5)
        assert list(dispatch) == (pairs * 3).ravel().tolist()
        assert list(combine) == (pairs.T * 5).ravel().tolist()
    assert len({lr.pairs() for lr in drawn}) > 1  # every layer draws anew


def test_seeded_draws_repeat_bit_for_bit_and_differ_across_seeds():
    """Same options → the same graphs (node for node); another routing_seed → other pair matrices."""
    layout = ParallelLayout(1, 4)
    a = generate(TINY, layout, 64, WorkloadOptions(routing_draws=True, routing_seed=1))
    b = generate(TINY, layout, 64, WorkloadOptions(routing_draws=True, routing_seed=1))
    c = generate(TINY, layout, 64, WorkloadOptions(routing_draws=True, routing_seed=2))
    assert a == b

    def matrices(w):
        return [n.pair_bytes for n in w.graphs[0].nodes if n.collective is CollectiveType.ALL_TO_ALL]

    assert matrices(a) and all(matrices(a))
    assert matrices(a) != matrices(c)


def test_mean_of_many_draws_approaches_the_expected_rows():
    """Over L independent layers of EP = 4 with 2 replicas of expert 0 (redundant), the mean drawn rows of
    each replica tend to its expected rows (``replica_rows``: an expert's rows split evenly over its replicas):
    each replica's per-layer rows are a sum of independent Bernoulli picks, variance ≤ its mean, so the mean
    over L layers is within 5·√(mean/L) of the expectation (false failure < 1e-5 per replica)."""
    t, k, experts, ep = 120, 2, 16, 4
    counts = uniform_counts(experts, t, k)
    expected = layer_routing(counts, ep, "contiguous", 1, None, Redundancy(4))
    layers = 400
    total = np.zeros(sum(len(r) for r in expected.replica_rows))
    for i in range(layers):
        drawn = draw_layer(expected, t, (9, i), 4)
        total += np.concatenate([np.asarray(r, dtype=float) for r in drawn.replica_rows])
    mean = total / layers
    want = np.concatenate([np.asarray(r, dtype=float) for r in expected.replica_rows])
    assert np.all(np.abs(mean - want) <= 5 * np.sqrt(want / layers)), (mean, want)


def test_unequal_receivers_under_uniform_draws():
    """The point of the knob: under uniform routing expected rows give every receiver T·k/EP, drawn tokens
    leave some above the mean (max/mean > 1) while the rows still sum to T·k."""
    layout, t = ParallelLayout(1, 4), 64
    after, _ = routing_imbalance(TINY, layout, t, WorkloadOptions(routing_draws=True)) or (0.0, 0.0)
    assert after > 1.0
    assert routing_imbalance(TINY, layout, t, WorkloadOptions()) is None


def test_unset_knob_leaves_graphs_and_run_keys_unchanged():
    """routing_draws=False is the default: the same graphs as options without it, and a run's resolved
    inputs carry no routing_draws key (existing run ids stay); set, it enters the key."""
    layout = ParallelLayout(2, 4)
    assert generate(TINY, layout, 64, WorkloadOptions(routing_draws=False)) == generate(TINY, layout, 64)
    skewed = {"routing": "zipf", "routing_zipf_exponent": 1.0}
    assert (generate(TINY, layout, 64, WorkloadOptions(routing_draws=False, **skewed))
            == generate(TINY, layout, 64, WorkloadOptions(**skewed)))
    base = RunSpec("deepseek-v4-flash", "1", "TP4EP8")
    unset = resolved_inputs(RunSpec("deepseek-v4-flash", "1", "TP4EP8", overrides={"routing_draws": False}))
    assert "routing_draws" not in str(resolved_inputs(base)) and resolved_inputs(base) == unset
    drawn = resolved_inputs(RunSpec("deepseek-v4-flash", "1", "TP4EP8", overrides={"routing_draws": True}))
    assert "routing_draws" in str(drawn) and drawn != unset


def test_micro_batches_and_decode_steps_route_drawn_rows():
    """Two-batch overlap: each micro-batch's dispatch matrices are drawn rows of its own t tokens (row sums
    T_s·k·row bytes); decode reads exactly the replicas that got rows."""
    layout = ParallelLayout(1, 4)
    w = generate(TINY, layout, 66, WorkloadOptions(routing_draws=True, overlap="two-batch", micro_batches=2))
    dispatch = [n for n in w.graphs[0].nodes if n.name.startswith("ep_dispatch")]
    assert dispatch
    row = TINY.comm_dim * TINY.bytes_per_activation
    for n in dispatch:
        sums = np.asarray(n.pair_bytes).reshape(4, 4).sum(axis=1) // row
        assert sums.tolist() == [s * TINY.top_k for s in sender_tokens(33, 4)]
    decode = WorkloadOptions(routing_draws=True, phase="decode", batch=8)
    assert generate(TINY, layout, 1, decode) == generate(TINY, layout, 1, decode)


def test_draws_refuse_a_bad_value_in_one_line():
    with pytest.raises(MoesimError, match="routing_draws"):
        WorkloadOptions(routing_draws="yes")  # type: ignore[arg-type]
