"""A collective over several logical dimensions as a sequence of phases (ASTRA-sim 2.0
``Sys::generate_collective``; docs/reference-semantics.md B.1–B.2, docs/system.md).

Each chunk runs the phases one after another; a phase is one collective over the sub-groups of one
dimension (members that differ only in that coordinate, in coordinate order), planned by that
dimension's algorithm, with the previous phase's output as its input. All-reduce with
``localBWAware``: reduce-scatter up the dimensions, all-reduce on the last, all-gather back down;
with ``baseline``: an all-reduce on every dimension. All-to-all and reduce-scatter visit the dimensions
in order, all-gather in reverse. An algorithm that does not implement a phase's type runs an all-reduce
of the phase's whole input instead (ASTRA-sim's Double Binary Tree does so). The all-gathers that close
a ``localBWAware`` all-reduce take their dimension's queues from the "last" half, which ASTRA-sim
runs anticlockwise (``QueueLevelHandler::get_next_queue_id_last``): ring and direct send to the
previous member there. Per member and dimension a FIFO queue admits ``active_chunks`` streams at a
time; when a chunk's phase ends, its queue starts the next stream, then the chunk joins the next
dimension's queue (ASTRA-sim's order).
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass, field

from moesim.errors import input_error
from moesim.network import BACKENDS
from moesim.network.params import NetworkParams
from moesim.system.collectives.base import COLLECTIVES, resolve
from moesim.workload.graph import CollectiveType, NodeKind, Workload

RING_DIRECTED = ("ring", "direct")
"""Algorithms ASTRA-sim hands a ring direction (Ring and AllToAll); trees and halving-doubling ignore it."""


@dataclass(frozen=True)
class Phase:
    """One phase of every chunk: a collective on dimension ``dim`` over groups of ``n`` members."""

    dim: int
    ctype: CollectiveType
    impl: str
    n: int
    size_bytes: int
    """The phase's input per chunk."""
    groups: tuple[tuple[int, ...], ...]
    """Member indices of each sub-group in ring order (plan position → member): coordinate order, or for
    an anticlockwise phase the first coordinate followed by the others in descending order."""
    where: tuple[tuple[int, int], ...]
    """Per member: (sub-group, position)."""

    @property
    def is_tree(self) -> bool:
        return draws_trees(self.impl)


def draws_trees(impl: str) -> bool:
    """Whether an implementation draws a tree per chunk from its dimension's counter: ASTRA-sim keeps one
    Double Binary Tree counter per rank and dimension, alternating DBMAX/DBMIN across collectives."""
    return resolve(impl)[0] == "dbt"


@dataclass(frozen=True)
class Phases:
    """The phases of one collective instance, and how its chunk keys ((c·phases + p)·members + sub-group)
    name a chunk's phase on one sub-group."""

    phases: tuple[Phase, ...]
    members: int

    def key(self, c: int, p: int, g: int) -> int:
        return (c * len(self.phases) + p) * self.members + g

    def decode(self, k: int) -> tuple[int, int, int]:
        """(chunk, phase, sub-group) of a chunk key."""
        c, rest = divmod(k, len(self.phases) * self.members)
        return c, rest // self.members, rest % self.members

    def member(self, k: int, pos: int) -> int:
        """The member at plan position ``pos`` of chunk key ``k``."""
        _, p, g = self.decode(k)
        return self.phases[p].groups[g][pos]

    def trees_per_chunk(self) -> dict[int, int]:
        """Per dimension, the trees one chunk draws (one per DBT phase there)."""
        out: dict[int, int] = {}
        for ph in self.phases:
            if ph.is_tree:
                out[ph.dim] = out.get(ph.dim, 0) + 1
        return out

    def tree_index(self, k: int, base: dict[int, int]) -> int:
        """The tree counter value chunk key ``k`` draws, the dimension's counter being ``base`` at the start."""
        c, p, _ = self.decode(k)
        dim = self.phases[p].dim
        earlier = sum(1 for q in self.phases[:p] if q.dim == dim and q.is_tree)
        return base.get(dim, 0) + c * self.trees_per_chunk().get(dim, 0) + earlier


def phase_types(ctype: CollectiveType, dims: list[int], optimization: str) -> list[tuple[int, CollectiveType]]:
    """(dimension, collective type) of each phase over the active dimensions ``dims`` (ascending)."""
    if ctype is CollectiveType.ALL_REDUCE:
        if optimization == "baseline":
            return [(d, ctype) for d in dims]
        return ([(d, CollectiveType.REDUCE_SCATTER) for d in dims[:-1]] + [(dims[-1], ctype)]
                + [(d, CollectiveType.ALL_GATHER) for d in reversed(dims[:-1])])
    if ctype is CollectiveType.ALL_GATHER:
        return [(d, ctype) for d in reversed(dims)]
    return [(d, ctype) for d in dims]


def output_bytes(ctype: CollectiveType, n: int, size_bytes: int) -> int:
    """A phase's output per member: reduce-scatter D/n, all-gather D·n, otherwise D (B.2)."""
    if ctype is CollectiveType.REDUCE_SCATTER:
        return size_bytes // n
    if ctype is CollectiveType.ALL_GATHER:
        return size_bytes * n
    return size_bytes


