"""A small, precise discrete-event core: one ordering key (time, priority, seq), no globals.

An event is a kind tag and its arguments; what a kind does is up to the queue's owner, so pending
events can be compared, copied and moved as plain values.
"""

from __future__ import annotations

import heapq
import math
from typing import Any, Generic, TypeVar

K = TypeVar("K")


class EventQueue(Generic[K]):
    """Events ordered by (time_s, priority, seq); seq is a per-queue counter, so ties are FIFO. Each is
    held as (time_s, priority, seq, kind, args)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, K, tuple[Any, ...]]] = []
        self._seq = 0

    def schedule(self, time_s: float, kind: K, *args: Any, priority: int = 0) -> None:
        heapq.heappush(self._heap, (time_s, priority, self._seq, kind, args))
        self._seq += 1

    def next_time(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def pop(self) -> tuple[float, K, tuple[Any, ...]]:
        time_s, _, _, kind, args = heapq.heappop(self._heap)
        return time_s, kind, args

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def next_seq(self) -> int:
        return self._seq

    def items(self) -> list[tuple[float, int, int, K, tuple[Any, ...]]]:
        return list(self._heap)

    def replace(self, items: list[tuple[float, int, int, K, tuple[Any, ...]]], next_seq: int) -> None:
        """Hold exactly ``items``; the next scheduled event gets sequence number ``next_seq``."""
        self._heap = list(items)
        heapq.heapify(self._heap)
        self._seq = next_seq
