"""Hierarchical (node-aggregated) all-to-all, as DeepEP's normal kernels run it.

A token bound for experts on another server crosses the fabric once per destination server: RDMA to
the GPU with the same local index (rail) on that server, which forwards it over the server's GPU
domain (NVLink/NVSwitch, or PCIe where there is none) to each of its GPUs holding one of the token's
experts. Members on the sender's own server get theirs directly. Reference: DeepEP
(github.com/deepseek-ai/DeepEP, "normal kernels"); DeepSeek-V3 technical report §3.4 (node-limited
routing, IB then NVLink forwarding).

Bytes: a pair (i, j) carries D/N (the direct algorithm's message) over its last hop. The RDMA message
from i to server S carries what i's tokens need on S once: D/N · |S| · dedup(S), where dedup(S) is the
expected number of tokens hitting S over the expected token–expert rows sent to S (1 without routing
information; ``expected_server_fanout``). Without placement (one server) the plan is the direct one.

Streaming: the rail peer forwards an RDMA message piece by piece as the pieces arrive (DeepEP's forwarder
polls its RDMA receive buffer), so the NVLink hop overlaps the wire instead of following the whole message
(``STREAM_PIECE_BYTES``, ``stream_pieces``).
"""

from __future__ import annotations

from collections.abc import Callable
from math import comb

from moesim.system.collectives.base import COLLECTIVES, Algorithm, Members, Plan, StepTiming, Transfer
from moesim.system.collectives.direct import direct_pair_plan, direct_plan
from moesim.workload.graph import CollectiveType


def _subset_sums(per_group: list[int], choose: int) -> dict[int, int]:
    """How many ways to choose ``choose`` of the groups give each total of ``per_group`` (counts by sum)."""
    ways: list[dict[int, int]] = [{0: 1}] + [{} for _ in range(choose)]
    for x in per_group:
        for j in range(choose, 0, -1):
            for total, count in ways[j - 1].items():
                ways[j][total + x] = ways[j].get(total + x, 0) + count
    return ways[choose]


