"""Direct collectives (ASTRA-sim ``AllToAll.cc``; docs/reference-semantics.md B.4).

All-to-all: D/N to each of the N-1 peers, all injected at once ("direct") or through a sliding window
of K ("directK": each receive releases the next send). All-reduce: N-1 concurrent D/N messages
(reduce-scatter, reduced on receipt), then, once all are in, N-1 concurrent D/N messages (all-gather).
"""

from __future__ import annotations

from moesim.system.collectives.base import COLLECTIVES, Algorithm, Members, Plan, StepTiming, Transfer
from moesim.workload.graph import CollectiveType


def _a2a_round(n: int, msg: int, d: float, base: int, after_all: list[tuple[int, ...]], window: int,
               extra_delay: float, pairs: tuple[int, ...] = ()) -> list[Transfer]:
    """One round: member i sends to i+1, i+2, …; with a window K, send j>=K waits for receive j-K."""
    out: list[Transfer] = []
    k = n - 1 if window <= 0 else min(window, n - 1)
    for i in range(n):
        for j in range(n - 1):
            dst = (i + 1 + j) % n
            if j < k:
                after, delay = after_all[i], d + extra_delay
            else:
                # the (j-K)-th message member i receives comes from i-1-(j-K)
                sender = (i - 1 - (j - k)) % n
                idx = base + sender * (n - 1) + ((i - sender - 1) % n)
                after, delay = after_all[i] + (idx,), d
            out.append(Transfer(i, dst, pairs[i * n + dst] if pairs else msg, after, delay))
    return out


def _received_by(n: int, base: int, member: int) -> tuple[int, ...]:
    return tuple(base + s * (n - 1) + ((member - s - 1) % n) for s in range(n) if s != member)


def direct_plan(ctype: CollectiveType, n: int, size: int, timing: StepTiming, chunk_index: int = 0,
                window: int = 0) -> Plan:
    if n == 1:
        return Plan(n, (), ((),) * n, (0.0,) * n)
    d = timing.endpoint_delay_s
    msg = size // n
    none: list[tuple[int, ...]] = [()] * n
    if ctype is CollectiveType.ALL_TO_ALL:
        transfers = _a2a_round(n, msg, d, 0, none, window, 0.0)
        exits = tuple(_received_by(n, 0, i) for i in range(n))
        return Plan(n, tuple(transfers), exits, (d,) * n)
    # all-reduce: reduce-scatter round, then all-gather round released by all RS receipts
    rs = _a2a_round(n, msg, d, 0, none, window, 0.0)
    red = timing.reduction_s(msg)
    rs_in = [_received_by(n, 0, i) for i in range(n)]
    ag = _a2a_round(n, msg, d, len(rs), rs_in, window, red)
    exits = tuple(_received_by(n, len(rs), i) for i in range(n))
    return Plan(n, tuple(rs + ag), exits, (d,) * n)


def pair_chunk(pair_bytes: tuple[int, ...], chunks: int, c: int) -> tuple[int, ...]:
    """Chunk ``c`` of ``chunks`` of a per-pair all-to-all: every pair split evenly, the first
    ``size mod chunks`` chunks one byte more."""
    return tuple(p // chunks + (1 if c < p % chunks else 0) for p in pair_bytes)


def direct_pair_plan(n: int, pairs: tuple[int, ...], timing: StepTiming, window: int = 0,
                     members: Members | None = None) -> Plan:
    """A direct all-to-all whose member i sends ``pairs[i·n + j]`` bytes to member j (skewed routing; where the
    members sit does not matter)."""
    d = timing.endpoint_delay_s
    transfers = _a2a_round(n, 0, d, 0, [()] * n, window, 0.0, pairs)
    return Plan(n, tuple(transfers), tuple(_received_by(n, 0, i) for i in range(n)), (d,) * n)


COLLECTIVES.register(
    "direct", "Direct: D/N to every peer concurrently (window K with directK); all-reduce as RS then AG",
    "ASTRA-sim 2.0 AllToAll.cc (docs/reference-semantics.md B.4)",
)(Algorithm(frozenset({CollectiveType.ALL_TO_ALL, CollectiveType.ALL_REDUCE}), direct_plan, expert_all_to_all=True,
            pair_plan=direct_pair_plan))
