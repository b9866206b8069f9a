"""Read a run's diagnostics side files (docs/study.md §7, "Diagnostics").

A run's ``diagnostics_path`` names a Parquet file or a folder of Parquet files (relative paths are
taken from the results folder; the experiments store writes ``diagnostics/<run_id>/<name>.parquet``).
Each table is recognised by its columns and normalised:

- bytes per link: ``link`` or ``link_id``, and ``bytes`` or ``link_bytes`` → columns ``link``, ``bytes``
- queue-length samples: ``time_s``, ``port`` / ``link`` / ``link_id``, ``queue_bytes``
- PFC pause events: ``time_s``, ``port`` / ``link`` / ``link_id`` and no byte column

A single table with a ``kind`` column (values ``link_bytes``, ``queue``, ``pfc``) is split by it.
Other tables (flow completion times, scalars) are ignored here.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from moesim.errors import MoesimError

KINDS = ("link_bytes", "queue", "pfc")


def _first(cols: set[str], names: tuple[str, ...]) -> str | None:
    return next((n for n in names if n in cols), None)


def classify(table: pa.Table) -> tuple[str, pa.Table] | None:
    """(kind, normalised table), or None when ``table`` is no diagnostics kind shown here."""
    cols = set(table.column_names)
    where = _first(cols, ("port", "link", "link_id"))
    if "time_s" in cols and where:
        t = table.rename_columns(["port" if c == where else c for c in table.column_names])
        if "queue_bytes" in cols:
            return "queue", t
        if not cols & {"bytes", "link_bytes", "size_bytes"}:
            return "pfc", t
        return None
    link, size = _first(cols, ("link", "link_id")), _first(cols, ("bytes", "link_bytes"))
    if link and size:
        return "link_bytes", pa.table({"link": pc.cast(table.column(link), pa.string()),
                                       "bytes": pc.cast(table.column(size), pa.float64())})
    return None


def _drop_null_columns(t: pa.Table) -> pa.Table:
    """Columns that belong to other kinds are all null in a kind's rows of a combined table."""
    return t.select([c for c in t.column_names if t.column(c).null_count < t.num_rows]) if t.num_rows else t


def read_diagnostics(path: str | Path | None, base: str | Path = ".") -> dict[str, pa.Table]:
    """The diagnostics tables of one run by kind; empty when there are none (or the path is missing)."""
    if not path:
        return {}
    p = Path(path)
    if not p.is_absolute():
        p = Path(base) / p
    files = sorted(p.glob("*.parquet")) if p.is_dir() else [p] if p.is_file() else []
    out: dict[str, pa.Table] = {}
    for f in files:
        t = pq.read_table(f)
        parts = [_drop_null_columns(t.filter(pc.equal(t.column("kind"), k)).drop_columns(["kind"])) for k in KINDS] \
            if "kind" in t.column_names else [t]
        for part in parts:
            found = classify(part) if part.num_rows else None
            if found and found[0] not in out:
                out[found[0]] = found[1]
    return out


def name_links(table: pa.Table, topology: str) -> pa.Table:
    """Replace numeric link ids by ``src->dst`` names from the run's topology (kept as ids if unknown)."""
    ids = table.column("link").to_pylist()
    if not all(str(i).isdigit() for i in ids):
        return table
    try:
        from moesim.topology.catalog import get_topology

        links = get_topology(topology).links
    except MoesimError:
        return table
    names = {str(lk.id): f"{lk.src}->{lk.dst}" for lk in links}
    return table.set_column(0, "link", pa.array([names.get(str(i), str(i)) for i in ids], type=pa.string()))
