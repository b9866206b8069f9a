"""What a collective algorithm produces: a plan of point-to-point transfers with explicit dependencies.

A plan describes one chunk of one collective over a group of ``n`` members (positions 0..n-1 in ring
order). Transfer ``j`` may start once every transfer in ``after`` has arrived at its destination and
the source member has issued the transfers in ``after_sent`` (none: its stream for this chunk has
started), plus ``delay_s`` (ASTRA-sim's per-step bundle delay, plus the reduction delay when the
message that released it was "processed"). A member's stream exits ``exit_delay_s`` after the
transfers in its ``exit_after`` have arrived and those in its ``exit_after_sent`` were issued.

With ``SystemSettings.astra_receives`` the engine matches arrivals as ASTRA-sim's NS-3 frontend matches
receives: by count per (source, destination) within the chunk, so the k-th message to arrive on a pair
counts as that pair's k-th transfer in plan order, whichever it is (docs/reference-semantics.md B.1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from moesim.errors import MoesimError
from moesim.registry import Registry
from moesim.workload.graph import CollectiveType


@dataclass(frozen=True)
class Transfer:
    src: int
    dst: int
    size_bytes: int
    after: tuple[int, ...]
    delay_s: float
    after_sent: tuple[int, ...] = ()


@dataclass(frozen=True)
class Plan:
    """Transfers of one chunk, and for every member the transfers whose arrival (and, in
    ``exit_after_sent``, whose issue; empty: none) ends its stream."""

    n: int
    transfers: tuple[Transfer, ...]
    exit_after: tuple[tuple[int, ...], ...]
    exit_delay_s: tuple[float, ...]
    exit_after_sent: tuple[tuple[int, ...], ...] = ()

    @cached_property
    def by_src(self) -> list[list[int]]:
        """Per member, the transfers it sends."""
        out: list[list[int]] = [[] for _ in range(self.n)]
        for j, t in enumerate(self.transfers):
            out[t.src].append(j)
        return out

    @cached_property
    def on_start(self) -> list[list[int]]:
        """Per member, the transfers its stream's start releases (those waiting for no earlier send)."""
        return [[j for j in js if not self.transfers[j].after_sent] for js in self.by_src]

    def exit_sent(self, member: int) -> tuple[int, ...]:
        return self.exit_after_sent[member] if self.exit_after_sent else ()

    @cached_property
    def sent_dependants(self) -> list[list[int]]:
        """Per transfer, the transfers that wait for it to be issued."""
        out: list[list[int]] = [[] for _ in self.transfers]
        for j, t in enumerate(self.transfers):
            for a in t.after_sent:
                out[a].append(j)
        return out

    @cached_property
    def sent_exit_waiters(self) -> list[list[int]]:
        """Per transfer, the members whose stream exit waits for it to be issued."""
        out: list[list[int]] = [[] for _ in self.transfers]
        for m in range(self.n):
            for a in self.exit_sent(m):
                out[a].append(m)
        return out

    @cached_property
    def pair_slots(self) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]] | None:
        """Arrival matching by count: (pair index of each transfer, each pair's transfers in plan order);
        None when no pair carries more than one transfer (every arrival is its own transfer)."""
        index: dict[tuple[int, int], int] = {}
        groups: list[list[int]] = []
        of = []
        for j, t in enumerate(self.transfers):
            g = index.setdefault((t.src, t.dst), len(groups))
            if g == len(groups):
                groups.append([])
            groups[g].append(j)
            of.append(g)
        if len(groups) == len(self.transfers):
            return None
        return tuple(of), tuple(tuple(g) for g in groups)

    @cached_property
    def dependants(self) -> list[list[int]]:
        """Per transfer, the transfers that wait for it."""
        out: list[list[int]] = [[] for _ in self.transfers]
        for j, t in enumerate(self.transfers):
            for a in t.after:
                out[a].append(j)
        return out

    @cached_property
    def exit_waiters(self) -> list[list[int]]:
        """Per transfer, the members whose stream exit waits for it."""
        out: list[list[int]] = [[] for _ in self.transfers]
        for m, after in enumerate(self.exit_after):
            for a in after:
                out[a].append(m)
        return out

    def bytes_sent(self, member: int) -> int:
        return sum(t.size_bytes for t in self.transfers if t.src == member)

    def bytes_received(self, member: int) -> int:
        return sum(t.size_bytes for t in self.transfers if t.dst == member)


@dataclass(frozen=True)
class StepTiming:
    """ASTRA-sim's per-step delays: bundle delay and reduction (two reads + one write of local memory);
    ``receive_with_send``: a member's next step also waits for its own previous send (ASTRA-sim posts a
    step's receive with its send; ``SystemSettings.astra_receives``)."""

    endpoint_delay_s: float = 10e-9
    mem_bw_bytes_per_s: float = 1.6e12
    receive_with_send: bool = False

    def reduction_s(self, size_bytes: int) -> float:
        """3 · floor(bytes / local_mem_bw in ns) ns (docs/reference-semantics.md B.1, D.9)."""
        return 3 * math.floor(size_bytes * 1e9 / self.mem_bw_bytes_per_s) * 1e-9


@dataclass(frozen=True)
class Members:
    """Where a collective's members sit, for algorithms that route by server: each member's server (ring
    order) and ``SystemSettings.expert_routing`` (how many servers a token's experts span)."""

    servers: tuple[int, ...]
    routing: tuple[int, ...] = ()


