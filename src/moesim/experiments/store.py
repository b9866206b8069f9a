"""The results store: one row per run in ``DIR/results.duckdb`` (table ``runs``), diagnostics as Parquet.

Only the sweep driver writes, one transaction per finished run, so a sweep killed at any moment
(even ``kill -9``) leaves complete rows only; DuckDB replays its write-ahead log on the next open.
A run's diagnostics are written to ``DIR/diagnostics/<run_id>/*.parquet`` through a temporary folder
renamed into place *before* the row that references them is committed, and its breakdown to
``DIR/breakdown/<run_id>.parquet`` the same way; files without a successful row are removed when a sweep
starts. Rows are keyed by
``run_id`` (the spec and its input hash, see ``moesim.experiments.inputs``); ``spec_key`` (the canonical RunSpec)
has one row at most: a run redone with changed inputs replaces the old row.

The columns, their types and roles are ``moesim.experiments.store_schema``; a sweep adds one text
column per parameter override it varies (e.g. ``tokens``), so the analysis sees those as factors.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from moesim.errors import MoesimError
from moesim.experiments.factors import SPEC_FACTORS, level_label
from moesim.experiments.inputs import code_hash
from moesim.experiments.store_schema import (
    ADDED_COLUMNS,
    BASE_COLUMNS,
    BREAKDOWN_DIR,
    COLUMNS,
    COMMAND_KEY,
    DB_NAME,
    DEFAULT_QUERY,
    DIAGNOSTICS_DIR,
    META_DDL,
    RUNS_DDL,
    SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
)
from moesim.experiments.worker import RunOutcome
from moesim.version import __version__

RECOVERY = ("restore it from a copy, or move it away and rerun the sweep into this folder "
            "(every run is simulated again)")
"""What a user can do about a store moesim cannot read."""


def store_error(db: Path, exc: Exception) -> MoesimError:
    """A DuckDB error met while reading the store ``db`` as one line: what is wrong and how to recover."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return MoesimError(f"{db}: the results store is damaged or not a DuckDB file ({first}); {RECOVERY}")


def is_store_damage(exc: Exception) -> bool:
    """Whether a DuckDB error comes from the file (truncated, corrupt) rather than from a query."""
    import duckdb

    return isinstance(exc, duckdb.IOException | duckdb.SerializationException | duckdb.InternalException)


def open_store(db: Path, read_only: bool, config: dict[str, Any] | None = None) -> Any:
    """A DuckDB connection to the store ``db``; a locked or unreadable file is a one-line error."""
    import duckdb

    try:
        return duckdb.connect(str(db), read_only=read_only, config=config or {})
    except duckdb.IOException as exc:
        first = str(exc).splitlines()[0]
        if "lock" in first.lower():
            pid = re.search(r"PID (\d+)", first)
            who = f" (process {pid.group(1)})" if pid else ""
            raise MoesimError(f"{db}: the results store is in use by a running sweep{who}; "
                              "try again when it has finished") from None
        if "cannot open" in first.lower():  # permissions, a missing folder: the file itself is not at fault
            raise MoesimError(f"{db}: cannot open the results store ({first})") from None
        raise store_error(db, exc) from None
    except duckdb.Error as exc:
        raise store_error(db, exc) from None


def check_version(con: Any, db: Path) -> None:
    """Refuse a store written with another schema version than ``SCHEMA_VERSION`` (one line)."""
    import duckdb

    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        rows = con.execute("SELECT value FROM store_meta WHERE key = ?", [SCHEMA_VERSION_KEY]).fetchall() \
            if "store_meta" in tables else []
    except duckdb.Error as exc:
        raise store_error(db, exc) from None
    if rows and rows[0][0] != SCHEMA_VERSION:
        raise MoesimError(f"{db}: results store of schema version {rows[0][0]!r}; this moesim reads and writes version "
                          f"{SCHEMA_VERSION!r} (use the moesim that wrote it, or another folder)")


def check_store(db: Path) -> None:
    """Before a sweep writes into the existing store ``db``: the schema version, the columns of table ``runs``
    and every row readable, so that a store moesim did not write, or a damaged one, is never written to."""
    import duckdb

    con = open_store(db, read_only=True)
    try:
        check_version(con, db)
        missing = missing_columns(con, db)
        if missing:
            raise MoesimError(f"{db}: not a moesim results store: table runs has no column {', '.join(missing)} "
                              "(move it away, or sweep into another folder)")
        if missing is not None:
            try:
                con.execute("SELECT * FROM runs").fetchall()  # reads every block of the table
            except duckdb.Error as exc:
                raise store_error(db, exc) from None
    finally:
        con.close()


