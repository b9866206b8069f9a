"""Per-node and per-layer breakdown of a run, recorded through the engine's hooks (docs/system.md, "Breakdown").

Each node of each rank gets its layer, kind (``KINDS``, or another collective's name in lower case), bytes,
start, end and its wait on the other ranks: for a collective, the latest issue time among the members
of its instance minus this rank's issue time (0 for the last member to issue, and for compute). The
recorder only observes: a run's results are the same with and without it, layer fast-forward included.
Layers the fast-forward jumps over never run; their nodes are copied from the layer before, shifted by
one period per layer (``copied``), and a node in flight at a jump gets its end from its image after it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from moesim.workload.graph import CollectiveType, Node, NodeKind

if TYPE_CHECKING:
    from moesim.network.base import Flow
    from moesim.system.engine import Simulation
    from moesim.system.fast_forward import LayerFastForward
    from moesim.system.state import FlowOrigin

KINDS = ("compute", "tp_all_reduce", "ep_dispatch", "ep_combine")
"""The kinds of the study's workloads; a node of another collective type has that type's name in lower case."""
LEVELS = ("none", "layers", "nodes")
"""How much of the breakdown a run keeps: nothing, one row per rank, layer and kind, or one row per node."""


def kind_of(node: Node) -> str:
    """``compute``, ``tp_all_reduce`` (an all-reduce), ``ep_combine`` (an all-to-all named ``*combine*``),
    ``ep_dispatch`` (any other all-to-all), or the collective type's name in lower case."""
    if node.kind is NodeKind.COMPUTE or node.collective is None:
        return "compute"
    if node.collective is CollectiveType.ALL_REDUCE:
        return "tp_all_reduce"
    if node.collective is CollectiveType.ALL_TO_ALL:
        return "ep_combine" if "combine" in node.name else "ep_dispatch"
    return node.collective.name.lower()


class NodeRecord(NamedTuple):
    """One node of one rank (a row of ``Breakdown.nodes``): interval, wait on the other ranks; ``copied``:
    not simulated but copied from an earlier layer (fast-forward)."""

    rank: int
    layer: int
    kind: str
    node_id: int
    name: str
    size_bytes: int
    start_s: float
    end_s: float
    wait_s: float
    copied: bool


class ChunkSpan(NamedTuple):
    """One chunk of a collective on one rank: from its first flow to or from the rank starting to its last
    one ending (``node_id``: the collective's node)."""

    rank: int
    node_id: int
    chunk: int
    start_s: float
    end_s: float


class FlowSpan(NamedTuple):
    """One transfer between two ranks."""

    src: int
    dst: int
    size_bytes: int
    start_s: float
    end_s: float


NODE_COLUMNS = {"rank": pa.int32(), "layer": pa.int32(), "kind": pa.string(), "node_id": pa.int64(),
                "name": pa.string(), "size_bytes": pa.int64(), "start_s": pa.float64(), "end_s": pa.float64(),
                "wait_s": pa.float64(), "copied": pa.bool_()}
"""The columns of a breakdown of every node (level ``nodes``)."""
LAYER_COLUMNS = {"rank": pa.int32(), "layer": pa.int32(), "kind": pa.string(), "nodes": pa.int32(),
                 "size_bytes": pa.int64(), "start_s": pa.float64(), "end_s": pa.float64(), "busy_s": pa.float64(),
                 "wait_s": pa.float64(), "copied": pa.bool_()}
"""The columns of a per-layer breakdown (level ``layers``): per rank, layer and kind, the node count, bytes,
first start, last end, summed durations and waits, and whether any node was copied."""


@dataclass(frozen=True)
class Breakdown:
    """What a recorder saw: every node (``NODE_COLUMNS``, ordered by rank and position in its graph), and
    chunks and flows if asked for."""

    nodes: pa.Table
    chunks: tuple[ChunkSpan, ...] = ()
    flows: tuple[FlowSpan, ...] = ()

    def records(self) -> list[NodeRecord]:
        """The nodes as records."""
        return [NodeRecord(*row) for row in zip(*(self.nodes.column(c).to_pylist() for c in NODE_COLUMNS),
                                                strict=True)]

    def table(self, level: str = "layers") -> pa.Table:
        """The breakdown as an Arrow table at ``level`` (``LEVELS``; ``none`` gives an empty table); per layer,
        each rank's kinds in the order they first ran."""
        if level == "nodes":
            return self.nodes
        nodes = self.nodes if level == "layers" else self.nodes.slice(0, 0)
        nodes = nodes.append_column("busy_s", pc.subtract(nodes.column("end_s"), nodes.column("start_s")))
        agg = nodes.group_by(["rank", "layer", "kind"], use_threads=False).aggregate([
            ("node_id", "count"), ("size_bytes", "sum"), ("start_s", "min"), ("end_s", "max"), ("busy_s", "sum"),
            ("wait_s", "sum"), ("copied", "any")])
        agg = agg.sort_by([("rank", "ascending"), ("layer", "ascending"), ("start_s_min", "ascending")])
        names = ["rank", "layer", "kind", "node_id_count", "size_bytes_sum", "start_s_min", "end_s_max", "busy_s_sum",
                 "wait_s_sum", "copied_any"]
        return pa.table({c: agg.column(n).cast(t) for (c, t), n in zip(LAYER_COLUMNS.items(), names, strict=True)})


