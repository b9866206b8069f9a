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
from typing import TYPE_CHECKING

import pyarrow as pa

from moesim.workload.graph import CollectiveType, Node, NodeKind

if TYPE_CHECKING:
    from moesim.network.base import Flow
    from moesim.system.engine import Simulation

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


@dataclass(frozen=True)
class NodeRecord:
    """One node of one rank: ``index`` in its graph, interval, wait on the other ranks; ``copied``: not
    simulated but copied from an earlier layer (fast-forward)."""

    rank: int
    index: int
    node_id: int
    name: str
    layer: int
    kind: str
    size_bytes: int
    start_s: float
    end_s: float
    wait_s: float
    copied: bool


@dataclass(frozen=True)
class ChunkSpan:
    """One chunk of a collective on one rank: from its first flow to or from the rank starting to its last
    one ending (``index``: the collective's node)."""

    rank: int
    index: int
    chunk: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class FlowSpan:
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
    """What a recorder saw: every node (ordered by rank and index), and chunks and flows if asked for."""

    nodes: tuple[NodeRecord, ...]
    chunks: tuple[ChunkSpan, ...] = ()
    flows: tuple[FlowSpan, ...] = ()

    def table(self, level: str = "layers") -> pa.Table:
        """The breakdown as an Arrow table at ``level`` (``LEVELS``; ``none`` gives an empty table)."""
        if level == "nodes":
            cols = {c: [getattr(n, c) for n in self.nodes] for c in NODE_COLUMNS}
            return pa.table({c: pa.array(v, t) for (c, t), v in zip(NODE_COLUMNS.items(), cols.values(), strict=True)})
        rows: dict[tuple[int, int, str], list[float]] = {}
        for n in self.nodes if level == "layers" else ():
            acc = rows.get((n.rank, n.layer, n.kind))
            if acc is None:
                rows[(n.rank, n.layer, n.kind)] = [1, n.size_bytes, n.start_s, n.end_s, n.end_s - n.start_s,
                                                   n.wait_s, n.copied]
            else:
                acc[0] += 1
                acc[1] += n.size_bytes
                acc[2], acc[3] = min(acc[2], n.start_s), max(acc[3], n.end_s)
                acc[4] += n.end_s - n.start_s
                acc[5] += n.wait_s
                acc[6] = acc[6] or n.copied
        keys = list(rows)
        data: dict[str, list[object]] = {"rank": [k[0] for k in keys], "layer": [k[1] for k in keys],
                                         "kind": [k[2] for k in keys]}
        for j, c in enumerate(list(LAYER_COLUMNS)[3:]):
            data[c] = [rows[k][j] for k in keys]
        return pa.table({c: pa.array(data[c], t) for c, t in LAYER_COLUMNS.items()})


