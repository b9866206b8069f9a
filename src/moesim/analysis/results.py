"""The results table the analysis works on: loading a store, normalising columns, ordering levels.

A results table is a ``pyarrow.Table`` with one row per run (docs/architecture.md, "Interfaces other parts rely on"): the factor
columns (model, topology, strategy, algorithm, network, or whatever a user matrix varies), the
measurements ``wall_s``, ``gpu_s``, ``comm_s`` and metadata (which column is which:
``moesim.experiments.store_schema``). Factor columns are held as strings and rows are sorted by
them, so every aggregate is summed in one fixed order (bit-identical results whatever order the
runner wrote the rows in).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from moesim.errors import MoesimError, input_error
from moesim.experiments.store_schema import DB_NAME, MEASUREMENTS, METADATA, MODEL, PARQUET_NAME
from moesim.models.catalog import STUDY_MODELS

METRICS = MEASUREMENTS
EXPOSED = "exposed_comm_s"
BACKEND = "backend"
REQUIRED = (MODEL, *(m for m in METRICS if m != EXPOSED))
"""A table without ``exposed_comm_s`` (written before it) gets it derived: wall_s − gpu_s, its definition."""

# Display order of the study's levels (docs/study.md §1, §2, §5); other levels sort naturally.
STUDY_ORDER: dict[str, tuple[str, ...]] = {
    MODEL: STUDY_MODELS,
    "algorithm": ("ring_direct", "dbt_direct"),
    "network": ("ib_cc0", "ib_hpcc", "roce_hpcc", "roce_dcqcn"),
}
STUDY_FACTORS = ("topology", "strategy", "algorithm", "network")


def natural_key(value: str) -> tuple[Any, ...]:
    """Sort key that orders embedded numbers numerically: TP2EP16 < TP16EP2, 2 < 10."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", value) if p)


def level_key(column: str, value: str) -> tuple[Any, ...]:
    """Sort key of one level of ``column``: study order first, then natural order."""
    known = STUDY_ORDER.get(column, ())
    if value in known:
        return (0, known.index(value))
    return (1, natural_key(value))


def ordered(column: str, values: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(values), key=lambda v: level_key(column, v)))


def levels(table: pa.Table, column: str) -> tuple[str, ...]:
    """The distinct values of ``column`` in display order."""
    return ordered(column, (v for v in table.column(column).to_pylist() if v is not None))


def _is_factor_type(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t) or pa.types.is_boolean(t) \
        or pa.types.is_dictionary(t)


def _backend_varies(table: pa.Table, names: Sequence[str]) -> bool:
    """Whether some configuration (the model and the other candidate columns) is stored under two backends."""
    keys = zip(*(table.column(c).to_pylist() for c in (MODEL, *names) if c != BACKEND), strict=True)
    seen: dict[tuple[Any, ...], Any] = {}
    return any(seen.setdefault(k, b) != b for k, b in zip(keys, table.column(BACKEND).to_pylist(), strict=True))


def candidate_factors(table: pa.Table) -> tuple[str, ...]:
    """Columns that may be factors: strings/integers that are neither measurements nor metadata. The
    backend is a factor only where some configuration was run on several backends; otherwise it says
    where each row came from (a store refined on a more exact backend, ``moesim.analysis.confidence``)."""
    names = [n for n in table.column_names if n != MODEL and n not in METADATA and n not in METRICS
             and _is_factor_type(table.schema.field(n).type)]
    if BACKEND in names and not _backend_varies(table, names):
        names.remove(BACKEND)
    study = [n for n in STUDY_FACTORS if n in names]
    return tuple(study + [n for n in names if n not in study])


def factor_columns(table: pa.Table) -> tuple[str, ...]:
    """The factors a table varies (model excluded): candidate columns with at least two levels."""
    return tuple(c for c in candidate_factors(table) if len(levels(table, c)) > 1)


def models(table: pa.Table) -> tuple[str, ...]:
    return levels(table, MODEL)


DEFAULT_LEVEL = "default"
"""The level of an override factor in the runs that do not set it (e.g. ``batch`` of a prefill run)."""


def as_table(data: Any, source: str = "results") -> pa.Table:
    """Normalise a results table: accept a pyarrow Table, a DuckDB relation or a list of dicts.

    Keeps rows whose status is 'ok' (when there is a status column), casts factor columns to
    strings (a run that does not set an override factor gets ``DEFAULT_LEVEL``) and sorts rows by model and
    factors (deterministic summation order).
    """
    if isinstance(data, pa.Table):
        table = data
    elif hasattr(data, "to_arrow_table"):
        table = data.to_arrow_table()
    elif hasattr(data, "fetch_arrow_table"):
        table = data.fetch_arrow_table()
    elif isinstance(data, Sequence):
        table = pa.Table.from_pylist(list(data))
    else:
        raise MoesimError(f"{source}: expected a pyarrow Table, a DuckDB relation or a list of dicts, got {type(data).__name__}")
    for name in REQUIRED:
        if name not in table.column_names:
            raise input_error(source, name, "missing column", allowed=REQUIRED)
    if "status" in table.column_names:
        table = table.filter(pc.equal(table.column("status"), "ok"))
    for name in (MODEL, *candidate_factors(table)):
        col = table.column(name)
        if not pa.types.is_string(col.type):
            col = pc.cast(col, pa.string())
        if col.null_count:  # an override factor that some runs do not set: those runs have its default
            col = pc.fill_null(col, DEFAULT_LEVEL)
        table = table.set_column(table.column_names.index(name), name, col)
    wall, gpu = pc.cast(table.column("wall_s"), pa.float64()), pc.cast(table.column("gpu_s"), pa.float64())
    derived = pc.max_element_wise(pc.subtract(wall, gpu), 0.0)
    if EXPOSED not in table.column_names:
        table = table.append_column(EXPOSED, derived)
    elif table.column(EXPOSED).null_count:
        table = table.set_column(table.column_names.index(EXPOSED), EXPOSED,
                                 pc.coalesce(pc.cast(table.column(EXPOSED), pa.float64()), derived))
    for name in METRICS:
        col = table.column(name)
        if col.type != pa.float64():
            table = table.set_column(table.column_names.index(name), name, pc.cast(col, pa.float64()))
    keys = (MODEL, *candidate_factors(table))
    order = sorted(range(table.num_rows), key=lambda i: tuple(
        level_key(k, table.column(k)[i].as_py() or "") for k in keys))
    return table.take(pa.array(order, type=pa.int64())) if table.num_rows else table


