"""Halving-doubling collectives (ASTRA-sim ``HalvingDoubling.cc``; B.5). N must be a power of two.

All-reduce: 2·log2 N sequential steps, messages D/2 … D/N then D/N … D/2, peer distance 1, 2, … N/2
then back; the partner is i + dist when (i // dist) is even, else i - dist. RS: the first half; AG:
log2 N steps from distance N/2 with messages D, 2D, 4D, …
"""

from __future__ import annotations

from moesim.errors import MoesimError
from moesim.system.collectives.base import COLLECTIVES, Algorithm, Plan, StepTiming, Transfer
from moesim.workload.graph import CollectiveType


def _partner(i: int, dist: int) -> int:
    return i + dist if (i // dist) % 2 == 0 else i - dist


def hd_plan(ctype: CollectiveType, n: int, size: int, timing: StepTiming, chunk_index: int = 0,
            window: int = 0) -> Plan:
    if n & (n - 1):
        raise MoesimError(f"halvingDoubling needs a power-of-two group size, got {n}")
    if n == 1:
        return Plan(n, (), ((),) * n, (0.0,) * n)
    logn = n.bit_length() - 1
    dists = [1 << s for s in range(logn)]
    halving = [(dist, size >> (s + 1), True) for s, dist in enumerate(dists)]  # (distance, bytes, reduced)
    if ctype is CollectiveType.ALL_REDUCE:
        steps = halving + [(dist, size >> (s + 1), False) for s, dist in reversed(list(enumerate(dists)))]
    elif ctype is CollectiveType.REDUCE_SCATTER:
        steps = halving
    else:  # ALL_GATHER
        steps = [(dist, size << s, False) for s, dist in enumerate(reversed(dists))]
    d = timing.endpoint_delay_s
    transfers: list[Transfer] = []
    for k, (dist, msg, _) in enumerate(steps):
        for i in range(n):
            after: tuple[int, ...]
            if k == 0:
                after, delay = (), d
            else:
                pdist, pmsg, preduced = steps[k - 1]
                after = ((k - 1) * n + _partner(i, pdist),)
                delay = d + (timing.reduction_s(pmsg) if preduced else 0.0)
            transfers.append(Transfer(i, _partner(i, dist), msg, after, delay))
    last = len(steps) - 1
    ldist, lmsg, lred = steps[last]
    exits = tuple(((last * n + _partner(i, ldist)),) for i in range(n))
    exit_delay = d + (timing.reduction_s(lmsg) if lred else 0.0)
    return Plan(n, tuple(transfers), exits, (exit_delay,) * n)


COLLECTIVES.register(
    "halving_doubling", "Recursive halving-doubling: 2 log2 N steps of shrinking then growing messages",
    "ASTRA-sim 2.0 HalvingDoubling.cc (docs/reference-semantics.md B.5)",
)(Algorithm(frozenset({CollectiveType.ALL_REDUCE, CollectiveType.REDUCE_SCATTER,
                       CollectiveType.ALL_GATHER}), hd_plan))
