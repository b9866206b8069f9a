"""All-to-alls with per-pair sizes (skewed routing, redundant experts) on every EP algorithm
(``Algorithm.pair_plan``): low_latency is the direct pair plan; hierarchical relays each pair's bytes through
the rail peer, one deduplicated RDMA message per destination server (docs/overlap.md)."""

from __future__ import annotations

import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.system.collectives import Members, StepTiming
from moesim.system.collectives.base import pair_plan_for
from moesim.system.collectives.direct import direct_pair_plan
from moesim.system.collectives.hierarchical import expected_server_fanout, hierarchical_plan
from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec
from moesim.workload.graph import CollectiveType as C

TIMING = StepTiming()
SERVERS = (0, 0, 0, 1, 1, 2, 2, 2)  # uneven servers: 3, 2 and 3 members
N = len(SERVERS)


def _pairs(seed: int) -> tuple[int, ...]:
    rng = np.random.default_rng(seed)
    return tuple(0 if i == j else int(x) for (i, j), x in zip(
        ((i, j) for i in range(N) for j in range(N)), rng.integers(0, 500_000, N * N), strict=True))


def _net_bytes(plan) -> dict[tuple[int, int], int]:
    """Bytes of origin i that stay at j: what j receives of i's (a forward's origin is the sender of the RDMA
    piece it waits for) minus what j forwards on."""
    t = plan.transfers
    net: dict[tuple[int, int], int] = {}
    for x in t:
        origin = t[x.after[0]].src if x.after else x.src
        net[origin, x.dst] = net.get((origin, x.dst), 0) + x.size_bytes
        if origin != x.src:
            net[origin, x.src] = net.get((origin, x.src), 0) - x.size_bytes
    return net


def test_skewed_low_latency_is_the_direct_pair_plan():
    pairs = _pairs(1)
    plan = pair_plan_for("low_latency", N, pairs, TIMING, Members(SERVERS))
    assert plan == direct_pair_plan(N, pairs, TIMING) == pair_plan_for("direct", N, pairs, TIMING)
    assert all(plan.bytes_sent(i) == sum(pairs[i * N:(i + 1) * N]) for i in range(N))


def test_hierarchical_pairs_conserve_every_pairs_bytes():
    """Without routing information (no deduplication) the bytes of origin i left at j are pairs[i·n + j], for
    every pair, and the RDMA message from i to server S carries Σ_{j on S} pairs[i·n + j]."""
    pairs = _pairs(2)
    plan = pair_plan_for("hierarchical", N, pairs, TIMING, Members(SERVERS))
    net = _net_bytes(plan)
    assert {k: v for k, v in net.items() if v} == {(i, j): pairs[i * N + j] for i in range(N) for j in range(N)
                                                   if pairs[i * N + j]}
    rdma = {}
    for x in plan.transfers:
        if SERVERS[x.src] != SERVERS[x.dst]:
            rdma[x.src, SERVERS[x.dst]] = rdma.get((x.src, SERVERS[x.dst]), 0) + x.size_bytes
    assert rdma == {(i, s): sum(pairs[i * N + j] for j in range(N) if SERVERS[j] == s)
                    for i in range(N) for s in set(SERVERS) if s != SERVERS[i]}


def test_hierarchical_pairs_deduplicate_the_rdma_message_as_uniform_routing_does():
    """With routing (E = 16, top-2) each forward still carries its pair's bytes and the RDMA message from i to
    S is round(dedup(S) · Σ_{j on S} pairs), dedup(S) = expected_server_fanout's ratio for S."""
    pairs, routing = _pairs(3), (16, 2, 1, 1)
    plan = pair_plan_for("hierarchical", N, pairs, TIMING, Members(SERVERS, routing))
    fanout = expected_server_fanout(N, SERVERS, routing)
    assert all(f < 1 for f in fanout.values())
    rdma: dict[tuple[int, int], int] = {}
    for x in plan.transfers:
        if SERVERS[x.src] != SERVERS[x.dst]:
            rdma[x.src, SERVERS[x.dst]] = rdma.get((x.src, SERVERS[x.dst]), 0) + x.size_bytes
        elif x.after and plan.transfers[x.after[0]].src != x.src:  # a forward
            assert SERVERS[plan.transfers[x.after[0]].src] != SERVERS[x.dst]
    assert rdma == {(i, s): round(sum(pairs[i * N + j] for j in range(N) if SERVERS[j] == s) * fanout[s])
                    for i in range(N) for s in set(SERVERS) if s != SERVERS[i]}
    net = _net_bytes(plan)
    assert all(net.get((i, j), 0) == pairs[i * N + j] for i in range(N) for j in range(N)
               if i != j and j != _rail_peer(i, SERVERS[j]))


def _rail_peer(i: int, server: int) -> int:
    here = [m for m in range(N) if SERVERS[m] == SERVERS[i]]
    there = [m for m in range(N) if SERVERS[m] == server]
    return there[here.index(i) % len(there)]


@pytest.mark.parametrize("routing", [(), (16, 2, 1, 1)])
def test_uniform_pairs_give_the_uniform_hierarchical_plan(routing):
    """D/N on every pair: the pair plan is the uniform plan, transfer for transfer."""
    size = 8 * 3_000_000
    pairs = tuple(0 if i == j else size // N for i in range(N) for j in range(N))
    members = Members(SERVERS, routing)
    assert pair_plan_for("hierarchical", N, pairs, TIMING, members) == hierarchical_plan(C.ALL_TO_ALL, N, size,
                                                                                         TIMING, members)


def test_one_server_and_unknown_algorithms():
    pairs = _pairs(4)
    assert pair_plan_for("hierarchical", N, pairs, TIMING, Members((0,) * N)) == direct_pair_plan(N, pairs, TIMING)
    assert pair_plan_for("hierarchical", N, pairs, TIMING) == direct_pair_plan(N, pairs, TIMING)
    with pytest.raises(MoesimError, match=r"'ring' cannot run it \(allowed: direct, hierarchical, low_latency\)"):
        pair_plan_for("ring", N, pairs, TIMING)


def _run(**over):
    return simulate_run(RunSpec("deepseek-v4-flash", "hgx-h100:2", "TP1EP16", backend="flow",
                                overrides=tuple(sorted({"tokens": 128, "routing": "zipf", **over}.items()))))


def test_skewed_runs_on_every_ep_algorithm():
    """Through the engine: with comm_sms = 0 a skewed low_latency run equals the direct one rank for rank; the
    hierarchical one runs, its RDMA messages deduplicated, and differs."""
    direct = _run()
    low = _run(all_to_all_algorithm="low_latency")
    hier = _run(all_to_all_algorithm="hierarchical")
    assert low.ranks == direct.ranks
    assert hier.wall_s != direct.wall_s and hier.wall_s > 0