def missing_columns(con: Any, db: Path) -> list[str] | None:
    """The columns of table ``runs`` that a store of this schema version has and this one lacks (the
    columns a sweep adds on opening aside); None when there is no table ``runs``."""
    import duckdb

    try:
        columns = {r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'").fetchall()}
    except duckdb.Error as exc:
        raise store_error(db, exc) from None
    if not columns:
        return None
    return [c for c in BASE_COLUMNS if c not in columns and c not in ADDED_COLUMNS]


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def row_for(outcome: RunOutcome, diagnostics_path: str | None, finished_at: dt.datetime) -> dict[str, Any]:
    """The store row of one outcome (a failed run keeps its factors and its error, no figures)."""
    from moesim.workload.layout import ParallelLayout

    spec = outcome.spec
    layout = ParallelLayout.parse(spec.strategy)
    row: dict[str, Any] = {
        "run_id": outcome.run_id, "spec_key": spec.key(), "model": spec.model, "topology": spec.topology,
        "strategy": spec.strategy, "tp": layout.tp, "ep": layout.ep, "algorithm": spec.algorithm,
        "network": spec.network, "backend": spec.backend, "overrides_json": _json(spec.override_dict()),
        "input_hash": outcome.input_hash or outcome.run_id, "finished_at": finished_at, "diagnostics_path": diagnostics_path,
    }
    if outcome.result is not None:
        s = outcome.result.summary()
        row.update(
            wall_s=float(s["wall_s"]), gpu_s=float(s["gpu_s"]), comm_s=float(s["comm_s"]),
            exposed_comm_s=float(s["exposed_comm_s"]),
            bottleneck_rank=int(s["bottleneck_rank"]), cc_model=s["cc_model"], cc_policy=s["cc_policy"],
            backend=s["backend"], status="ok", error=None, version=s["version"],
            params_json=_json({**s["parameters"], "source_sha256": code_hash()}), sim_wallclock_s=float(outcome.result.sim_wallclock_s),
            fluid_steps=outcome.fluid_steps, engine_events=outcome.engine_events,
        )
    else:
        row.update(status="error", error=outcome.error or "unknown error", version=__version__)
    for name, value in spec.overrides:
        row[name] = level_label(value)
    return row


def diagnostics_tables(diagnostics: dict[str, Any]) -> dict[str, pa.Table]:
    """Diagnostics → one Arrow table each: 1-D arrays get an index column (``link_id`` for ``link_*``),
    2-D arrays one column per axis-1 entry, lists of records or dicts of columns map directly;
    scalars are gathered in one ``scalars`` table."""
    tables: dict[str, pa.Table] = {}
    scalars: dict[str, list[Any]] = {}
    for name, value in diagnostics.items():
        if isinstance(value, pa.Table):
            tables[name] = value
        elif isinstance(value, np.ndarray) and value.ndim == 1:
            index = "link_id" if name.startswith("link_") else "index"
            tables[name] = pa.table({index: np.arange(len(value)), name: value})
        elif isinstance(value, np.ndarray) and value.ndim == 2:
            tables[name] = pa.table({f"c{j}": value[:, j] for j in range(value.shape[1])})
        elif isinstance(value, dict):
            tables[name] = pa.table({str(k): np.asarray(v) for k, v in value.items()})
        elif isinstance(value, list | tuple) and value and isinstance(value[0], dict):
            tables[name] = pa.Table.from_pylist(list(value))
        elif isinstance(value, list | tuple):
            tables[name] = pa.table({"index": np.arange(len(value)), name: np.asarray(value)})
        else:
            scalars[name] = [value.item() if isinstance(value, np.generic) else value]
    if scalars:
        tables["scalars"] = pa.table(scalars)
    return tables


class ResultsStore:
    """The writable store of one output folder (use as a context manager; one writer at a time)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MoesimError(f"{self.directory}: cannot create the output folder ({exc})") from None
        self.path = self.directory / DB_NAME
        if self.path.exists():
            check_store(self.path)
        self.con = open_store(self.path, read_only=False)
        try:
            self.con.execute(RUNS_DDL)
            self.con.execute(META_DDL)
            self.con.execute("INSERT OR IGNORE INTO store_meta VALUES (?, ?)", [SCHEMA_VERSION_KEY, SCHEMA_VERSION])
            self._columns = self._existing_columns()
            for column in COLUMNS:
                if column.name in ADDED_COLUMNS and column.name not in self._columns:
                    self.con.execute(f'ALTER TABLE runs ADD COLUMN "{column.name}" {column.sql}')
            self._columns = self._existing_columns()
        except Exception:
            self.close()
            raise

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _existing_columns(self) -> list[str]:
        return [r[0] for r in self.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs' ORDER BY ordinal_position"
        ).fetchall()]

    # ------------------------------------------------------------------ preparation

    def record_command(self, command: str) -> None:
        """Add ``command`` to the store's list of the command lines that filled it (once each), for provenance."""
        row = self.con.execute("SELECT value FROM store_meta WHERE key = ?", [COMMAND_KEY]).fetchone()
        try:
            commands = json.loads(row[0]) if row else []
        except ValueError:
            commands = None
        commands = commands if isinstance(commands, list) else [row[0]]
        if command not in commands:
            self.con.execute("INSERT OR REPLACE INTO store_meta VALUES (?, ?)", [COMMAND_KEY, json.dumps([*commands, command])])

    def add_factor_columns(self, names: Iterable[str]) -> None:
        """One text column per override factor (``tokens``, ``buffer_bytes``, ...)."""
        for name in sorted(set(names)):
            if name in BASE_COLUMNS or name in SPEC_FACTORS:
                raise MoesimError(f"override '{name}' clashes with the results-store column of the same name")
            if name not in self._columns:
                self.con.execute(f'ALTER TABLE runs ADD COLUMN "{name}" VARCHAR')
        self._columns = self._existing_columns()

    def rekey(self, moves: dict[str, tuple[str, str]]) -> int:
        """Give the rows stored under an old run id (a key of ``moves``) their new ``(run_id, input_hash)``,
        breakdown file included, so that a store keyed by an earlier scheme keeps its results instead of
        simulating them again. New breakdown files are written first and the rows change in one
        transaction; files of a rekeying cut short are orphans the next sweep removes. Returns the rows moved."""
        import pyarrow.parquet as pq

        stored = {r[0] for r in self.con.execute("SELECT run_id FROM runs").fetchall()}
        found = [(old, *moves[old]) for old in moves if old in stored and moves[old][0] not in stored]
        if not found:
            return 0
        root = self.directory / BREAKDOWN_DIR
        for old, new, _ in found:
            if (root / f"{old}.parquet").is_file():
                self._write_breakdown(new, pq.read_table(root / f"{old}.parquet").drop_columns(["run_id"]))
        self.con.execute("BEGIN TRANSACTION")
        self.con.executemany("UPDATE runs SET run_id = ?, input_hash = ? WHERE run_id = ?",
                             [[new, key, old] for old, new, key in found])
        self.con.execute("COMMIT")
        for old, _, _ in found:
            (root / f"{old}.parquet").unlink(missing_ok=True)
        return len(found)

    def forget_stale(self, planned: dict[str, str]) -> int:
        """Delete rows of the planned specs (spec_key → run_id) whose inputs changed; returns how many."""
        rows = self.con.execute("SELECT run_id, spec_key, diagnostics_path FROM runs").fetchall()
        stale = [(rid, diag) for rid, key, diag in rows if key in planned and planned[key] != rid]
        if stale:
            self.con.execute("BEGIN TRANSACTION")
            self.con.executemany("DELETE FROM runs WHERE run_id = ?", [[rid] for rid, _ in stale])
            self.con.execute("COMMIT")
            for rid, diag in stale:
                if diag:
                    shutil.rmtree(self.directory / diag, ignore_errors=True)
                (self.directory / BREAKDOWN_DIR / f"{rid}.parquet").unlink(missing_ok=True)
        return len(stale)

    def remove_orphans(self) -> None:
        """Drop diagnostics folders no row references and breakdowns of no successful run (left by a sweep
        killed between write and commit)."""
        root = self.directory / DIAGNOSTICS_DIR
        if root.is_dir():
            used = {r[0] for r in self.con.execute(
                "SELECT diagnostics_path FROM runs WHERE diagnostics_path IS NOT NULL").fetchall()}
            for entry in root.iterdir():
                if f"{DIAGNOSTICS_DIR}/{entry.name}" not in used:
                    shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        root = self.directory / BREAKDOWN_DIR
        if root.is_dir():
            ok = self.completed_ids()
            for entry in root.iterdir():
                if entry.suffix != ".parquet" or entry.stem not in ok:
                    shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)

    def completed_ids(self) -> set[str]:
        """run_ids of successful runs (failed runs are tried again by the next sweep)."""
        return {r[0] for r in self.con.execute("SELECT run_id FROM runs WHERE status = 'ok'").fetchall()}

    # ------------------------------------------------------------------ writing

    def _write_diagnostics(self, run_id: str, diagnostics: dict[str, Any]) -> str:
        import pyarrow.parquet as pq

        root = self.directory / DIAGNOSTICS_DIR
        root.mkdir(exist_ok=True)
        tmp = root / f".tmp-{run_id}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        for name, table in diagnostics_tables(diagnostics).items():
            pq.write_table(table, tmp / f"{name}.parquet")
        final = root / run_id
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        return f"{DIAGNOSTICS_DIR}/{run_id}"

    def _write_breakdown(self, run_id: str, table: pa.Table) -> None:
        import pyarrow.parquet as pq

        root = self.directory / BREAKDOWN_DIR
        root.mkdir(exist_ok=True)
        tmp = root / f".tmp-{run_id}-{uuid.uuid4().hex[:8]}"
        table = table.add_column(0, "run_id", pa.array([run_id] * table.num_rows, pa.dictionary(pa.int8(), pa.string())))
        pq.write_table(table, tmp)
        os.replace(tmp, root / f"{run_id}.parquet")

    def record(self, outcome: RunOutcome) -> None:
        """Write one finished run: diagnostics and breakdown files first, then its row in one transaction."""
        diag = None
        if outcome.result is not None and outcome.result.diagnostics:
            diag = self._write_diagnostics(outcome.run_id, outcome.result.diagnostics)
        if outcome.result is not None and outcome.result.breakdown is not None:
            self._write_breakdown(outcome.run_id, outcome.result.breakdown)
        row = row_for(outcome, diag, dt.datetime.now(dt.UTC).replace(tzinfo=None))
        missing = [k for k in row if k not in self._columns]
        if missing:
            self.add_factor_columns(missing)
        names = list(row)
        cols = ", ".join(f'"{n}"' for n in names)
        marks = ", ".join("?" for _ in names)
        self.con.execute("BEGIN TRANSACTION")
        try:
            self.con.execute("DELETE FROM runs WHERE spec_key = ? AND run_id <> ?", [row["spec_key"], row["run_id"]])
            self.con.execute(f"INSERT OR REPLACE INTO runs ({cols}) VALUES ({marks})", [row[n] for n in names])
            self.con.execute("COMMIT")
        except BaseException:  # also Ctrl-C: never leave half a run behind
            with contextlib.suppress(Exception):  # nothing to roll back if COMMIT already went through
                self.con.execute("ROLLBACK")
            raise