def miss_probability(experts_on_server: frozenset[int], routing: tuple[int, ...]) -> float:
    """P(a token picks none of ``experts_on_server``) under uniform group-limited top-k routing: the token
    chooses M of G equal groups of experts uniformly, then k experts uniformly among the chosen groups'
    (DeepSeek-V3's node/group-limited routing; G = M = 1 is plain top-k)."""
    experts, k, groups, chosen = routing
    size = experts // groups
    per_group = [sum(1 for e in experts_on_server if e // size == g) for g in range(groups)]
    pool = chosen * size
    total = comb(groups, chosen)
    return sum(count * comb(pool - x, k) for x, count in _subset_sums(per_group, chosen).items()) / (total * comb(pool, k))


def expected_server_fanout(n: int, servers: tuple[int, ...], routing: tuple[int, ...]) -> dict[int, float]:
    """Per server S: E[tokens hitting S] / E[token–expert rows sent to S], ≤ 1. Member m of the n holds
    experts ⌊m·E/n⌋ … ⌊(m+1)·E/n⌋ − 1 (contiguous; its share of the E experts when n does not divide E, as
    with redundant experts); empty ``routing``: 1 (no deduplication)."""
    out: dict[int, float] = {}
    for server in sorted(set(servers)):
        if not routing:
            out[server] = 1.0
            continue
        experts, k = routing[0], routing[1]
        on_server = frozenset(e for m in range(n) if servers[m] == server
                              for e in range(m * experts // n, (m + 1) * experts // n))
        rows = k * len(on_server) / experts
        out[server] = (1.0 - miss_probability(on_server, routing)) / rows
    return out


STREAM_PIECE_BYTES = 12 * 8 * 7392
"""The bytes an RDMA message streams in: the forwarder passes a piece on over the GPU domain once it has
arrived, while later pieces are still on the wire. DeepEP's default internode config for EP32/EP64 (24 SMs:
12 channels, each sending chunks of 8 tokens; ``Buffer.get_dispatch_config``) of 7392-byte FP8 tokens:
12 · 8 · 7392 bytes leave together."""

STREAM_MAX_PIECES = 16
"""The most pieces one RDMA message is cut into (each piece is a transfer, and one per forward)."""


def stream_piece_count(size_bytes: int) -> int:
    """Pieces of about ``STREAM_PIECE_BYTES`` in a message of ``size_bytes`` (1 to ``STREAM_MAX_PIECES``)."""
    return max(1, min(STREAM_MAX_PIECES, round(size_bytes / STREAM_PIECE_BYTES)))


def stream_pieces(size_bytes: int, pieces: int) -> tuple[int, ...]:
    """A message cut into ``pieces`` + 1 parts, half a piece first and last ([h, f, …, f, h], summing to
    ``size_bytes``): sent two at a time, each arrival releasing the part after next, the pair in flight
    is staggered by half a piece, so the link stays busy across one arrival's latency."""
    if pieces <= 1 or size_bytes < 2 * pieces:
        return (size_bytes,)
    cuts = [0] + [round(size_bytes * (2 * k - 1) / (2 * pieces)) for k in range(1, pieces + 1)] + [size_bytes]
    return tuple(b - a for a, b in zip(cuts, cuts[1:], strict=False))


def _shares(total: int, parts: tuple[int, ...]) -> tuple[int, ...]:
    """``total`` split in proportion to ``parts`` (cumulative rounding: the shares sum to ``total``)."""
    whole, acc, cuts = sum(parts), 0, [0]
    for p in parts:
        acc += p
        cuts.append(round(total * acc / whole) if whole else 0)
    return tuple(b - a for a, b in zip(cuts, cuts[1:], strict=False))


def hierarchical_plan(ctype: CollectiveType, n: int, size: int, timing: StepTiming, members: Members) -> Plan:
    """One chunk: intra-server pairs direct; per remote server one RDMA message to the rail peer, streamed in
    pieces (``stream_piece_count``, ``stream_pieces``; whole when the peer is alone there), each forwarded to
    the other members there once it has arrived. A member's stream exits once everything bound for it arrived."""
    if len(set(members.servers)) == 1:
        return direct_plan(ctype, n, size, timing)
    msg = size // n
    return _relay_plan(n, lambda i, j: msg, timing, members)


def hierarchical_pair_plan(n: int, pairs: tuple[int, ...], timing: StepTiming, window: int = 0,
                           members: Members | None = None) -> Plan:
    """Per-pair sizes (``pairs[i·n + j]`` bytes from i to j): the same relay, the RDMA message from i to server S
    carrying dedup(S) · Σ_{j on S} pairs[i·n + j] and a forward to j its pair's bytes. dedup(S) is the uniform
    routing's (``expected_server_fanout``): per-pair row counts do not say how a token's k experts fall over
    the servers, which deduplication needs; with uniform pairs (redundant experts under uniform routing) the
    plan is the uniform one. Without placement, or on one server, the direct pair plan."""
    if members is None or len(set(members.servers)) == 1:
        return direct_pair_plan(n, pairs, timing)
    return _relay_plan(n, lambda i, j: pairs[i * n + j], timing, members)


def _relay_plan(n: int, pair: Callable[[int, int], int], timing: StepTiming, members: Members) -> Plan:
    """The relay of ``pair(i, j)`` bytes from each i to each j: direct on i's server, else through i's rail peer
    on j's server (one deduplicated RDMA message per server, streamed in pieces, each piece forwarded on)."""
    servers = members.servers
    d = timing.endpoint_delay_s
    on: dict[int, list[int]] = {}
    for m, s in enumerate(servers):
        on.setdefault(s, []).append(m)
    fanout = expected_server_fanout(n, servers, members.routing)
    transfers: list[Transfer] = []
    received: list[list[int]] = [[] for _ in range(n)]

    def add(src: int, dst: int, size_bytes: int, after: tuple[int, ...]) -> int:
        transfers.append(Transfer(src, dst, size_bytes, after, d))
        received[dst].append(len(transfers) - 1)
        return len(transfers) - 1

    for i in range(n):
        home = on[servers[i]]
        local = home.index(i)
        for j in home:
            if j != i:
                add(i, j, pair(i, j), ())
        for server, there in on.items():
            if server == servers[i]:
                continue
            peer = there[local % len(there)]
            rdma = round(sum(pair(i, j) for j in there) * fanout[server])
            parts = stream_pieces(rdma, stream_piece_count(rdma) if len(there) > 1 else 1)  # whole: nothing to forward
            forwards = {j: _shares(pair(i, j), parts) for j in there if j != peer}
            sent: list[int] = []
            for k, part in enumerate(parts):
                sent.append(add(i, peer, part, (sent[k - 2],) if k >= 2 else ()))
                for j, fwd in forwards.items():
                    add(peer, j, fwd[k], (sent[k],))
    return Plan(n, tuple(transfers), tuple(tuple(r) for r in received), (d,) * n)


def _unplaced(ctype: CollectiveType, n: int, size: int, timing: StepTiming, chunk_index: int = 0,
              window: int = 0) -> Plan:
    """Without placement every member counts as on one server: the direct plan."""
    return direct_plan(ctype, n, size, timing)


COLLECTIVES.register(
    "hierarchical", "All-to-all aggregated per server: RDMA once per destination server to the rail peer, "
    "then NVLink/PCIe to the expert's GPU", "DeepEP normal kernels (github.com/deepseek-ai/DeepEP); DeepSeek-V3 "
    "technical report §3.4",
)(Algorithm(frozenset({CollectiveType.ALL_TO_ALL}), _unplaced, placed=hierarchical_plan, expert_all_to_all=True,
            pair_plan=hierarchical_pair_plan))
