"""Replica routing policies: which replica (of those that take new requests) an arriving request joins. A
policy is a class registered in ``ROUTERS``; the replay makes one per run, ``Router(seed)``, and calls
``pick(count, load)`` with the number of candidate replicas and ``load(i)``, the requests candidate ``i``
has yet to finish with. Every policy returns an index in ``range(count)``, so requests are conserved."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from moesim.registry import Registry


class Router(Protocol):
    def __init__(self, seed: int) -> None: ...

    def pick(self, count: int, load: Callable[[int], int]) -> int: ...


ROUTERS: Registry[type[Router]] = Registry("routing policy")


@ROUTERS.register("least-loaded", "the replica with the fewest outstanding requests (ties: lowest index)",
                  "join-the-shortest-queue; RFC 5356 (server pool policies), Least Used")
class LeastLoaded:
    def __init__(self, seed: int) -> None:
        pass

    def pick(self, count: int, load: Callable[[int], int]) -> int:
        return min(range(count), key=load)


@ROUTERS.register("round-robin", "replicas in turn, whatever their load", "RFC 5356 (server pool policies), Round Robin")
class RoundRobin:
    def __init__(self, seed: int) -> None:
        self.next = 0

    def pick(self, count: int, load: Callable[[int], int]) -> int:
        i = self.next % count
        self.next = i + 1
        return i


@ROUTERS.register("random", "a replica drawn uniformly, seeded (routing_seed)", "RFC 5356 (server pool policies), Random")
class Random:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def pick(self, count: int, load: Callable[[int], int]) -> int:
        return int(self.rng.integers(count))
