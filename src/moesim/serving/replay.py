"""The replay: an event loop over request arrivals, replica step ends and KV-transfer completions.

Each replica runs one step at a time (``scheduler.ReplicaState``); a step's duration comes from the
interpolated step costs, so the loop never calls the network simulator for a step. Under
disaggregation, KV transfers are flows of one backend (``disagg.KvTransfers``), advanced between the
loop's events. Arriving requests go to the entry replica (colocated, or prefill) the routing policy picks
(``routing``; default the one with the fewest outstanding requests, ties to the lowest index), and within
a replica with data-parallel attention to its rank with the fewest; a request leaving prefill goes to the
decode replica, then rank, with the fewest. Its transfer starts when that rank has room for its whole KV
cache (prompt and output), in the order the prefills ended; until then the prefill replica keeps the cache.

Events at one instant are taken in the order: transfers ending, arrivals, step ends, so a step that
starts at t sees everything that arrived by t. The loop also integrates the number of requests in the
system over time, for Little's law (``metrics``).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from moesim.errors import MoesimError
from moesim.serving.costs import StepCosts
from moesim.serving.deployment import DECODE, PREFILL, Replica, ReplicaKind
from moesim.serving.disagg import KvTransfers
from moesim.serving.requests import Requests
from moesim.serving.routing import ROUTERS
from moesim.serving.scheduler import Book, ReplicaGroup, ReplicaState, SchedulerConfig


@dataclass(frozen=True, eq=False)
class ReplayResult:
    """Per request (indexed like ``Requests``) the times it was admitted, got its first token and
    finished, where it ran and when its KV cache moved (NaN/−1 where it does not apply), and per replica
    its steps and busy seconds; ``area`` is ∫ (requests in the system) dt over the run."""

    scheduled_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    replica: np.ndarray
    decode_replica: np.ndarray
    transfer_start_s: np.ndarray
    transfer_end_s: np.ndarray
    steps: tuple[int, ...]
    busy_s: tuple[float, ...]
    kv_capacity_tokens: tuple[int, ...]
    area: float
    rank: np.ndarray | None = None
    """Per request the data-parallel rank of its replica that served it (None: one rank per replica)."""
    cached_tokens: np.ndarray | None = None
    """Per request the prompt tokens the prefix cache served (None: no prefix caching)."""
    preemptions: np.ndarray | None = None
    """Per request how often it was preempted (None: no preemption)."""
    prefill_tokens: int = 0
    """Prompt tokens prefilled over the run (recomputed ones included, cached ones not)."""


def _check(requests: Requests, states: list[ReplicaState], config: SchedulerConfig) -> None:
    """Refuse requests no replica could ever take (they would wait forever)."""
    for s in states:
        needs = requests.prompt_tokens + (0 if s.role == PREFILL else requests.output_tokens)
        worst = int(np.argmax(needs))
        if needs[worst] > s.capacity:
            where = f"{s.replica.kind.strategy} replica{' rank' if s.gpus != s.replica.gpus else ''}"
            raise MoesimError(f"request {int(requests.ids[worst])}: needs {int(needs[worst])} KV-cache tokens, a "
                              f"{where} holds {s.capacity} (shorten the requests or give "
                              "the cache more memory)")
    longest = int(np.argmax(requests.prompt_tokens))
    if not config.chunked and requests.prompt_tokens[longest] > config.token_budget:
        raise MoesimError(f"request {int(requests.ids[longest])}: a prompt of {int(requests.prompt_tokens[longest])} "
                          f"tokens exceeds the token budget ({config.token_budget}); raise it or chunk prefills "
                          "(chunk_tokens)")


def replay(requests: Requests, replicas: tuple[Replica, ...], costs: dict[ReplicaKind, StepCosts],
           config: SchedulerConfig, transfers: KvTransfers | None = None) -> ReplayResult:
    """Serve ``requests`` on ``replicas``; ``transfers`` carries the KV caches when some replicas decode only."""
    n = len(requests)
    arrival = requests.arrival_s
    prompt, output = requests.prompt_tokens, requests.output_tokens
    nan = np.full(n, math.nan)
    scheduled, first_token, finish = nan.copy(), nan.copy(), nan.copy()
    t_start, t_end = nan.copy(), nan.copy()
    placed = np.full(n, -1, dtype=np.int64)
    decoded_on = np.full(n, -1, dtype=np.int64)
    rank_of = np.zeros(n, dtype=np.int64)
    book = Book(prompt, output, requests.prefix_id, requests.prefix_tokens)
    groups = [ReplicaGroup(rep, costs[rep.kind], config, config.kv_capacity(rep, costs[rep.kind]), book)
              for rep in replicas]
    ranks = [s for g in groups for s in g.ranks]
    _check(requests, ranks, config)
    entry = [g for g in groups if g.role != DECODE]
    decoders = [g for g in groups if g.role == DECODE]
    if decoders and transfers is None:
        raise MoesimError("a disaggregated replay needs the KV transfers' network (transfers=KvTransfers(...))")
    if decoders and transfers is not None:
        transfers.prepare((s.gpus, d.gpus) for g in entry for s in g.ranks for dg in decoders for d in dg.ranks)
    router = ROUTERS.get(config.routing)(config.routing_seed)
    queued: dict[ReplicaState, deque[int]] = {s: deque() for g in decoders for s in g.ranks}
    inbound = dict.fromkeys(queued, 0)
    rank_at: dict[int, ReplicaState] = {}
    """Request → the rank holding it (its prefill rank until its KV cache has moved)."""
    bound: dict[int, ReplicaState] = {}
    """Request → the decode rank its KV cache goes to (disaggregated, until it has landed)."""
    heap: list[tuple[float, int, int]] = []
    counter = 0
    in_system = 0
    area = 0.0
    t_last = float(arrival[0]) if n else 0.0

    def kick(g: ReplicaGroup, now: float) -> None:
        nonlocal counter
        if not g.busy:
            duration = g.plan(now, scheduled)
            if duration is not None:
                heapq.heappush(heap, (now + duration, counter, g.replica.index))
                counter += 1

    def start_transfers(d: ReplicaState, now: float) -> None:
        q = queued[d]
        while q and d.kv_used + d.kv_need(q[0]) <= d.capacity:
            r = q.popleft()
            d.kv_used += d.kv_need(r)
            inbound[d] += 1
            t_start[r] = now
            assert transfers is not None
            transfers.start(r, now, rank_at[r].gpus, d.gpus, int(prompt[r]) * d.kv_bytes_per_token)

    def land(r: int, now: float) -> None:
        t_end[r] = now
        src, d = rank_at[r], bound.pop(r)
        src.release(r)
        kick(groups[src.replica.index], now)
        rank_at[r] = d
        inbound[d] -= 1
        d.ready.append(r)
        kick(groups[d.replica.index], now)

    def load(d: ReplicaState) -> int:
        return d.outstanding + len(queued[d]) + inbound[d]

    def group_load(g: ReplicaGroup) -> int:
        return load(g.ranks[0]) if g.single else sum(load(x) for x in g.ranks)

    arrivals = arrival.tolist()  # Python floats: the loop reads them one by one
    in_flight = transfers.left if transfers is not None else {}  # KvTransfers.active, read without a call
    inf = math.inf
    heappop, heappush = heapq.heappop, heapq.heappush
    i = 0
    while True:
        t_arr = arrivals[i] if i < n else inf
        t_step = heap[0][0] if heap else inf
        t_net = inf
        if in_flight and transfers is not None:
            known = transfers.known_next_s  # next_event_s without the call, while the backend's next event holds
            t_net = known if known is not None else transfers.next_event_s(t_step)
        t = t_arr if t_arr <= t_step else t_step  # min(t_arr, t_step, t_net), without the call
        if t_net < t:
            t = t_net
        if t == inf:
            break
        area += in_system * (t - t_last)
        t_last = t
        if in_flight and transfers is not None and (t >= t_net or not transfers.plain):  # else nothing ends by t
            for r in transfers.advance(t):
                land(r, t)
        if t_net <= t_arr and t_net <= t_step:
            continue
        if t_arr <= t_step:  # every request arriving now joins a queue before any replica plans a step
            touched = []
            while i < n and arrivals[i] == t:
                g = entry[router.pick(len(entry), lambda k: entry[k].outstanding)]
                s = g.rank_for()
                placed[i], rank_of[i], rank_at[i] = g.replica.index, s.rank, s
                s.waiting.append(i)
                in_system += 1
                i += 1
                touched.append(g)
            for g in touched:
                kick(g, t)
            continue
        _, _, index = heappop(heap)
        g = groups[index]
        for s, first, done in () if g.finish_quiet() else g.finish():
            for r in first:
                first_token[r] = t
            for r in done:
                finish[r] = t
                in_system -= 1
            if s.role == PREFILL:
                for r in first:
                    if output[r] > 1:
                        dg = min(decoders, key=group_load)
                        d = min(dg.ranks, key=load)
                        decoded_on[r] = dg.replica.index
                        bound[r] = d
                        queued[d].append(r)
                        start_transfers(d, t)
            elif s.role == DECODE and done:
                start_transfers(s, t)
        if not g.busy:  # kick(g, t), inlined: the loop's most frequent call
            duration = g.plan(t, scheduled)
            if duration is not None:
                heappush(heap, (t + duration, counter, index))
                counter += 1
    if np.isnan(finish).any():  # pragma: no cover - every request is checked to fit before the loop
        raise MoesimError(f"replay: {int(np.isnan(finish).sum())} requests never finished")
    dp = any(len(g.ranks) > 1 for g in groups)
    cached = config.prefix_hit_rate > 0 or requests.prefix_id is not None
    return ReplayResult(scheduled, first_token, finish, placed, decoded_on, t_start, t_end,
                        tuple(g.steps for g in groups), tuple(g.busy_s for g in groups),
                        tuple(g.capacity for g in groups), area, rank_of if dp else None,
                        np.asarray(book.cached, dtype=np.int64) if cached else None,
                        np.asarray(book.preemptions, dtype=np.int64) if config.preemption else None,
                        sum(s.prefill_tokens for s in ranks))
