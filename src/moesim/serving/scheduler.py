"""One replica's scheduler: continuous batching under a token budget, in the spirit of vLLM and SGLang.

Every step the scheduler picks what the next forward pass holds (Yu et al., Orca, OSDI 2022; Kwon et al.,
vLLM, SOSP 2023): a scheduling policy (``policies``: ``decode-first``, as vLLM's V1 scheduler and
Sarathi-Serve; ``prefill-first``, as vLLM's V0 and SGLang) decides between decode steps and prefill chunks;
prefill chunks go first to the prompts already started, then to waiting requests in arrival order.

``chunk_tokens`` caps one prompt's tokens per step (chunked prefill); without it a prompt is prefilled
whole, in one step. A request is admitted (and its KV cache reserved) only when its prompt and output
tokens fit the cache, and at most ``max_seqs`` requests run at once; the first waiting request that does
not fit blocks the ones behind it (first come, first served). There is no preemption: reserving the whole
output up front (vLLM reserves block by block and preempts when it runs out) means a request never waits
half-done. The KV capacity is the accelerator memory left after the weights (``moesim.models.residency``)
over the KV bytes of one token on one GPU.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from moesim.serving.config import SchedulerConfig
from moesim.serving.costs import StepCosts
from moesim.serving.deployment import DECODE, PREFILL, Replica
from moesim.serving.policies import POLICIES


@dataclass(frozen=True)
class Step:
    """A planned forward pass: prefill chunks (request, tokens) and the number of decoding sequences."""

    chunks: tuple[tuple[int, int], ...]
    batch: int
    duration_s: float


class ReplicaState:
    """What one replica holds between steps. Decoding sequences are not touched one by one: each gets the
    decode-step count at which it finishes, so a step costs O(1) plus its chunks and completions."""

    def __init__(self, replica: Replica, costs: StepCosts, config: SchedulerConfig, capacity_tokens: int,
                 prompt: np.ndarray, output: np.ndarray, prefilled: np.ndarray) -> None:
        self.replica = replica
        self.role = replica.role
        self.costs = costs
        self.config = config
        self.capacity = capacity_tokens
        self.prompt = prompt
        self.output = output
        self.prefilled = prefilled
        self.chunk_cap = config.chunk_tokens if config.chunk_tokens is not None else math.inf
        self.policy = POLICIES.get(config.policy)
        self.waiting: deque[int] = deque()
        """Requests not admitted yet (colocated and prefill replicas)."""
        self.ready: deque[int] = deque()
        """Decode replicas: requests whose KV cache has arrived, waiting for a decode slot."""
        self.prefilling: list[int] = []
        self.finishing: list[tuple[int, int]] = []
        """Heap of (decode-step count at which the sequence has its last token, request)."""
        self.decode_steps = 0
        self.decoders = 0
        self.context_sum = 0
        self.kv_used = 0
        self.running = 0
        self.step: Step | None = None
        self.steps = 0
        self.busy_s = 0.0

    # ------------------------------------------------------------------ bookkeeping
    def kv_need(self, r: int) -> int:
        """KV tokens reserved for request ``r`` here: its prompt on a prefill replica, else prompt + output."""
        return int(self.prompt[r]) + (0 if self.role == PREFILL else int(self.output[r]))

    @property
    def outstanding(self) -> int:
        """Requests this replica has yet to finish with (for join-the-shortest-queue routing)."""
        return len(self.waiting) + len(self.ready) + self.running

    def release(self, r: int) -> None:
        self.kv_used -= self.kv_need(r)

    def _join_decoders(self, r: int) -> None:
        """``r`` has its first token: it decodes its other output tokens from the next decode step on."""
        self.decoders += 1
        self.context_sum += int(self.prompt[r]) + 1
        heapq.heappush(self.finishing, (self.decode_steps + int(self.output[r]) - 1, r))

    # ------------------------------------------------------------------ planning
    def prefill_chunks(self, budget: int, now_s: float, scheduled_s: np.ndarray) -> list[tuple[int, int]]:
        """Prefill chunks within ``budget`` tokens: the prompts already started, then waiting requests admitted
        in arrival order while they fit (admission time into ``scheduled_s``); none on a decode replica."""
        chunks: list[tuple[int, int]] = []
        if self.role == DECODE:
            return chunks
        for r in self.prefilling:  # prompts already started, in admission order
            if budget <= 0:
                break
            c = int(min(self.prompt[r] - self.prefilled[r], self.chunk_cap, budget))
            chunks.append((r, c))
            budget -= c
        while self.waiting and budget > 0 and self.running < self.config.max_seqs:
            r = self.waiting[0]
            need = self.kv_need(r)
            if self.kv_used + need > self.capacity:
                break
            c = int(min(self.prompt[r], self.chunk_cap, budget))
            if c < self.prompt[r] and not self.config.chunked:
                break
            self.waiting.popleft()
            self.kv_used += need
            self.running += 1
            self.prefilling.append(r)
            scheduled_s[r] = now_s
            chunks.append((r, c))
            budget -= c
        return chunks

    def plan(self, now_s: float, scheduled_s: np.ndarray) -> Step | None:
        """The next step from ``now_s``, or None when there is nothing to run."""
        while self.ready and self.running < self.config.max_seqs:
            r = self.ready.popleft()
            self.running += 1
            self._join_decoders(r)
        chunks, batch = self.policy(self, now_s, scheduled_s)
        if not chunks and not batch:
            return None
        tokens = pairs = cached = 0
        for r, c in chunks:
            o = int(self.prefilled[r])
            tokens += c
            pairs += c * (c + o)
            cached += o
        duration = self.costs.step(tokens, pairs, cached, batch, self.context_sum if batch else 0)
        self.step = Step(tuple(chunks), batch, duration)
        self.steps += 1
        self.busy_s += duration
        return self.step

    def finish(self) -> tuple[list[int], list[int]]:
        """Apply the step that just ended: (requests with their first token now, requests done now).
        Colocated replicas keep the first group decoding; a prefill replica hands it over (the caller
        holds its KV cache until the transfer ends)."""
        step = self.step
        assert step is not None
        self.step = None
        done: list[int] = []
        if step.batch:
            self.decode_steps += 1
            self.context_sum += step.batch
            while self.finishing and self.finishing[0][0] <= self.decode_steps:
                _, r = heapq.heappop(self.finishing)
                self.decoders -= 1
                self.running -= 1
                self.context_sum -= int(self.prompt[r] + self.output[r])
                self.release(r)
                done.append(r)
        first: list[int] = []
        for r, c in step.chunks:
            self.prefilled[r] += c
            if self.prefilled[r] == self.prompt[r]:
                first.append(r)
        if first:
            finished = set(first)
            self.prefilling = [r for r in self.prefilling if r not in finished]
        for r in first:
            if self.output[r] == 1 or self.role == PREFILL:
                self.running -= 1
                if self.output[r] == 1:
                    self.release(r)
                    done.append(r)
            else:
                self._join_decoders(r)
        return first, done
