"""One replica's scheduler: continuous batching under a token budget, in the spirit of vLLM and SGLang.

Every step the scheduler picks what the next forward pass holds (Yu et al., Orca, OSDI 2022; Kwon et al.,
vLLM, SOSP 2023): a scheduling policy (``policies``: ``decode-first``, as vLLM's V1 scheduler and
Sarathi-Serve; ``prefill-first``, as vLLM's V0 and SGLang) decides between decode steps and prefill chunks;
prefill chunks go first to the prompts already started, then to waiting requests in arrival order.

``chunk_tokens`` caps one prompt's tokens per step (chunked prefill); without it a prompt is prefilled
whole, in one step. At most ``max_seqs`` requests run at once; the first waiting request that does not fit
the KV cache blocks the ones behind it (first come, first served). The KV capacity is the accelerator
memory left after the weights (``moesim.models.residency``) over the KV bytes of one token on one GPU.

KV reservation (``SchedulerConfig.preemption``): by default a request reserves its prompt and whole output
at admission and is never preempted. With ``recompute`` or ``swap`` (colocated replicas), a request
reserves its prompt and first token, each decode step takes one more token per sequence, and when the
next decode step would not fit, the latest-arrived running request is preempted (vLLM's FCFS policy,
``Scheduler._preempt``): ``recompute`` frees its cache and puts it at the front of the queue, to prefill its
prompt and the tokens it already produced again; ``swap`` moves its cache to host memory over each GPU's
host link (``swap_bandwidth_bps``, the time added to the step) and back before it runs again, ahead of
new admissions.

Prefix caching: a request whose prompt starts with a prefix this rank has already prefilled (trace column
``prefix_id``), or the share ``prefix_hit_rate`` of every prompt, starts its prefill after those tokens;
they count as cached context for attention, not as prefill tokens. Prefixes stay cached (no eviction) and
the request still reserves its whole prompt (no sharing of cache blocks).

Data-parallel attention (a ``DP<d>…EP<e>`` split, or ``dp_ranks`` on a TP×EP split): a replica has that many
ranks, each with its own queue, running requests and KV cache; the ranks step together (one expert-parallel
step), so a step lasts as long as its slowest rank's batch (``ReplicaGroup``). A DP split's rank holds the
KV-cache tokens one GPU of its group holds; ``dp_ranks`` on a TP×EP split gives each rank 1/``dp_ranks`` of
the replica's cache.

Multi-token prediction (``mtp_draft_tokens`` k, ``mtp_acceptance`` a): a decode step advances each
sequence by 1 + a + … + a^k tokens (expected) and costs the step of k + 1 tokens per sequence.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import NamedTuple

import numpy as np

from moesim.errors import input_error
from moesim.serving.config import SchedulerConfig
from moesim.serving.costs import StepCosts
from moesim.serving.deployment import BOTH, DECODE, PREFILL, Replica
from moesim.serving.policies import POLICIES

SWAPPED_PREFILL, SWAPPED_DECODE = 1, 2
"""``Book.swapped``: the request's cache is on the host, taken from a prefill under way or from decoding."""


class Book:
    """Per request (indexed like ``Requests``) what every rank reads and updates: lengths, progress, prefix.
    Python lists, not arrays: the replay reads and writes single entries, which lists do several times faster."""

    def __init__(self, prompt: np.ndarray, output: np.ndarray, prefix_id: np.ndarray | None = None,
                 prefix_tokens: np.ndarray | None = None) -> None:
        n = len(prompt)
        self.prompt: list[int] = prompt.tolist()
        self.output: list[int] = output.tolist()
        self.prefix_id: list[int] | None = None if prefix_id is None else prefix_id.tolist()
        """The code of each request's prompt prefix (−1: none); None: the requests name no prefixes."""
        self.prefix_tokens: list[int] | None = None if prefix_tokens is None else prefix_tokens.tolist()
        self.prefilled = [0] * n
        """Prompt (and recomputed) tokens whose KV cache exists."""
        self.target = list(self.prompt)
        """Tokens to prefill before decoding: the prompt, or prompt and tokens produced after a recompute."""
        self.generated = [0] * n
        """Output tokens produced when the request last joined the decoding sequences."""
        self.joined = [0] * n
        """The rank's decode-step count when the request last joined the decoding sequences."""
        self.finish_at = [-1] * n
        """The decode-step count at which it has its last token (−1: not decoding)."""
        self.cached = [0] * n
        """Prompt tokens served by the prefix cache."""
        self.preemptions = [0] * n
        self.swapped = [0] * n
        """0, or where a swapped request's cache came from (``SWAPPED_PREFILL``, ``SWAPPED_DECODE``)."""
        self.swapped_tokens = [0] * n