def _sub_groups(members: tuple[int, ...], logical_dims: tuple[int, ...], dim: int, anticlockwise: bool = False
                ) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, int], ...]]:
    """Sub-groups of ``members`` along ``dim`` (member indices in ring order) and each member's place."""
    stride = math.prod(logical_dims[:dim])
    by_rest: dict[int, list[tuple[int, int]]] = {}
    for m, r in enumerate(members):
        coord = (r // stride) % logical_dims[dim]
        by_rest.setdefault(r - coord * stride, []).append((coord, m))
    groups = tuple(tuple(m for _, m in sorted(g)) for _, g in sorted(by_rest.items()))
    if anticlockwise:
        groups = tuple(g[:1] + g[:0:-1] for g in groups)
    where = [(0, 0)] * len(members)
    for g, ms in enumerate(groups):
        for pos, m in enumerate(ms):
            where[m] = (g, pos)
    return groups, tuple(where)


def build_phases(ctype: CollectiveType, members: tuple[int, ...], logical_dims: tuple[int, ...],
                 dims: list[int], impls: dict[CollectiveType, tuple[str, ...]], optimization: str,
                 chunk_bytes: int) -> tuple[Phase, ...]:
    """The phases of a collective of ``ctype`` over the active dimensions ``dims``; ``impls`` holds the
    per-dimension implementations of each collective type (an all-reduce's phases all use all-reduce's)."""
    out: list[Phase] = []
    size = chunk_bytes
    closing = ctype is CollectiveType.ALL_REDUCE and optimization != "baseline"
    for d, ptype in phase_types(ctype, dims, optimization):
        listed = impls[ctype]
        impl = listed[min(d, len(listed) - 1)]
        name = resolve(impl)[0]
        anticlockwise = closing and ptype is CollectiveType.ALL_GATHER and name in RING_DIRECTED
        if ptype not in COLLECTIVES.get(name).supports:
            ptype = CollectiveType.ALL_REDUCE
        groups, where = _sub_groups(members, logical_dims, d, anticlockwise)
        n = logical_dims[d]
        out.append(Phase(d, ptype, impl, n, size, groups, where))
        size = output_bytes(ptype, n, size)
    return tuple(out)


def active_dims(logical_dims: tuple[int, ...], involved: tuple[bool, ...]) -> list[int]:
    """The logical dimensions (of more than one rank) a global-group collective spans (all when
    ``involved`` is empty)."""
    involved = involved or (True,) * len(logical_dims)
    return [d for d, on in enumerate(involved[:len(logical_dims)]) if on and logical_dims[d] > 1]


def spans_dimensions(workload: Workload) -> bool:
    """Whether a global-group collective of ``workload`` runs as phases over several logical dimensions."""
    return any(len(active_dims(workload.logical_dims, n.involved_dims)) > 1 for g in workload.graphs
               for n in g.nodes if n.kind is NodeKind.COLLECTIVE and n.group == 0)


def fast_tier_caveat(backend: str, params: NetworkParams, multi_dimensional: bool) -> str | None:
    """What a backend without packets cannot see in a collective over several dimensions under rate-based
    congestion control: the next chunk's messages, each a new queue pair at line rate, starve the
    cross-dimension flows beside them, and the skew this leaves turns later ring phases into bursts
    (docs/reference-runs.md S9: fluid 50 % short of the reference). None when nothing is hidden."""
    cc = params.cc_algorithm
    if not multi_dimensional or not cc.controls_rate or BACKENDS.get(backend).capabilities.packet_level:
        return None
    return (f"note: the {backend} backend cannot see what decides a collective over several dimensions under "
            f"{cc.name}: messages starting at line rate starve the cross-dimension flows beside them and the "
            "ranks' skew turns later ring phases into bursts; use --backend packet (docs/reference-runs.md S9)")


def refine_dims(workload: Workload, dims: tuple[int, ...]) -> Workload:
    """``workload`` over the finer logical dimensions ``dims``: each of its own dimensions (the study's
    [TP, EP]) is the product of consecutive entries (TP16EP2 as [8, 2, 2]: TP = 8·2), and each
    collective's ``involved_dims`` is widened to match. The ranks of every collective stay the same."""
    own = workload.logical_dims
    split: list[int] = []  # per entry of dims: the workload dimension it refines
    k, left = 0, 1
    for d in dims:
        while left == 1 and d != 1 and k < len(own) and own[k] == 1:
            k += 1
        split.append(min(k, len(own) - 1))
        left *= d
        if k < len(own) and left == own[k]:
            k, left = k + 1, 1
    while k < len(own) and own[k] == 1:
        k += 1
    if k != len(own) or left != 1:
        raise input_error("system settings", "logical_dims",
                          f"{list(dims)} does not refine the workload's dimensions {list(own)} "
                          "(each must be the product of consecutive entries)")
    graphs = []
    for g in workload.graphs:
        nodes = []
        for n in g.nodes:
            if n.involved_dims:
                wide = n.involved_dims + (False,) * (len(own) - len(n.involved_dims))
                n = dataclasses.replace(n, involved_dims=tuple(wide[w] for w in split))
            nodes.append(n)
        graphs.append(dataclasses.replace(g, nodes=tuple(nodes)))
    return dataclasses.replace(workload, graphs=tuple(graphs), logical_dims=tuple(dims))


@dataclass
class StreamQueues:
    """Per (member, dimension) FIFO queue of (chunk, phase) streams, at most ``cap`` of them running."""

    cap: int
    waiting: dict[tuple[int, int], deque[tuple[int, int]]] = field(default_factory=dict)
    running: dict[tuple[int, int], int] = field(default_factory=dict)

    def enqueue(self, m: int, dim: int, c: int, p: int) -> None:
        self.waiting.setdefault((m, dim), deque()).append((c, p))

    def admit(self, m: int, dim: int) -> list[tuple[int, int]]:
        """Streams that may start now on (m, dim), in queue order; they count as running."""
        queue, key = self.waiting.get((m, dim)), (m, dim)
        out = []
        while queue and self.running.get(key, 0) < self.cap:
            out.append(queue.popleft())
            self.running[key] = self.running.get(key, 0) + 1
        return out

    def leave(self, m: int, dim: int) -> None:
        self.running[(m, dim)] -= 1