class Recorder:
    """Records a simulation's breakdown through its hooks (register before ``Simulation.run``); ``detail``
    also records each collective's chunks and every flow (for a timeline)."""

    def __init__(self, sim: Simulation, detail: bool = False) -> None:
        self.sim = sim
        self.graphs = [g.nodes for g in sim.workload.graphs]
        self.start = [[math.nan] * len(g) for g in self.graphs]
        self.end = [[math.nan] * len(g) for g in self.graphs]
        self.copied = [[False] * len(g) for g in self.graphs]
        self.running: dict[tuple[int, int], float] = {}
        self.backfill: list[tuple[int, int, int, float]] = []  # (rank, node, its image's node, shift)
        self.fill: list[tuple[int, int, int, int, float]] = []  # (rank, first, end, nodes per layer, period)
        self.jumps_seen = 0
        self.flows_open: dict[int, tuple[tuple[int, ...], dict[int, int], int, int, int, int, float]] = {}
        self.chunk_spans: dict[tuple[int, int, int], list[float]] = {}
        self.flow_spans: list[FlowSpan] = []
        sim.hooks.node_started.append(self._started)
        sim.hooks.node_finished.append(self._finished)
        if sim.fast_forward is not None:
            sim.hooks.step_finished.append(self._after_step)
        if detail:
            sim.hooks.flow_started.append(self._flow_started)
            sim.hooks.flow_finished.append(self._flow_finished)

    def _started(self, r: int, i: int) -> None:
        self.running[(r, i)] = self.sim.now

    def _finished(self, r: int, i: int) -> None:
        self.start[r][i] = self.running.pop((r, i), self.sim.now)
        self.end[r][i] = self.sim.now

    def _after_step(self) -> None:
        """After a fast-forward jump (its hook runs before this one): move what was in flight to its image
        and copy the nodes of the jumped window that had finished."""
        ff = self.sim.fast_forward
        if ff is None or len(ff.jumps) == self.jumps_seen:
            return
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

    def _flow_started(self, flow: Flow) -> None:
        inst, c, j = self.sim.flows[flow.flow_id]
        t = inst.chunks[c].plan.transfers[j]
        self.flows_open[flow.flow_id] = (inst.members, inst.node_of, c, t.src, t.dst, flow.size_bytes, self.sim.now)

    def _flow_finished(self, fid: int) -> None:
        members, node_of, c, src, dst, size, t0 = self.flows_open.pop(fid)
        now = self.sim.now
        self.flow_spans.append(FlowSpan(members[src], members[dst], size, t0, now))
        for m in (src, dst):
            i = node_of.get(m)
            if i is None:
                continue
            span = self.chunk_spans.get((members[m], i, c))
            if span is None:
                self.chunk_spans[(members[m], i, c)] = [t0, now]
            else:
                span[0], span[1] = min(span[0], t0), max(span[1], now)

    def result(self) -> Breakdown:
        """The breakdown of the finished run."""
        for r, i, image, shift in self.backfill:
            self.end[r][i] = self.end[r][image] - shift
            self.copied[r][i] = self.copied[r][image] = True
        for r, lo, hi, per_layer, period in self.fill:
            start, end, copied = self.start[r], self.end[r], self.copied[r]
            for i in range(lo, hi):
                if math.isnan(end[i]) and i >= per_layer:
                    start[i], end[i], copied[i] = start[i - per_layer] + period, end[i - per_layer] + period, True
        waits = self._waits()
        records = []
        for r, nodes in enumerate(self.graphs):
            start, end, copied = self.start[r], self.end[r], self.copied[r]
            for i, n in enumerate(nodes):
                if not math.isnan(end[i]):
                    records.append(NodeRecord(r, i, n.id, n.name, n.layer, kind_of(n), n.size_bytes, start[i], end[i],
                                              waits.get((r, i), 0.0), copied[i]))
        chunks = tuple(ChunkSpan(r, i, c, max(a, self.start[r][i]), min(b, self.end[r][i]))
                       for (r, i, c), (a, b) in sorted(self.chunk_spans.items()) if not self.copied[r][i])
        return Breakdown(tuple(records), chunks, tuple(self.flow_spans))

    def _waits(self) -> dict[tuple[int, int], float]:
        """Per collective node: the last issue time of its instance's members minus its own. Instances are
        matched as the engine matches them: by member group and per-group sequence number in issue order."""
        workload = self.sim.workload
        issued: dict[tuple[tuple[int, ...], int], list[tuple[int, int, float]]] = defaultdict(list)
        for r, nodes in enumerate(self.graphs):
            seq: dict[tuple[int, ...], int] = defaultdict(int)
            order = sorted((self.start[r][i], i) for i, n in enumerate(nodes)
                           if n.kind is NodeKind.COLLECTIVE and not math.isnan(self.end[r][i]))
            for t, i in order:
                members = workload.collective_ranks(r, nodes[i])
                issued[(members, seq[members])].append((r, i, t))
                seq[members] += 1
        out = {}
        for issues in issued.values():
            last = max(t for _, _, t in issues)
            for r, i, t in issues:
                out[(r, i)] = max(0.0, last - t)
        return out
