"""A small, precise discrete-event core: one ordering key (time, priority, seq), no globals."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any


class EventQueue:
    """Events ordered by (time_s, priority, seq); seq is a per-queue counter, so ties are FIFO."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0

    def schedule(self, time_s: float, action: Callable[..., None], *args: Any, priority: int = 0) -> None:
        heapq.heappush(self._heap, (time_s, priority, self._seq, action, args))
        self._seq += 1

    def next_time(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def pop(self) -> tuple[float, Callable[..., None], tuple[Any, ...]]:
        time_s, _, _, action, args = heapq.heappop(self._heap)
        return time_s, action, args

    def __len__(self) -> int:
        return len(self._heap)

    def items(self) -> list[tuple[float, int, int, Callable[..., None], tuple[Any, ...]]]:
        return list(self._heap)

    def replace(self, items: list[tuple[float, int, int, Callable[..., None], tuple[Any, ...]]]) -> None:
        self._heap = list(items)
        heapq.heapify(self._heap)