# ---------------------------------------------------------------------------------------------- reading


def store_path(directory: str | Path) -> Path:
    db = Path(directory) / DB_NAME
    if not db.is_file():
        raise MoesimError(f"{directory}: no results store ({DB_NAME}); run `moesim sweep ... --out {directory}` first")
    return db


READ_ONLY_CONFIG = {
    "enable_external_access": False,  # no ATTACH, COPY, read_csv/read_text/glob, extension loading
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "lock_configuration": True,  # and no SET that would turn any of it back on
}
"""DuckDB settings of the connection that runs a user's query: it sees the store and nothing else."""


def check_select(sql: str) -> str:
    """``sql`` if it is exactly one SELECT (or WITH … SELECT) statement, else a one-line error."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise MoesimError(f"--sql: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1:
        raise MoesimError(f"--sql: expected exactly one statement, got {len(statements)} "
                          "(allowed: one SELECT or WITH … SELECT query)")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise MoesimError(f"--sql: {kind.name} statements are not allowed (allowed: one SELECT or WITH … SELECT query)")
    return sql


def query_results(directory: str | Path, sql: str | None = None) -> pa.Table:
    """Run ``sql`` (default: every row, ordered by the factors): exactly one SELECT, on a read-only
    connection that can reach no other file and whose configuration is locked."""
    import duckdb

    query = DEFAULT_QUERY if sql is None else check_select(sql)
    db = store_path(directory)
    con = open_store(db, read_only=True, config=READ_ONLY_CONFIG)
    try:
        check_version(con, db)
        if sql is None:  # the default query reads the store's columns
            missing = missing_columns(con, db)
            if missing is None:
                raise MoesimError(f"{db}: not a moesim results store (no table runs); sweep into this folder first")
            if missing:
                raise MoesimError(f"{db}: not a moesim results store: table runs has no column "
                                  f"{', '.join(missing)} (query it with --sql, naming the columns it has)")
        try:
            rel = con.sql(query)
            if rel is None:  # a statement without a result
                return pa.table({})
            return rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
        except duckdb.Error as exc:
            if sql is None or is_store_damage(exc):
                raise store_error(db, exc) from None
            raise MoesimError(f"--sql: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()


def resolve_run(directory: str | Path, run: str) -> dict[str, Any]:
    """The row of the successful run ``run`` names: a run_id or a unique prefix of one (at least 4
    characters), or ``slowest`` (the largest wall_s); a one-line error otherwise."""
    import duckdb

    db = store_path(directory)
    con = open_store(db, read_only=True, config=READ_ONLY_CONFIG)
    try:
        check_version(con, db)
        if run == "slowest":
            rows = con.execute("SELECT * FROM runs WHERE status = 'ok' ORDER BY wall_s DESC, run_id LIMIT 1").fetchall()
        elif len(run) >= 4 and all(c in "0123456789abcdef" for c in run):
            rows = con.execute("SELECT * FROM runs WHERE status = 'ok' AND starts_with(run_id, ?) ORDER BY run_id",
                               [run]).fetchall()
        else:
            raise MoesimError(f"--breakdown: '{run}' is not a run (allowed: a run_id or a prefix of at least 4 hex "
                              "digits, or 'slowest'; list them with --sql 'SELECT run_id, model, wall_s FROM runs')")
        names = [d[0] for d in con.description]
    except duckdb.Error as exc:
        raise store_error(db, exc) from None
    finally:
        con.close()
    if not rows:
        raise MoesimError(f"--breakdown: no successful run '{run}' in {directory}")
    if len(rows) > 1:
        raise MoesimError(f"--breakdown: '{run}' names {len(rows)} runs in {directory}; give more digits of the run_id")
    return dict(zip(names, rows[0], strict=True))


def read_breakdown(directory: str | Path, run_id: str) -> pa.Table:
    """The stored breakdown of ``run_id``; a one-line error if the store has none for it."""
    import pyarrow.parquet as pq

    path = Path(directory) / BREAKDOWN_DIR / f"{run_id}.parquet"
    if not path.is_file():
        raise MoesimError(f"{directory}: run {run_id[:12]} has no breakdown (the store predates breakdowns or was "
                          "swept with --breakdown none); rerun the sweep with --rerun to record it")
    table = pq.read_table(path)
    return table.drop_columns(["run_id"]) if "run_id" in table.column_names else table


EXPORT_FORMATS = ("parquet", "csv")


def _refuse_store_files(directory: str | Path, to: str | Path) -> None:
    """A one-line error when ``to`` (links resolved) is the store of ``directory``, its write-ahead log, or a
    file in its diagnostics or breakdown folders: an export never writes over the data it reads."""
    if str(to) == "-":
        return
    root = Path(os.path.realpath(directory))
    target = Path(os.path.realpath(to))
    own = (root / DB_NAME, root / f"{DB_NAME}.wal")
    if target in own or any(target.is_relative_to(root / d) for d in (DIAGNOSTICS_DIR, BREAKDOWN_DIR)):
        raise MoesimError(f"--to {to}: is a file of the results store {directory} itself; name a file outside "
                          f"{DB_NAME} and its {DIAGNOSTICS_DIR}/ and {BREAKDOWN_DIR}/ folders")


def export_results(directory: str | Path, to: str | Path, fmt: str, sql: str | None = None) -> int:
    """Write the query result to ``to`` as Parquet or CSV (``moesim.fileio.write_output``: atomically, or
    ``-`` for standard output); returns the number of rows."""
    from moesim.fileio import output_file, write_output

    if fmt not in EXPORT_FORMATS:
        raise MoesimError(f"--export: unknown format '{fmt}' (allowed: {', '.join(EXPORT_FORMATS)})")
    output_file(to, "--to")
    _refuse_store_files(directory, to)
    table = query_results(directory, sql)
    sink = pa.BufferOutputStream()
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, sink)
    else:
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, sink)
    write_output(to, sink.getvalue().to_pybytes())
    return table.num_rows
