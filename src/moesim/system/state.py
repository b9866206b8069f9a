"""A simulation's state as plain values: what ``Simulation.snapshot`` returns and ``Simulation.restore``
installs. It holds the whole engine state; derived values (plans, a collective's phases, which are rebuilt
from its node) and the network backend's state are not in it. Nodes are (rank, index in the rank's graph);
collectives are positions in ``SimState.collectives``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from moesim.workload.graph import CollectiveType

TreeKey = int | tuple[int, ...]
"""What a Double Binary Tree counter belongs to: a logical dimension, or a sub-group's members."""


class EventKind(IntEnum):
    """What a pending engine event does, and what its arguments are."""

    RANK_START = 0  # (rank,): a rank with a start offset begins its graph
    COMPUTE_DONE = 1  # (rank, node index): a compute node ends
    STREAM_EXIT = 2  # (collective, chunk, member): a member's stream of one chunk ends
    TRANSFER_START = 3  # (collective, chunk, transfer): a transfer of a chunk's plan becomes a flow
    TRANSFERS_START = 4  # (collective, chunk, transfers): several, released together, become flows in order

    @property
    def on_collective(self) -> bool:
        """Whether the first argument is a collective."""
        return self is not EventKind.RANK_START and self is not EventKind.COMPUTE_DONE


@dataclass(frozen=True)
class RankState:
    """Execution state of one rank's graph; node lists are indexed like ``Workload.graphs[rank].nodes``."""

    done: tuple[bool, ...]
    deps_left: tuple[int, ...]
    ready: tuple[int, ...]  # nodes whose dependencies are done, not yet started
    completed: int
    gpu_node: int | None  # the compute node in flight
    comm_busy: bool
    gpu_s: float
    comm_s: float
    wall_s: float  # when the last node ended (an absolute time)
    group_seq: tuple[tuple[tuple[int, ...], int], ...]  # per member group: collectives issued so far
    trees: tuple[tuple[TreeKey, int], ...] = ()
    """Double Binary Trees drawn so far per dimension (a sub-group: its members), DBMAX on even counts."""
    comm_share: float = 0.0
    """The GPU share the collective in flight takes from compute (``comm_sms``, 0 for an SM-free algorithm)."""


@dataclass(frozen=True)
class CollectiveState:
    """One collective instance in progress, matched across ranks by (members, seq)."""

    members: tuple[int, ...]
    seq: int
    ctype: CollectiveType
    size_bytes: int
    impl: str
    chunk_bytes: tuple[int, ...]
    node_of: tuple[tuple[int, int], ...]  # (member position, node index) of the members that issued it
    issue_s: tuple[tuple[int, float], ...]  # (member position, issue time)
    next_chunk: tuple[int, ...]
    exited: tuple[int, ...]
    finished: int
    flows_started: int
    chunks: tuple[tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...]
    """(chunk, transfers' deps left, exits' deps left, arrivals per pair)"""
    retired: bool = False  # every member finished; only its events or flows remain
    pair_bytes: tuple[int, ...] = ()  # a skewed all-to-all's bytes per member pair (Node.pair_bytes)
    trees: tuple[tuple[TreeKey, int], ...] = ()  # the issuing rank's tree counters when it was created
    phased: bool = False  # it runs as phases over several dimensions (rebuilt from its node)
    waiting: tuple[tuple[tuple[int, int], tuple[tuple[int, int], ...]], ...] = ()
    """Phased: per (member, dimension) queue, the (chunk, phase) streams waiting in order."""
    running: tuple[tuple[tuple[int, int], int], ...] = ()
    """Phased: per (member, dimension) queue, the streams running."""


@dataclass(frozen=True)
class PendingEvent:
    time_s: float
    priority: int
    seq: int  # insertion counter: ties in (time, priority) run first in, first out
    kind: EventKind
    args: tuple[int, ...]


@dataclass(frozen=True)
class FlowOrigin:
    """What a flow belongs to, as the flow hooks report it: the collective instance (member ranks and
    per-group sequence number), the chunk, the phase of a collective over several dimensions (else 0),
    the transfer's index in that chunk's plan, the sending and receiving ranks, and the node each of them
    runs the collective as (None while that rank has not issued it yet)."""

    members: tuple[int, ...]
    seq: int
    chunk: int
    phase: int
    transfer: int
    src_rank: int
    dst_rank: int
    src_node: int | None
    dst_node: int | None


@dataclass(frozen=True)
class InFlight:
    """A flow the engine has started and the backend not yet completed: one transfer of a chunk."""

    flow_id: int
    collective: int
    chunk: int
    transfer: int


@dataclass(frozen=True)
class SimState:
    now_s: float
    ranks: tuple[RankState, ...]
    collectives: tuple[CollectiveState, ...]
    events: tuple[PendingEvent, ...]  # in no particular order
    flows: tuple[InFlight, ...]
    next_flow: int  # the id the next flow gets
    next_event_seq: int