@contextlib.contextmanager
def _read_only(db: Path) -> Iterator[tuple[Any, set[str]]]:
    """A read-only connection to the store ``db`` and the names of its tables; a store that cannot be
    opened or read (damaged, locked, of another schema version) is a one-line error saying how to recover."""
    import duckdb

    from moesim.experiments.store import check_version, open_store, store_error

    con = open_store(db, read_only=True)
    try:
        check_version(con, db)
        yield con, {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    except duckdb.Error as exc:
        raise store_error(db, exc) from None
    finally:
        con.close()


def load_results(directory: str | Path, include_failed: bool = False) -> pa.Table:
    """Open a results store read-only: ``DIR/results.duckdb`` (table ``runs``) or ``DIR/runs.parquet``.

    Returns the normalised table of successful runs (``include_failed`` keeps every row, unsorted).
    """
    d = Path(directory)
    db, pq_path = d / DB_NAME, d / PARQUET_NAME
    if db.is_file():
        with _read_only(db) as (con, tables):
            if "runs" not in tables:
                raise input_error(str(db), "runs", "no table 'runs' in the results store", allowed=sorted(tables) or None)
            rel = con.sql("SELECT * FROM runs")
            table = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.fetch_arrow_table()
        source = str(db)
    elif pq_path.is_file():
        import pyarrow.parquet as pq

        try:
            table, source = pq.read_table(pq_path), str(pq_path)
        except (pa.ArrowException, OSError) as exc:
            raise MoesimError(f"{pq_path}: not a readable Parquet results table ({str(exc).splitlines()[0]})") from None
    else:
        raise MoesimError(f"{d}: no results store found (expected {DB_NAME} or {PARQUET_NAME})")
    if include_failed:
        return table
    return as_table(table, source=source)


def load_store_meta(directory: str | Path) -> dict[str, str]:
    """The key/value table ``store_meta`` of ``DIR/results.duckdb`` (schema version, the sweeps' command
    lines); empty for a Parquet store or one without the table."""
    db = Path(directory) / DB_NAME
    if not db.is_file():
        return {}
    with _read_only(db) as (con, tables):
        if "store_meta" not in tables:
            return {}
        return {str(k): str(v) for k, v in con.execute("SELECT key, value FROM store_meta ORDER BY key").fetchall()}


def where(table: pa.Table, include: Mapping[str, Sequence[str]] | None = None,
          exclude: Mapping[str, Sequence[str]] | None = None) -> pa.Table:
    """Rows whose ``column`` value is in ``include[column]`` and not in ``exclude[column]``.

    A condition on a column the table does not have is ignored (a user matrix without that factor).
    """
    mask = None
    for conds, keep in ((include or {}, True), (exclude or {}, False)):
        for column, values in conds.items():
            if column not in table.column_names:
                continue
            m = pc.is_in(table.column(column), value_set=pa.array([str(v) for v in values], type=pa.string()))
            m = pc.fill_null(m, False)
            if not keep:
                m = pc.invert(m)
            mask = m if mask is None else pc.and_(mask, m)
    return table if mask is None else table.filter(mask)


def describe_configs(rows: Sequence[dict[str, Any]], factors: Sequence[str],
                     all_levels: Mapping[str, Sequence[str]]) -> str:
    """Describe a set of configurations compactly: a factor taking every level becomes 'any'.

    ``rows`` are configurations (dicts of factor → level). When they form a full product of their
    per-factor level sets, one line is enough (e.g. ``topology=6, strategy=TP2EP16, network=any``);
    otherwise they are listed separated by '; '.
    """
    if not rows:
        return ""
    sets = {f: ordered(f, {str(r[f]) for r in rows}) for f in factors}
    size = 1
    for s in sets.values():
        size *= len(s)
    distinct = {tuple(str(r[f]) for f in factors) for r in rows}
    if size == len(distinct):
        parts = []
        for f in factors:
            s = sets[f]
            if len(s) > 1 and len(s) == len(all_levels.get(f, ())):
                parts.append(f"{f}=any")
            else:
                parts.append(f"{f}={'|'.join(s)}")
        return ", ".join(parts)
    return "; ".join(", ".join(f"{f}={v}" for f, v in zip(factors, cfg, strict=True))
                     for cfg in sorted(distinct, key=lambda c: tuple(level_key(f, v) for f, v in zip(factors, c, strict=True))))