@dataclass(frozen=True)
class Algorithm:
    """A registered collective algorithm: ``plan(ctype, n, chunk_bytes, timing, chunk_index, window)``;
    ``chunk_index`` counts the chunks its dimension ran so far, across collectives (DBT alternates its
    trees on it). ``placed(ctype, n, chunk_bytes, timing, members)``, if set, is used instead when the
    engine knows where the members sit (a one-dimensional collective). ``expert_all_to_all``: a run may
    pick it for its EP dispatch and combine (the ``all_to_all_algorithm`` override), which a ring's
    all-to-all of N(N-1)/2 sequential steps is not meant for. ``sm_free``: its transfers are posted to
    the NIC and completed by a receive hook, so while it is in flight no SMs are taken from compute
    (``SystemSettings.comm_sms`` does not apply to it; ``occupies_sms``). ``pair_plan(n, pairs, timing,
    window, members)``, if set, plans an all-to-all whose member i sends ``pairs[i·n + j]`` bytes to member j
    (skewed routing, redundant experts); ``members`` says where they sit when the algorithm is ``placed``."""

    supports: frozenset[CollectiveType]
    plan: Callable[[CollectiveType, int, int, StepTiming, int, int], Plan]
    placed: Callable[[CollectiveType, int, int, StepTiming, Members], Plan] | None = None
    expert_all_to_all: bool = False
    sm_free: bool = False
    pair_plan: Callable[[int, tuple[int, ...], StepTiming, int, Members | None], Plan] | None = None

    def __post_init__(self) -> None:
        if self.expert_all_to_all and CollectiveType.ALL_TO_ALL not in self.supports:
            raise MoesimError("collective algorithm: expert_all_to_all needs ALL_TO_ALL among what it supports")


COLLECTIVES: Registry[Algorithm] = Registry("collective algorithm")

# ASTRA-sim implementation names (system JSON) → registry names; "directK" handled in resolve().
ASTRA_NAMES = {
    "ring": "ring",
    "oneRing": "ring",
    "direct": "direct",
    "oneDirect": "direct",
    "doubleBinaryTree": "dbt",
    "halvingDoubling": "halving_doubling",
    "oneHalvingDoubling": "halving_doubling",
}


def resolve(name: str) -> tuple[str, int]:
    """Map an implementation name (ours or ASTRA-sim's, e.g. ``direct8``) to (registry name, window)."""
    if name in COLLECTIVES:
        return name, 0
    if name in ASTRA_NAMES:
        return ASTRA_NAMES[name], 0
    for prefix in ("oneDirect", "direct"):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            return "direct", int(name[len(prefix):])
    allowed = sorted(set(COLLECTIVES.names()) | set(ASTRA_NAMES) | {"directK"})
    raise MoesimError(f"unknown collective implementation '{name}' (allowed: {', '.join(allowed)})")


def expert_all_to_all_algorithms() -> tuple[str, ...]:
    """The registered algorithms a run may pick for its EP all-to-all (``Algorithm.expert_all_to_all``)."""
    return tuple(e.name for e in COLLECTIVES if e.obj.expert_all_to_all)


def occupies_sms(name: str) -> bool:
    """Whether a collective run with implementation ``name`` takes ``comm_sms`` of its rank's GPU while in
    flight (every algorithm but those registered ``sm_free``)."""
    return not COLLECTIVES.get(resolve(name)[0]).sm_free


def chunk_sizes(ctype: CollectiveType, size_bytes: int, splits: int, total_nodes: int) -> list[int]:
    """ASTRA-sim's chunking (B.1): floor(size/K) per chunk, inflated to ``total_nodes`` bytes when
    smaller (except all-gather), and every chunk exactly that size (so the total rounds up)."""
    chunk = size_bytes // splits
    if ctype is not CollectiveType.ALL_GATHER and total_nodes > chunk:
        chunk = total_nodes
        size_bytes = splits * total_nodes
    if chunk == 0:
        return [0] * splits
    return [chunk] * math.ceil(size_bytes / chunk)


def pair_plan_for(algorithm: str, n: int, pairs: tuple[int, ...], timing: StepTiming,
                  members: Members | None = None) -> Plan:
    """Plan one chunk of an all-to-all with per-pair sizes (``pairs[i·n + j]`` bytes from i to j) with a named
    algorithm (``Algorithm.pair_plan``); one without it is a one-line error."""
    name, window = resolve(algorithm)
    algo = COLLECTIVES.get(name)
    if algo.pair_plan is None:
        allowed = ", ".join(e.name for e in COLLECTIVES if e.obj.pair_plan is not None)
        raise MoesimError(f"skewed all-to-all (per-pair sizes): collective algorithm '{name}' cannot run it "
                          f"(allowed: {allowed})")
    return algo.pair_plan(n, pairs, timing, window, members)


def plan_for(algorithm: str, ctype: CollectiveType, n: int, chunk_bytes: int, timing: StepTiming,
             chunk_index: int = 0) -> Plan:
    """Plan one chunk with a named algorithm; unsupported combinations are a one-line error."""
    name, window = resolve(algorithm)
    algo = COLLECTIVES.get(name)
    if ctype not in algo.supports:
        allowed = ", ".join(sorted(c.name for c in algo.supports))
        raise MoesimError(f"collective algorithm '{name}' cannot run {ctype.name} (supports: {allowed})")
    return algo.plan(ctype, n, chunk_bytes, timing, chunk_index, window)
