"""A run as a Chrome trace (the JSON Trace Event Format, opened by Perfetto and chrome://tracing).

One process per rank (``pid`` = rank), with tracks (threads) ``compute``, ``collectives`` and ``chunks``;
every node and chunk is a complete (``X``) event, times in microseconds. Slices on one track never
overlap: a slice that would overlap another of its group goes to the group's next track (``chunks 2``,
...). Nodes copied by layer fast-forward are not expanded: each rank gets one summary event (category
``summary``) per thread and jump, on tracks of their own (``fast-forwarded compute (summary)``, ...). ``links`` adds, per rank, a counter (``C``) of its send rate (each flow at its
mean rate over its lifetime). A trace holds at most ``max_events`` events: past it, the counters go
first, then the chunks, then nodes are summarised one event per rank, layer and thread.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError
from moesim.fileio import atomic_write
from moesim.system.breakdown import Breakdown, NodeRecord
from moesim.system.spec import RunResult

MAX_EVENTS = 1_000_000
"""Default bound on a trace's events (about 150 MB of JSON)."""
TRACKS = ("compute", "collectives", "chunks", "fast-forwarded compute (summary)",
          "fast-forwarded collectives (summary)")
"""Each rank's groups of tracks, in display order; group g's k-th track has tid ``TRACK_TID * g + k``."""
TRACK_TID = 1000
COMPUTE_TID, COLLECTIVE_TID, CHUNK_TID = 0, TRACK_TID, 2 * TRACK_TID


def _us(t_s: float) -> float:
    return t_s * 1e6


def _x(name: str, cat: str, pid: int, track: str, start_s: float, end_s: float, args: dict[str, Any]) -> dict[str, Any]:
    """A complete event; ``track`` is its group of tracks (``TRACKS``), its tid is set by ``_lay_out``."""
    return {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": track, "ts": _us(start_s),
            "dur": max(0.0, _us(end_s) - _us(start_s)), "args": args}


def _thread(n: NodeRecord) -> str:
    return "compute" if n.kind == "compute" else "collectives"


def _lay_out(events: list[dict[str, Any]]) -> dict[tuple[int, int], str]:
    """Give each slice a track of its group on its rank such that slices on one track never overlap (the
    first track free at its start); returns each (rank, tid)'s name."""
    names: dict[tuple[int, int], str] = {}
    free_at: dict[tuple[int, str], list[float]] = defaultdict(list)
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        group = e["tid"]
        ends = free_at[(e["pid"], group)]
        lane = next((k for k, end in enumerate(ends) if end <= e["ts"] + 1e-6), len(ends))  # 1e-6 µs: rounding
        if lane == len(ends):
            ends.append(0.0)
        ends[lane] = e["ts"] + e["dur"]
        e["tid"] = TRACK_TID * TRACKS.index(group) + lane
        names[(e["pid"], e["tid"])] = group if lane == 0 else f"{group} {lane + 1}"
    return names


def _summary(nodes: list[NodeRecord], name: str, pid: int, track: str) -> dict[str, Any]:
    layers = sorted({n.layer for n in nodes})
    return _x(name.format(first=layers[0], last=layers[-1]), "summary", pid, track, min(n.start_s for n in nodes),
              max(n.end_s for n in nodes), {"layers": f"{layers[0]}-{layers[-1]}", "nodes": len(nodes),
                                            "thread": _thread(nodes[0]),
                                            "busy_s": sum(n.end_s - n.start_s for n in nodes),
                                            "wait_s": sum(n.wait_s for n in nodes)})


