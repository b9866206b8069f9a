"""The replay: an event loop over request arrivals, replica step ends and KV-transfer completions.

Each replica runs one step at a time (``scheduler.ReplicaState``); a step's duration comes from the
interpolated step costs, so the loop never calls the network simulator for a step. Under
disaggregation, KV transfers are flows of one backend (``disagg.KvTransfers``), advanced between the
loop's events. Arriving requests go to the entry replica (colocated, or prefill) with the fewest
outstanding requests, ties to the lowest index; a request leaving prefill goes to the decode replica with
the fewest. Its transfer starts when that replica has room for its whole KV cache (prompt and output), in
the order the prefills ended; until then the prefill replica keeps the cache.

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
from moesim.serving.scheduler import ReplicaState, SchedulerConfig


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


def _check(requests: Requests, states: list[ReplicaState], config: SchedulerConfig) -> None:
    """Refuse requests no replica could ever take (they would wait forever)."""
    for s in states:
        needs = requests.prompt_tokens + (0 if s.role == PREFILL else requests.output_tokens)
        worst = int(np.argmax(needs))
        if needs[worst] > s.capacity:
            raise MoesimError(f"request {int(requests.ids[worst])}: needs {int(needs[worst])} KV-cache tokens, a "
                              f"{s.replica.kind.strategy} replica holds {s.capacity} (shorten the requests or give "
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
    prefilled = np.zeros(n, dtype=np.int64)
    states = [ReplicaState(rep, costs[rep.kind], config, config.kv_capacity(rep, costs[rep.kind]), prompt, output,
                           prefilled) for rep in replicas]
    _check(requests, states, config)
    entry = [s for s in states if s.role != DECODE]
    decoders = [s for s in states if s.role == DECODE]
    if decoders and transfers is None:
        raise MoesimError("a disaggregated replay needs the KV transfers' network (transfers=KvTransfers(...))")
    queued: dict[int, deque[int]] = {s.replica.index: deque() for s in decoders}
    inbound = dict.fromkeys(queued, 0)
    heap: list[tuple[float, int, int]] = []
    counter = 0
    in_system = 0
    area = 0.0
    t_last = float(arrival[0]) if n else 0.0

    def kick(s: ReplicaState, now: float) -> None:
        nonlocal counter
        if s.step is None:
            step = s.plan(now, scheduled)
            if step is not None:
                heapq.heappush(heap, (now + step.duration_s, counter, s.replica.index))
                counter += 1

    def start_transfers(d: ReplicaState, now: float) -> None:
        q = queued[d.replica.index]
        while q and d.kv_used + d.kv_need(q[0]) <= d.capacity:
            r = q.popleft()
            d.kv_used += d.kv_need(r)
            inbound[d.replica.index] += 1
            t_start[r] = now
            assert transfers is not None
            transfers.start(r, now, states[placed[r]].replica.gpus, d.replica.gpus,
                            int(prompt[r]) * d.costs.kv_bytes_per_token)

    def land(r: int, now: float) -> None:
        t_end[r] = now
        src, d = states[placed[r]], states[decoded_on[r]]
        src.release(r)
        kick(src, now)
        inbound[d.replica.index] -= 1
        d.ready.append(r)
        kick(d, now)

    def load(d: ReplicaState) -> int:
        return d.outstanding + len(queued[d.replica.index]) + inbound[d.replica.index]

    i = 0
    while True:
        t_arr = float(arrival[i]) if i < n else math.inf
        t_step = heap[0][0] if heap else math.inf
        t_net = transfers.next_event_s(t_step) if transfers is not None and transfers.active else math.inf
        t = min(t_arr, t_step, t_net)
        if t == math.inf:
            break
        area += in_system * (t - t_last)
        t_last = t
        if transfers is not None and transfers.active:
            for r in transfers.advance(t):
                land(r, t)
        if t_net <= t_arr and t_net <= t_step:
            continue
        if t_arr <= t_step:  # every request arriving now joins a queue before any replica plans a step
            touched = []
            while i < n and arrival[i] == t:
                s = min(entry, key=lambda e: e.outstanding)
                placed[i] = s.replica.index
                s.waiting.append(i)
                in_system += 1
                i += 1
                touched.append(s)
            for s in touched:
                kick(s, t)
            continue
        _, _, index = heapq.heappop(heap)
        s = states[index]
        first, done = s.finish()
        for r in first:
            first_token[r] = t
        for r in done:
            finish[r] = t
            in_system -= 1
        if s.role == PREFILL:
            for r in first:
                if output[r] > 1:
                    d = min(decoders, key=load)
                    decoded_on[r] = d.replica.index
                    queued[d.replica.index].append(r)
                    start_transfers(d, t)
        elif s.role == DECODE and done:
            start_transfers(s, t)
        kick(s, t)
    if np.isnan(finish).any():  # pragma: no cover - every request is checked to fit before the loop
        raise MoesimError(f"replay: {int(np.isnan(finish).sum())} requests never finished")
    return ReplayResult(scheduled, first_token, finish, placed, decoded_on, t_start, t_end,
                        tuple(s.steps for s in states), tuple(s.busy_s for s in states),
                        tuple(s.capacity for s in states), area)