class Recorder:
    """Records a simulation's breakdown through its hooks (register before ``Simulation.run``); ``detail``
    also records each collective's chunks and every flow (for a timeline). Layers a ``fast_forward`` jumps
    over are copied from the layer before."""

    def __init__(self, sim: Simulation, detail: bool = False, fast_forward: LayerFastForward | None = None) -> None:
        self.sim = sim
        self.fast_forward = fast_forward
        self.graphs = [g.nodes for g in sim.workload.graphs]
        self.start = [[math.nan] * len(g) for g in self.graphs]
        self.end = [[math.nan] * len(g) for g in self.graphs]
        self.copied = [[False] * len(g) for g in self.graphs]
        self.running: dict[tuple[int, int], float] = {}
        self.backfill: list[tuple[int, int, int, float]] = []  # (rank, node, its image's node, shift)
        self.fill: list[tuple[int, int, int, int, float]] = []  # (rank, first, end, nodes per layer, period)
        self.jumps_seen = 0
        self.flows_open: dict[int, tuple[int, float]] = {}
        self.chunk_spans: dict[tuple[int, int, int], list[float]] = {}
        self.flow_spans: list[FlowSpan] = []
        self.jumps = fast_forward.jumps if fast_forward is not None else []
        sim.hooks.node_started.append(self._started)
        sim.hooks.node_finished.append(self._finished)
        if detail:
            sim.hooks.flow_started.append(self._flow_started)
            sim.hooks.flow_finished.append(self._flow_finished)

    def _started(self, r: int, i: int) -> None:
        if len(self.jumps) != self.jumps_seen:
            self._after_jumps()
        self.running[(r, i)] = self.sim.now

    def _finished(self, r: int, i: int) -> None:
        if len(self.jumps) != self.jumps_seen:
            self._after_jumps()
        self.start[r][i] = self.running.pop((r, i), self.sim.now)
        self.end[r][i] = self.sim.now

    def _after_jumps(self) -> None:
        """At the first node event after a fast-forward jump: move what was in flight to its image and copy
        the nodes of the jumped window that had finished."""
        ff = self.fast_forward
        assert ff is not None
        for jump in ff.jumps[self.jumps_seen:]:
            for r, (layer, s) in enumerate(zip(jump.layers, jump.strides, strict=True)):
                first = ff.layer_first[r]
                start, end, copied = self.start[r], self.end[r], self.copied[r]
                for i in range(first[layer], min(first[-1], first[layer + 2])):
                    if not math.isnan(end[i]) and i + s < len(end):
                        start[i + s], end[i + s], copied[i + s] = start[i] + jump.shift_s, end[i] + jump.shift_s, True
                self.fill.append((r, first[layer], first[layer] + s, s // jump.skipped, jump.shift_s / jump.skipped))
            for (r, i), t in list(self.running.items()):
                s = jump.strides[r]
                del self.running[(r, i)]
                self.running[(r, i + s)] = t + jump.shift_s
                self.backfill.append((r, i, i + s, jump.shift_s))
                self.start[r][i] = t
        self.jumps_seen = len(ff.jumps)

    def _flow_started(self, flow: Flow, origin: FlowOrigin) -> None:
        self.flows_open[flow.flow_id] = (flow.size_bytes, self.sim.now)

    def _flow_finished(self, fid: int, origin: FlowOrigin) -> None:
        size, t0 = self.flows_open.pop(fid)
        now = self.sim.now
        self.flow_spans.append(FlowSpan(origin.src_rank, origin.dst_rank, size, t0, now))
        for rank, i in ((origin.src_rank, origin.src_node), (origin.dst_rank, origin.dst_node)):
            if i is None:
                continue
            span = self.chunk_spans.get((rank, i, origin.chunk))
            if span is None:
                self.chunk_spans[(rank, i, origin.chunk)] = [t0, now]
            else:
                span[0], span[1] = min(span[0], t0), max(span[1], now)

    def result(self) -> Breakdown:
        """The breakdown of the finished run."""
        if len(self.jumps) != self.jumps_seen:
            self._after_jumps()
        for r, i, image, shift in self.backfill:
            self.end[r][i] = self.end[r][image] - shift
            self.copied[r][i] = self.copied[r][image] = True
        starts = [np.array(x) for x in self.start]
        ends = [np.array(x) for x in self.end]
        copies = [np.array(x) for x in self.copied]
        for r, lo, hi, per_layer, period in self.fill:
            if lo < per_layer or (hi - lo) % per_layer:
                continue
            # rows: the layer before the jumped ones, then each jumped layer; a node not run takes the value of
            # the same node in the last row that has one, one period later per row
            rows = slice(lo - per_layer, hi)
            todo = np.isnan(ends[r][rows]).reshape(-1, per_layer)
            k = np.arange(len(todo))[:, None]
            last = np.maximum.accumulate(np.where(todo, 0, k), axis=0)
            for values in (starts[r], ends[r]):
                grid = values[rows].reshape(-1, per_layer)
                values[rows] = np.where(todo, np.take_along_axis(grid, last, axis=0) + (k - last) * period, grid).ravel()
            copies[r][rows] |= todo.ravel()
        waits = self._waits(starts, ends)
        columns: dict[str, list[Any]] = {c: [] for c in NODE_COLUMNS}
        kinds: dict[tuple[NodeKind, CollectiveType | None, str], str] = {}
        for r, nodes in enumerate(self.graphs):
            seen = ~np.isnan(ends[r])
            for n, ok in zip(nodes, seen.tolist(), strict=True):
                if ok:
                    kind = kinds.get((n.kind, n.collective, n.name))
                    if kind is None:
                        kind = kinds[(n.kind, n.collective, n.name)] = kind_of(n)
                    columns["layer"].append(n.layer)
                    columns["kind"].append(kind)
                    columns["node_id"].append(n.id)
                    columns["name"].append(n.name)
                    columns["size_bytes"].append(n.size_bytes)
            columns["rank"].append(np.full(int(seen.sum()), r, np.int32))
            columns["start_s"].append(starts[r][seen])
            columns["end_s"].append(ends[r][seen])
            columns["wait_s"].append(waits[r][seen])
            columns["copied"].append(copies[r][seen])
        arrays = {c: pa.array(np.concatenate(v) if c in ("rank", "start_s", "end_s", "wait_s", "copied") else v, t)
                  for (c, t), v in zip(NODE_COLUMNS.items(), columns.values(), strict=True)}
        chunks = tuple(ChunkSpan(r, self.graphs[r][i].id, c, max(a, float(starts[r][i])), min(b, float(ends[r][i])))
                       for (r, i, c), (a, b) in sorted(self.chunk_spans.items()) if not copies[r][i])
        return Breakdown(pa.table(arrays), chunks, tuple(self.flow_spans))

    def _waits(self, starts: list[np.ndarray], ends: list[np.ndarray]) -> list[np.ndarray]:
        """Per node: for a collective, the last issue time of its instance's members minus its own (else 0).
        Instances are matched as the engine matches them: by member group and per-group sequence number in
        issue order."""
        workload = self.sim.workload
        waits = [np.zeros(len(s)) for s in starts]
        issued: dict[tuple[int, ...], list[tuple[int, np.ndarray, np.ndarray]]] = defaultdict(list)
        for r, nodes in enumerate(self.graphs):
            groups: dict[tuple[int, tuple[bool, ...]], tuple[int, ...]] = {}
            by_members: dict[tuple[int, ...], list[int]] = defaultdict(list)
            for i, n in enumerate(nodes):
                if n.kind is NodeKind.COLLECTIVE:
                    members = groups.get((n.group, n.involved_dims))
                    if members is None:
                        members = groups[(n.group, n.involved_dims)] = workload.collective_ranks(r, n)
                    by_members[members].append(i)
            for members, indices in by_members.items():
                idx = np.array(indices)
                idx = idx[~np.isnan(ends[r][idx])]
                idx = idx[np.lexsort((idx, starts[r][idx]))]  # issue order
                issued[members].append((r, idx, starts[r][idx]))
        for per_member in issued.values():
            common = min(len(idx) for _, idx, _ in per_member)
            last = np.max(np.vstack([t[:common] for _, _, t in per_member]), axis=0)
            for r, idx, t in per_member:
                waits[r][idx[:common]] = np.maximum(0.0, last - t[:common])
        return waits