class Step(NamedTuple):
    """A planned forward pass: prefill chunks (request, tokens) and the number of decoding sequences."""

    chunks: tuple[tuple[int, int], ...]
    batch: int
    duration_s: float


class ReplicaState:
    """What one rank of a replica holds between steps (the replica itself without data-parallel attention).
    Decoding sequences are not touched one by one: each gets the decode-step count at which it finishes, so a
    step costs O(1) plus its chunks and completions."""

    def __init__(self, replica: Replica, costs: StepCosts, config: SchedulerConfig, capacity_tokens: int,
                 book: Book, rank: int = 0, gpus: tuple[int, ...] | None = None, kv_split: int = 1) -> None:
        self.replica = replica
        self.role = replica.role
        self.rank = rank
        self.gpus = replica.gpus if gpus is None else gpus
        self.costs = costs
        self.config = config
        self.capacity = capacity_tokens
        self.book = book
        self.prompt = book.prompt
        self.output = book.output
        self.prefilled = book.prefilled
        self.chunk_cap = config.chunk_tokens if config.chunk_tokens is not None else math.inf
        self.policy = POLICIES.get(config.policy)
        self.preempt = config.preemption if self.role == BOTH else None
        self.draft_tokens = config.mtp_draft_tokens
        tau = config.decode_tokens_per_step
        self.tau: float = 1 if tau == 1 else tau
        """Tokens a decoding sequence gains per decode step (an int 1 without multi-token prediction)."""
        self.kv_bytes_per_token = costs.kv_bytes_per_token * kv_split
        """KV bytes of one token on each GPU of this rank (a rank holds its own sequences' whole cache)."""
        self.waiting: deque[int] = deque()
        """Requests not admitted yet (colocated and prefill replicas)."""
        self.ready: deque[int] = deque()
        """Decode replicas: requests whose KV cache has arrived, waiting for a decode slot."""
        self.prefilling: list[int] = []
        self.finishing: list[tuple[int, int]] = []
        """Heap of (decode-step count at which the sequence has its last token, request); entries of
        preempted sequences are stale (``Book.finish_at`` differs) and skipped."""
        self.members: set[int] = set()
        """Running requests (with ``preempt``: the candidates for preemption)."""
        self.prefixes: set[int] = set()
        """Prefix codes whose KV cache this rank holds."""
        self.decode_steps = 0
        self.decoders = 0
        self.context_sum: float = 0
        self.kv_used: float = 0
        self.running = 0
        self.extra_s = 0.0
        """Swap time to add to the next step."""
        self.step: Step | None = None
        self.steps = 0
        self.busy_s = 0.0
        self.preemptions = 0
        self.prefill_tokens = 0
        """Prompt tokens prefilled here (recomputed ones included, cached ones not)."""

    # ------------------------------------------------------------------ bookkeeping
    def kv_need(self, r: int) -> int:
        """KV tokens reserved for request ``r`` at admission: its prompt on a prefill replica; else prompt +
        output, or with ``preempt`` the tokens to prefill and the one token that prefill produces."""
        if self.role == PREFILL:
            return int(self.prompt[r])
        if self.preempt is None:
            return int(self.prompt[r]) + int(self.output[r])
        return int(self.book.target[r]) + 1

    @property
    def growth(self) -> float:
        """KV tokens the next decode step adds (with ``preempt``: reservation grows token by token)."""
        return self.decoders * self.tau if self.preempt is not None else 0

    @property
    def outstanding(self) -> int:
        """Requests this rank has yet to finish with (for join-the-shortest-queue routing)."""
        return len(self.waiting) + len(self.ready) + self.running

    def release(self, r: int) -> None:
        self.kv_used -= self.kv_need(r) if self.preempt is None else int(self.prompt[r]) + int(self.output[r])

    def _decoded(self, r: int) -> float:
        """Context tokens decoding sequence ``r`` holds now: its prompt and the tokens produced."""
        b = self.book
        return int(self.prompt[r]) + int(b.generated[r]) + (self.decode_steps - int(b.joined[r])) * self.tau

    def _join_decoders(self, r: int) -> None:
        """``r`` has its first token (or, resumed, the next one): it decodes its other output tokens from the
        next decode step on."""
        b = self.book
        self.decoders += 1
        self.members.add(r)
        self.context_sum += int(self.prompt[r]) + int(b.generated[r])
        b.joined[r] = self.decode_steps
        left = int(self.output[r]) - int(b.generated[r])
        b.finish_at[r] = self.decode_steps + (left if self.tau == 1 else math.ceil(left / self.tau))
        heapq.heappush(self.finishing, (int(b.finish_at[r]), r))

    def _admit_prefix(self, r: int) -> None:
        """Start ``r``'s prefill after the prompt tokens the prefix cache holds (at least one token is left
        to compute, as vLLM does, so the step produces the next token)."""
        b = self.book
        hit = 0
        if b.prefix_id is not None and b.prefix_tokens is not None:
            if b.prefix_id[r] >= 0 and int(b.prefix_id[r]) in self.prefixes:
                hit = int(b.prefix_tokens[r])
        elif self.config.prefix_hit_rate:
            hit = int(self.config.prefix_hit_rate * int(self.prompt[r]))
        hit = min(hit, int(b.target[r]) - 1)
        b.cached[r] = max(int(b.cached[r]), hit)
        self.prefilled[r] = hit

    def _swap_s(self, tokens: float) -> float:
        return tokens * self.kv_bytes_per_token * 8 / self.config.swap_bandwidth_bps

    # ------------------------------------------------------------------ preemption
    def _preempt(self) -> None:
        """Preempt the latest-arrived running request (requests are numbered in arrival order)."""
        v = max(self.members)
        b = self.book
        self.members.discard(v)
        self.running -= 1
        self.preemptions += 1
        b.preemptions[v] += 1
        if b.finish_at[v] >= 0:  # decoding
            held = self._decoded(v)
            self.decoders -= 1
            self.context_sum -= held
            b.generated[v] = int(held) - int(self.prompt[v])
            b.finish_at[v] = -1
            self.kv_used -= held
            swapped = SWAPPED_DECODE
        else:  # prefilling
            self.prefilling.remove(v)
            held = int(self.prefilled[v])
            self.kv_used -= int(b.target[v]) + 1
            swapped = SWAPPED_PREFILL
        if self.preempt == "swap":
            b.swapped[v] = swapped
            b.swapped_tokens[v] = int(held)  # a decoder resumes with the tokens it has whole
            self.extra_s += self._swap_s(held)
        else:
            b.target[v] = int(self.prompt[v]) + int(b.generated[v])
            self.prefilled[v] = 0
        self.waiting.appendleft(v)

    def _make_room(self) -> None:
        """Preempt until the next decode step's tokens fit the cache."""
        while self.decoders and len(self.members) > 1 and self.kv_used + self.growth > self.capacity:
            self._preempt()

    def _swap_in(self) -> None:
        """Swapped requests at the front of the queue come back first, while they fit."""
        b = self.book
        while self.waiting and b.swapped[self.waiting[0]] and self.running < self.config.max_seqs:
            r = self.waiting[0]
            decoding = b.swapped[r] == SWAPPED_DECODE
            need = int(b.swapped_tokens[r]) if decoding else self.kv_need(r)
            if self.running and self.kv_used + self.growth + need + (self.tau if decoding else 0) > self.capacity:
                break  # alone, a request always runs (it fits the cache: replay checks)
            self.waiting.popleft()
            self.kv_used += need
            self.running += 1
            self.extra_s += self._swap_s(int(b.swapped_tokens[r]))
            b.swapped[r] = 0
            if decoding:
                self._join_decoders(r)
            else:
                self.members.add(r)
                self.prefilling.append(r)

    # ------------------------------------------------------------------ planning
    def prefill_chunks(self, budget: int, now_s: float, scheduled_s: np.ndarray) -> list[tuple[int, int]]:
        """Prefill chunks within ``budget`` tokens: the prompts already started, then waiting requests admitted
        in arrival order while they fit (admission time into ``scheduled_s``); none on a decode replica."""
        chunks: list[tuple[int, int]] = []
        if self.role == DECODE:
            return chunks
        target = self.book.target
        for r in self.prefilling:  # prompts already started, in admission order
            if budget <= 0:
                break
            c = int(min(target[r] - self.prefilled[r], self.chunk_cap, budget))
            chunks.append((r, c))
            budget -= c
        while self.waiting and budget > 0 and self.running < self.config.max_seqs:
            r = self.waiting[0]
            if self.book.swapped[r]:
                break
            need = self.kv_need(r)
            if self.kv_used + self.growth + need > self.capacity:
                break
            if self.preempt is not None or self.config.prefix_hit_rate or self.book.prefix_id is not None:
                self._admit_prefix(r)
            c = int(min(target[r] - self.prefilled[r], self.chunk_cap, budget))
            if c < target[r] - self.prefilled[r] and not self.config.chunked:
                self.prefilled[r] = 0
                break
            self.waiting.popleft()
            self.kv_used += need
            self.running += 1
            self.members.add(r)
            self.prefilling.append(r)
            if math.isnan(scheduled_s[r]):
                scheduled_s[r] = now_s
            chunks.append((r, c))
            budget -= c
        return chunks

    def plan(self, now_s: float, scheduled_s: np.ndarray) -> Step | None:
        """The next step from ``now_s``, or None when there is nothing to run (the step's duration is this
        rank's alone; ``ReplicaGroup`` makes ranks wait for the slowest)."""
        if self.preempt == "swap":
            self._swap_in()
        while self.ready and self.running < self.config.max_seqs:
            r = self.ready.popleft()
            self.running += 1
            self._join_decoders(r)
        if self.preempt is not None:
            self._make_room()
        chunks, batch = self.policy(self, now_s, scheduled_s)
        if chunks:
            tokens = pairs = cached = 0
            prefilled = self.prefilled
            for r, c in chunks:
                o = int(prefilled[r])
                tokens += c
                pairs += c * (c + o)
                cached += o
            self.prefill_tokens += tokens
            duration = self.costs.step(tokens, pairs, cached, batch, self.context_sum if batch else 0,
                                       self.draft_tokens)
        elif batch:  # a decode step alone
            duration = self.costs.decode_step(batch, self.context_sum, self.draft_tokens)
        else:
            return None
        if self.extra_s:
            duration += self.extra_s
            self.extra_s = 0.0
        self.step = Step(tuple(chunks), batch, duration)
        return self.step

    def finish(self) -> tuple[list[int], list[int]]:
        """Apply the step that just ended: (requests with their first token now, requests done now).
        Colocated replicas keep the first group decoding; a prefill replica hands it over (the caller
        holds its KV cache until the transfer ends). A resumed request's token after its recompute is not a
        first token, and it goes back to decoding."""
        step = self.step
        assert step is not None
        self.step = None
        b = self.book
        done: list[int] = []
        if step.batch:
            steps = self.decode_steps = self.decode_steps + 1
            self.context_sum += step.batch * self.tau
            if self.preempt is not None:
                self.kv_used += step.batch * self.tau
            finishing = self.finishing
            while finishing and finishing[0][0] <= steps:
                at, r = heapq.heappop(finishing)
                if b.finish_at[r] != at:
                    continue  # preempted since
                self.decoders -= 1
                self.running -= 1
                self.members.discard(r)
                held = int(self.prompt[r]) + int(b.generated[r]) + (at - int(b.joined[r])) * self.tau
                self.context_sum -= held
                b.finish_at[r] = -1
                if self.preempt is None:
                    self.release(r)
                else:
                    self.kv_used -= held
                done.append(r)
        first: list[int] = []
        if not step.chunks:  # a decode step alone
            return first, done
        resumed: list[int] = []
        for r, c in step.chunks:
            self.prefilled[r] += c
            if b.prefix_id is not None and b.prefix_tokens is not None and b.prefix_id[r] >= 0 \
                    and self.prefilled[r] >= b.prefix_tokens[r]:
                self.prefixes.add(int(b.prefix_id[r]))
            if self.prefilled[r] == b.target[r]:
                (resumed if b.generated[r] else first).append(r)
        if first or resumed:
            finished = set(first) | set(resumed)
            self.prefilling = [r for r in self.prefilling if r not in finished]
        for r in first + resumed:
            b.generated[r] += 1
            if b.generated[r] >= self.output[r] or self.role == PREFILL:
                self.running -= 1
                self.members.discard(r)
                if b.generated[r] >= self.output[r]:
                    self.release(r)
                    done.append(r)
            else:
                self._join_decoders(r)
        return first, done


