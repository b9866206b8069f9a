"""The in-memory execution graph: one plain, typed DAG per rank (Chakra ET semantics, no globals).

Nodes are GPU compute operations (FLOPs and bytes moved, timed by a roofline) or collectives (type,
per-rank size in bytes, and the ranks taking part given either by a communicator group id or by the
logical dimensions involved). Edges are the ids in ``deps``; a node runs once all of them completed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, IntEnum

from moesim.errors import MoesimError


class NodeKind(Enum):
    COMPUTE = "compute"
    COLLECTIVE = "collective"


class CollectiveType(IntEnum):
    """Collective kinds, numbered as Chakra's ``CollectiveCommType``."""

    ALL_REDUCE = 0
    ALL_GATHER = 2
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7


@dataclass(frozen=True)
class Node:
    """One operation of one rank.

    ``size_bytes`` is the collective's per-rank buffer size in ASTRA-sim's meaning (all-to-all: the
    total over all peers; all-gather: the per-rank input). ``group`` is a communicator-group id (0 =
    the global group); ``involved_dims`` selects logical dimensions of the global group (empty = all).
    ``layer`` is the model layer the node belongs to (-1 = none); the engine's fast-forward uses it.
    ``pair_bytes`` (all-to-all only, empty = ``size_bytes``/n to every peer): the bytes every member
    sends every member, an n×n matrix flattened row by row (row = sender, members in ring order, the
    diagonal stays local); every member's node carries the same matrix. ``peak_scale``: see below.
    """

    id: int
    name: str
    kind: NodeKind
    deps: tuple[int, ...] = ()
    flops: int = 0
    bytes_moved: int = 0
    duration_ns: int = 0
    collective: CollectiveType | None = None
    size_bytes: int = 0
    group: int = 0
    involved_dims: tuple[bool, ...] = ()
    layer: int = -1
    pair_bytes: tuple[int, ...] = ()
    peak_scale: float = 1.0
    """A compute node's peak over the run's ``peak_flops`` (its data types', ``precision.py``; 1 = the run's)."""
    bw_scale: float = 1.0
    """A compute node's memory bandwidth over the run's ``mem_bw_bytes_per_s`` (its kernels' measured
    efficiency, ``efficiency.py``; 1 = the run's)."""


@dataclass(frozen=True)
class RankGraph:
    """All nodes of one rank, in a topological order (every dependency precedes its dependant)."""

    rank: int
    nodes: tuple[Node, ...]

    def node(self, node_id: int) -> Node:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)


@dataclass(frozen=True)
class Workload:
    """The per-rank graphs of one run plus what is needed to resolve collective groups.

    ``logical_dims`` is the logical topology, fastest-varying first (the study: ``(TP, EP)``).
    ``comm_groups`` maps a communicator-group id (> 0) to its member ranks.
    """

    name: str
    graphs: tuple[RankGraph, ...]
    logical_dims: tuple[int, ...]
    comm_groups: tuple[tuple[int, tuple[int, ...]], ...] = ()

    @property
    def num_ranks(self) -> int:
        return len(self.graphs)

    @property
    def groups(self) -> Mapping[int, tuple[int, ...]]:
        return dict(self.comm_groups)

    def collective_ranks(self, rank: int, node: Node) -> tuple[int, ...]:
        """The ranks that take part with ``rank`` in collective ``node``, in ring order."""
        if node.group != 0:
            try:
                members = self.groups[node.group]
            except KeyError:
                raise MoesimError(
                    f"{self.name}: rank {rank} node {node.id}: communicator group {node.group} is not defined "
                    f"(defined: {', '.join(str(g) for g in sorted(self.groups)) or 'none'})"
                ) from None
            return members
        dims = node.involved_dims or (True,) * len(self.logical_dims)
        if len(dims) < len(self.logical_dims):
            dims = dims + (False,) * (len(self.logical_dims) - len(dims))
        coords, stride = [], 1
        strides = []
        for size in self.logical_dims:
            coords.append((rank // stride) % size)
            strides.append(stride)
            stride *= size
        ranks = [0]
        for d, size in enumerate(self.logical_dims):
            if dims[d]:
                ranks = [m + i * strides[d] for i in range(size) for m in ranks]
            else:
                ranks = [m + coords[d] * strides[d] for m in ranks]
        return tuple(sorted(ranks))
