"""Structural and oracle tests for every registered collective algorithm."""

from __future__ import annotations

import pytest

from moesim.errors import MoesimError
from moesim.system.collectives import COLLECTIVES, StepTiming, chunk_sizes, plan_for
from moesim.system.collectives.dbt import dbt_tree
from moesim.workload.graph import CollectiveType as C

T = StepTiming()

# Bytes each member must send (= receive) for a chunk of D bytes over N members (B.2–B.5).
EXPECTED_BYTES = {
    ("ring", C.ALL_REDUCE): lambda n, d: 2 * (n - 1) * (d // n),
    ("ring", C.REDUCE_SCATTER): lambda n, d: (n - 1) * (d // n),
    ("ring", C.ALL_GATHER): lambda n, d: (n - 1) * d,
    ("ring", C.ALL_TO_ALL): lambda n, d: n * (n - 1) // 2 * (d // n),
    ("direct", C.ALL_TO_ALL): lambda n, d: (n - 1) * (d // n),
    ("direct", C.ALL_REDUCE): lambda n, d: 2 * (n - 1) * (d // n),
    ("halving_doubling", C.ALL_REDUCE): lambda n, d: 2 * sum(d >> (s + 1) for s in range(n.bit_length() - 1)),
    ("halving_doubling", C.REDUCE_SCATTER): lambda n, d: sum(d >> (s + 1) for s in range(n.bit_length() - 1)),
    ("halving_doubling", C.ALL_GATHER): lambda n, d: (n - 1) * d,
}


def all_cases():
    for entry in COLLECTIVES:
        for ctype in sorted(entry.obj.supports):
            for n in (2, 4, 8, 16):
                yield entry.name, ctype, n


@pytest.mark.parametrize("name,ctype,n", list(all_cases()))
def test_every_member_sends_and_receives_the_right_bytes_and_dependencies_point_backwards(name, ctype, n):
    d = 1 << 20
    plan = plan_for(name, ctype, n, d, T)
    for m in range(n):
        if (name, ctype) in EXPECTED_BYTES:
            assert plan.bytes_sent(m) == EXPECTED_BYTES[(name, ctype)](n, d)
        assert plan.bytes_received(m) == plan.bytes_sent(m) or name == "dbt"
        assert all(0 <= a < len(plan.transfers) for a in plan.exit_after[m])
    for j, t in enumerate(plan.transfers):
        assert t.src != t.dst
        assert all(a != j for a in t.after)
        # a transfer may only wait for messages its source received
        assert all(plan.transfers[a].dst == t.src for a in t.after)


def test_ring_all_reduce_is_2n_minus_2_pipelined_steps_of_d_over_n():
    n, d = 8, 8000
    plan = plan_for("ring", C.ALL_REDUCE, n, d, T)
    assert len(plan.transfers) == n * 2 * (n - 1)
    assert {t.size_bytes for t in plan.transfers} == {d // n}
    assert all((t.dst - t.src) % n == 1 for t in plan.transfers)
    # the first N-1 receipts are reduced: their successors carry the reduction delay
    red = T.reduction_s(d // n)
    assert plan.transfers[n].delay_s == pytest.approx(T.endpoint_delay_s + red)
    assert plan.transfers[(n - 1) * n].delay_s == pytest.approx(T.endpoint_delay_s)


def test_dbt_edges_carry_the_whole_chunk_and_trees_alternate():
    n, d = 8, 1 << 20
    for chunk in (0, 1):
        plan = plan_for("dbt", C.ALL_REDUCE, n, d, T, chunk)
        assert {t.size_bytes for t in plan.transfers} == {d}
        assert len(plan.transfers) == 2 * (n - 1)  # every non-root member: one up, one down
    assert dbt_tree(8, use_max=True)[0] == 7 and dbt_tree(8, use_max=False)[0] == 0
    root, parent, children = dbt_tree(8, use_max=True)
    assert parent[3] == 7 and sorted(children[3]) == [1, 5] and sorted(children[1]) == [0, 2]
    root, parent, children = dbt_tree(8, use_max=False)
    assert parent[4] == 0 and sorted(children[4]) == [2, 6] and sorted(children[6]) == [5, 7]


def test_direct_all_to_all_sends_d_over_n_to_every_peer_at_once():
    n, d = 16, 1 << 20
    plan = plan_for("direct", C.ALL_TO_ALL, n, d, T)
    for m in range(n):
        mine = [t for t in plan.transfers if t.src == m]
        assert sorted(t.dst for t in mine) == [p for p in range(n) if p != m]
        assert all(t.size_bytes == d // n and t.after == () for t in mine)


def test_direct_k_window_releases_one_send_per_receipt():
    plan = plan_for("direct4", C.ALL_TO_ALL, 8, 8000, T)
    mine = [t for t in plan.transfers if t.src == 0]
    assert sum(1 for t in mine if not t.after) == 4
    assert all(len(t.after) == 1 for t in mine[4:])


def test_chunking_follows_astra_sim_rounding():
    assert chunk_sizes(C.ALL_REDUCE, 1000, 4, 32) == [250] * 4
    assert chunk_sizes(C.ALL_REDUCE, 1001, 4, 32) == [250] * 5  # every chunk floor(size/K): total rounds up
    assert chunk_sizes(C.ALL_REDUCE, 64, 4, 32) == [32] * 4  # inflated to total_nodes
    assert chunk_sizes(C.ALL_GATHER, 64, 4, 32) == [16] * 4  # … except all-gather


def test_unsupported_and_unknown_algorithms_are_clear_errors():
    with pytest.raises(MoesimError, match="cannot run ALL_TO_ALL"):
        plan_for("dbt", C.ALL_TO_ALL, 8, 100, T)
    with pytest.raises(MoesimError, match="allowed"):
        plan_for("nope", C.ALL_REDUCE, 8, 100, T)
    with pytest.raises(MoesimError, match="power-of-two"):
        plan_for("dbt", C.ALL_REDUCE, 6, 100, T)


def test_astra_receives_chain_a_ring_members_steps_and_count_arrivals_per_pair():
    """ASTRA-sim posts step k's receive with step k's send: with ``receive_with_send`` each ring step after
    the first also waits for the member's own previous send, and its exit for its last one. Arrivals are
    counted per (sender, receiver): on a ring each neighbour pair carries all 2(n-1) steps, in step order."""
    n = 4
    plain = plan_for("ring", C.ALL_REDUCE, n, 4096, StepTiming())
    astra = plan_for("ring", C.ALL_REDUCE, n, 4096, StepTiming(receive_with_send=True))
    assert all(not t.after_sent for t in plain.transfers) and not plain.exit_after_sent
    for j, t in enumerate(astra.transfers):
        k, i = divmod(j, n)
        assert t.after_sent == (() if k == 0 else ((k - 1) * n + i,)) and t.after == plain.transfers[j].after
    assert astra.exit_after_sent == tuple(((2 * (n - 1) - 1) * n + i,) for i in range(n))
    of, groups = astra.pair_slots
    assert sorted(groups) == sorted(tuple(k * n + i for k in range(2 * (n - 1))) for i in range(n))
    assert all(astra.transfers[g[0]].src == astra.transfers[j].src for g in groups for j in g)
    assert plan_for("direct", C.ALL_TO_ALL, n, 4096, StepTiming()).pair_slots is None  # one message per pair


def test_the_ep_all_to_all_choices_are_the_algorithms_marked_for_it():
    """``all_to_all_algorithm`` offers the registered algorithms marked ``expert_all_to_all`` (direct, the
    per-server hierarchical one and DeepEP's low-latency one), each able to run ALL_TO_ALL; ring runs one but is not offered; marking an
    algorithm that cannot run ALL_TO_ALL is refused at registration."""
    from moesim.system.collectives.base import Algorithm, expert_all_to_all_algorithms
    from moesim.system.run import ALL_TO_ALL_ALGORITHMS, OVERRIDES

    assert ALL_TO_ALL_ALGORITHMS == expert_all_to_all_algorithms() == ("direct", "hierarchical", "low_latency")
    assert OVERRIDES["all_to_all_algorithm"].allowed.choices == ALL_TO_ALL_ALGORITHMS
    assert all(C.ALL_TO_ALL in COLLECTIVES.get(n).supports for n in ALL_TO_ALL_ALGORITHMS)
    assert C.ALL_TO_ALL in COLLECTIVES.get("ring").supports and "ring" not in ALL_TO_ALL_ALGORITHMS
    with pytest.raises(MoesimError, match="expert_all_to_all"):
        Algorithm(frozenset({C.ALL_REDUCE}), COLLECTIVES.get("ring").plan, expert_all_to_all=True)