def _node_events(nodes: list[NodeRecord], per_layer: bool) -> list[dict[str, Any]]:
    """Every simulated node (or one event per rank, layer and thread), and one summary per run of copied
    nodes, on a track of its own (it spans the copied layers, so it overlaps what ran beside them)."""
    out: list[dict[str, Any]] = []
    groups: dict[tuple[int, str, Any], list[NodeRecord]] = defaultdict(list)
    previous: dict[tuple[int, str], bool] = {}
    block: dict[tuple[int, str], int] = defaultdict(int)
    for n in nodes:  # by rank and graph position: a thread's copied nodes form runs between simulated ones
        key = (n.rank, _thread(n))
        if n.copied and not previous.get(key, False):
            block[key] += 1
        previous[key] = n.copied
        if n.copied:
            groups[(n.rank, _thread(n), ("copied", block[key]))].append(n)
        elif per_layer:
            groups[(n.rank, _thread(n), n.layer)].append(n)
        else:
            out.append(_x(n.name, n.kind, n.rank, _thread(n), n.start_s, n.end_s,
                          {"layer": n.layer, "node_id": n.node_id, "bytes": n.size_bytes, "wait_us": _us(n.wait_s)}))
    for (rank, thread, what), group in groups.items():
        if isinstance(what, tuple):
            out.append(_summary(group, f"fast-forwarded layers {{first}}-{{last}} ({thread})", rank,
                                f"fast-forwarded {thread} (summary)"))
        else:
            out.append(_summary(group, f"layer {{first}} ({thread})", rank, thread))
    return out


def _counter_events(breakdown: Breakdown) -> list[dict[str, Any]]:
    """Per rank, its send rate (Gbit/s) each time a flow it sends starts or ends."""
    changes: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for f in breakdown.flows:
        rate = 8 * f.size_bytes / (f.end_s - f.start_s) / 1e9 if f.end_s > f.start_s else 0.0
        changes[f.src] += [(f.start_s, rate), (f.end_s, -rate)]
    out = []
    for rank, items in changes.items():
        level = 0.0
        for t, delta in sorted(items):
            level += delta
            out.append({"name": "send rate", "ph": "C", "pid": rank, "tid": 0, "ts": _us(t),
                        "args": {"Gbit/s": max(0.0, level)}})
    return out


def chrome_trace(result: RunResult, breakdown: Breakdown, links: bool = False,
                 max_events: int = MAX_EVENTS) -> dict[str, Any]:
    """The trace of a run (``breakdown`` recorded with ``detail``) as a JSON-able object, at most
    ``max_events`` events besides the metadata."""
    records = breakdown.records()
    nodes = _node_events(records, per_layer=False)
    chunks = [_x(f"chunk {c.chunk}", "chunk", c.rank, "chunks", c.start_s, c.end_s, {"node_id": c.node_id})
              for c in breakdown.chunks]
    counters = _counter_events(breakdown) if links else []
    events = nodes + chunks + counters
    if len(events) > max_events:
        events = nodes + chunks
    if len(events) > max_events:
        events = nodes
    if len(events) > max_events:
        events = _node_events(records, per_layer=True)
    if len(events) > max_events:
        raise MoesimError(f"trace: {len(events)} events even one per rank, layer and thread, more than the bound "
                          f"{max_events}; raise max_events")
    threads = _lay_out([e for e in events if e["ph"] == "X"])
    meta: list[dict[str, Any]] = []
    for rank in range(len(result.ranks)):
        label = f"rank {rank}" + (" (bottleneck)" if rank == result.bottleneck_rank else "")
        meta.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "ts": 0, "args": {"name": label}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "ts": 0,
                     "args": {"sort_index": rank}})
    for (rank, tid), name in sorted(threads.items()):
        meta.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "ts": 0, "args": {"name": name}})
    events.sort(key=lambda e: (e["pid"], e["tid"], e["ts"]))
    return {"traceEvents": meta + events, "displayTimeUnit": "ns",
            "otherData": {"run": result.spec.key(), "wall_s": result.wall_s, "gpu_s": result.gpu_s,
                          "comm_s": result.comm_s, "exposed_comm_s": result.exposed_comm_s,
                          "bottleneck_rank": result.bottleneck_rank,
                          "fast_forwarded_layers": result.parameters.get("fast_forwarded_layers", 0),
                          "moesim": result.version}}


def write_chrome_trace(path: str | Path, result: RunResult, breakdown: Breakdown, links: bool = False,
                       max_events: int = MAX_EVENTS) -> Path:
    """Write the trace of a run to ``path`` atomically (a one-line error for a path that cannot be written)."""
    return atomic_write(path, json.dumps(chrome_trace(result, breakdown, links, max_events), separators=(",", ":")))
