"""The event loop's run-time records: a rank's graph in execution, a collective instance in progress and
one of its chunks. The engine (``engine.py``) mutates them; ``snapshot.py`` turns them into plain values
(``state.py``) and back."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from moesim.errors import MoesimError
from moesim.system.collectives import Plan
from moesim.system.phases import Phases, StreamQueues
from moesim.workload.graph import CollectiveType, Node


@dataclass
class ChunkRun:
    """Run-time state of one chunk of one collective instance."""

    plan: Plan
    deps_left: list[int]
    exit_left: list[int]
    arrived: list[int]
    """With ASTRA-sim's receives, per (source, destination) pair of the plan (``Plan.pair_slots``): messages
    arrived so far; empty when every arrival is its own transfer's."""


@dataclass
class CollectiveRun:
    """One collective executed by a group of ranks (matched by group and per-group sequence number)."""

    members: tuple[int, ...]
    seq: int
    ctype: CollectiveType
    size_bytes: int
    impl: str
    chunk_bytes: list[int]
    chunks: dict[int, ChunkRun] = field(default_factory=dict)
    next_chunk: list[int] = field(default_factory=list)
    exited: list[int] = field(default_factory=list)
    issue_time: dict[int, float] = field(default_factory=dict)
    node_of: dict[int, int] = field(default_factory=dict)
    finished: int = 0
    flows_started: int = 0
    phases: Phases | None = None
    """Over several dimensions: every chunk's phases; None: one flat phase over the members (chunk key c)."""
    queues: StreamQueues | None = None
    trees: dict[Any, int] = field(default_factory=dict)
    """The Double Binary Tree counter of each dimension key when the collective was created."""
    pair_bytes: tuple[int, ...] = ()  # a skewed all-to-all: bytes per (sender, receiver) member pair


class RankRun:
    """Execution state of one rank's graph."""

    def __init__(self, nodes: tuple[Node, ...]) -> None:
        self.nodes = nodes
        self.index = {n.id: i for i, n in enumerate(nodes)}
        self.deps_left = [len(n.deps) for n in nodes]
        self.dependants: list[list[int]] = [[] for _ in nodes]
        for i, n in enumerate(nodes):
            for d in n.deps:
                if d not in self.index:
                    raise MoesimError(f"node {n.id} depends on node {d}, which does not exist in the same rank")
                self.dependants[self.index[d]].append(i)
        self.ready: list[int] = [i for i, c in enumerate(self.deps_left) if c == 0]
        self.done = [False] * len(nodes)
        self.completed = 0
        self.gpu_busy: int | None = None  # index of the compute node in flight
        self.comm_busy = False
        self.comm_share = 0.0  # the GPU share the collective in flight takes from compute (comm_sms or 0)
        self.gpu_s = 0.0
        self.comm_s = 0.0
        self.wall_s = 0.0
        self.group_seq: dict[tuple[int, ...], int] = defaultdict(int)
        self.trees: dict[Any, int] = defaultdict(int)  # per dimension: DBT trees drawn so far
