"""Where a run's time goes: its stored breakdown (``DIR/breakdown/<run_id>.parquet``) read per layer of one
rank, and split into compute, each collective's own time, and waiting on other ranks (docs/analysis.md)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from moesim.experiments.store_schema import BREAKDOWN_DIR
from moesim.system.breakdown import KINDS

MAX_BREAKDOWN_RUNS = 12
"""The report's breakdown figure shows at most this many of the slowest runs."""


def _kinds(seen: set[str]) -> list[str]:
    return [k for k in KINDS if k in seen] + sorted(seen - set(KINDS))


def _rows(table: pa.Table, rank: int) -> list[dict[str, Any]]:
    """The rank's rows with ``busy_s`` (a per-node table gets it from its intervals)."""
    rows = [r for r in table.to_pylist() if r["rank"] == rank]
    for r in rows:
        r.setdefault("busy_s", r["end_s"] - r["start_s"])
    return rows


def layer_breakdown(table: pa.Table, rank: int) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per layer of ``rank``: ``layer, start_s, end_s, <kind>_s`` (busy seconds per kind), ``wait_s``
    (collectives' wait on other ranks, part of their busy time) and ``copied`` (fast-forwarded); and the kinds."""
    layers: dict[int, dict[str, Any]] = {}
    seen: set[str] = set()
    for r in _rows(table, rank):
        acc = layers.setdefault(r["layer"], {"layer": r["layer"], "start_s": r["start_s"], "end_s": r["end_s"],
                                             "wait_s": 0.0, "copied": False})
        acc["start_s"], acc["end_s"] = min(acc["start_s"], r["start_s"]), max(acc["end_s"], r["end_s"])
        acc[f"{r['kind']}_s"] = acc.get(f"{r['kind']}_s", 0.0) + r["busy_s"]
        acc["wait_s"] += r["wait_s"]
        acc["copied"] = acc["copied"] or bool(r["copied"])
        seen.add(r["kind"])
    kinds = _kinds(seen)
    out = [layers[k] for k in sorted(layers)]
    for row in out:
        for k in kinds:
            row.setdefault(f"{k}_s", 0.0)
    return out, kinds


def time_split(table: pa.Table, rank: int) -> dict[str, float]:
    """``rank``'s time by part: ``compute``, each collective kind without its wait, and ``wait on other
    ranks``; idle time (nothing running) is what is left of the wall time."""
    split: dict[str, float] = defaultdict(float)
    for r in _rows(table, rank):
        if r["kind"] == "compute":
            split["compute"] += r["busy_s"]
        else:
            split[r["kind"]] += r["busy_s"] - r["wait_s"]
            split["wait on other ranks"] += r["wait_s"]
    wait = "wait on other ranks"
    order = ["compute", *[k for k in _kinds(set(split) - {wait}) if k != "compute"], wait]
    return {k: split[k] for k in order if k in split}


def slowest_splits(table: pa.Table, directory: str | Path, label_columns: list[str],
                   limit: int = MAX_BREAKDOWN_RUNS) -> list[tuple[str, float, dict[str, float]]]:
    """(label, wall_s, time split of the bottleneck rank) of the ``limit`` slowest runs of ``table`` that have
    a stored breakdown, slowest first."""
    import pyarrow.parquet as pq

    if "run_id" not in table.column_names:
        return []
    out = []
    for r in sorted(table.to_pylist(), key=lambda r: (-r["wall_s"], r["run_id"])):
        path = Path(directory) / BREAKDOWN_DIR / f"{r['run_id']}.parquet"
        if not path.is_file():
            continue
        label = " · ".join(str(r[c]) for c in label_columns if c in r)
        out.append((label, float(r["wall_s"]), time_split(pq.read_table(path), int(r["bottleneck_rank"]))))
        if len(out) >= limit:
            break
    return out