class ReplicaGroup:
    """A replica's ranks, stepping together: with data-parallel attention each rank runs its own batch
    through attention, and all meet in the expert-parallel layers, so a step ends when the slowest rank's
    batch is done (ranks with nothing to run wait, as DP-attention engines run an idle batch). One rank:
    the replica's own step."""

    def __init__(self, replica: Replica, costs: StepCosts, config: SchedulerConfig, capacity_tokens: int,
                 book: Book) -> None:
        d = replica.kind.dp_ranks
        if d > 1 and config.dp_ranks not in (1, d):
            raise input_error("scheduler", "dp_ranks", f"{config.dp_ranks}, but the {replica.kind.strategy} split has "
                              f"{d} data-parallel attention ranks (leave it unset or give {d})")
        kv_split = 1 if d > 1 else config.dp_ranks  # a DP split's rank has its own GPUs' whole cache
        d = max(d, config.dp_ranks)
        per = len(replica.gpus) // d
        if per * d != len(replica.gpus):
            raise input_error("scheduler", "dp_ranks", f"{d} ranks do not divide the {len(replica.gpus)} GPUs of a "
                              f"{replica.kind.strategy} replica evenly")
        self.replica = replica
        self.role = replica.role
        self.capacity = capacity_tokens // kv_split * d
        self.ranks = [ReplicaState(replica, costs, config, capacity_tokens // kv_split, book, k,
                                   replica.gpus[k * per:(k + 1) * per], kv_split) for k in range(d)]
        self.single = d == 1
        self._plain = self.ranks[0] if d == 1 and self.ranks[0].preempt is None else None
        """The rank whose decode steps ``finish_quiet`` may end (one rank, no preemption), else None."""
        self.busy = False
        self.steps = 0
        self.busy_s = 0.0

    @property
    def outstanding(self) -> int:
        return self.ranks[0].outstanding if self.single else sum(s.outstanding for s in self.ranks)

    def rank_for(self) -> ReplicaState:
        """The rank a request routed here joins: the one with the fewest outstanding requests (ties: lowest)."""
        return self.ranks[0] if self.single else min(self.ranks, key=lambda s: s.outstanding)

    def plan(self, now_s: float, scheduled_s: np.ndarray) -> float | None:
        """Plan every rank's next step; the group's step duration (the slowest rank's), None when idle."""
        if self.single:
            step = self.ranks[0].plan(now_s, scheduled_s)
            if step is None:
                return None
            duration = step.duration_s
        else:
            durations = [st.duration_s for st in (s.plan(now_s, scheduled_s) for s in self.ranks) if st is not None]
            if not durations:
                return None
            duration = max(durations)
        self.busy = True
        self.steps += 1
        self.busy_s += duration
        return duration

    def finish_quiet(self) -> bool:
        """``finish`` of a step that only decodes and completes no sequence, on one rank without preemption: the
        sequences' context grows and nothing else changes (no first token, no completion to report). Most
        steps are such; False when this one is not: nothing is done, and ``finish`` ends it."""
        s = self._plain
        if s is None or s.step is None or s.step.chunks or (s.finishing and s.finishing[0][0] <= s.decode_steps + 1):
            return False
        batch = s.step.batch
        s.step = None
        s.decode_steps += 1
        s.context_sum += batch * s.tau
        self.busy = False
        return True

    def finish(self) -> list[tuple[ReplicaState, list[int], list[int]]]:
        """End the step on every rank that ran one: (rank, first tokens, done) each."""
        self.busy = False
        if self.single:
            s = self.ranks[0]
            first, done = s.finish()
            return [(s, first, done)]
        return [(s, *s.finish()) for s in self.ranks if s.step is not None]
