"""Packet rows a refine takes from stored references instead of simulating them again.

A run's input hash is the key of its simulation (``moesim.experiments.inputs``: what the simulation reads,
and the moesim version), so a stored row with the same hash is that run's result. ``moesim refine`` looks up
every run it would simulate among the rows of the stored packet references (``benchmarks/reference/*.parquet``
of a source checkout, or the files given with ``--reuse``) and copies a row whose hash equals the run's key
into the store under the run's labels, at no simulation cost. Rows whose hash differs (a reference made by an
older code whose inputs were keyed differently) are not used, however close their setup.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError
from moesim.system.spec import RunSpec

REFERENCE_DIR = Path(__file__).resolve().parents[3] / "benchmarks" / "reference"
"""The stored packet references of a source checkout (absent from an installed package)."""


def reference_files() -> tuple[Path, ...]:
    """The Parquet files of ``REFERENCE_DIR``, sorted (none outside a source checkout)."""
    return tuple(sorted(REFERENCE_DIR.glob("*.parquet"))) if REFERENCE_DIR.is_dir() else ()


@dataclass(frozen=True)
class StoredRows:
    """Successful rows of stored references by input hash, and the file each one comes from."""

    rows: Mapping[str, Mapping[str, Any]]
    source: Mapping[str, str]

    def get(self, key: str) -> Mapping[str, Any] | None:
        return self.rows.get(key)


NONE = StoredRows({}, {})


def load_stored(files: Iterable[str | Path], backend: str) -> StoredRows:
    """The ok rows on ``backend`` of the Parquet ``files`` (a results export or a reference), keyed by input
    hash; the first file holding a hash wins. An unreadable file is a one-line error naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows: dict[str, Mapping[str, Any]] = {}
    source: dict[str, str] = {}
    for f in files:
        try:
            table = pq.read_table(f)
        except (pa.ArrowException, OSError) as exc:
            raise MoesimError(f"--reuse {f}: not a readable Parquet results table "
                              f"({str(exc).splitlines()[0]})") from None
        missing = [c for c in ("input_hash", "backend", "status", "wall_s", "spec_key") if c not in table.column_names]
        if missing:
            raise MoesimError(f"--reuse {f}: missing column {missing[0]} (a results table needs input_hash, "
                              "backend, status, wall_s, spec_key)")
        for r in table.to_pylist():
            if r["backend"] == backend and r["status"] in (None, "ok") and r["input_hash"] not in rows:
                rows[r["input_hash"]] = r
                source[r["input_hash"]] = Path(f).name
    return StoredRows(rows, source)


def store_row(spec: RunSpec, key: str, stored: Mapping[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    """The store row of ``spec`` (simulation key ``key``) carrying the stored row's results: the spec's labels
    and ids, the stored measurements and parameters, only the store's ``columns``."""
    from moesim.experiments.inputs import run_id_of
    from moesim.workload.layout import ParallelLayout

    layout = ParallelLayout.parse(spec.strategy)
    wall, gpu = float(stored["wall_s"]), float(stored["gpu_s"])
    row = {c: stored.get(c) for c in columns}
    row.update(run_id=run_id_of(spec, key), spec_key=spec.key(), model=spec.model, topology=spec.topology,
               strategy=spec.strategy, tp=layout.tp, ep=layout.ep, algorithm=spec.algorithm, network=spec.network,
               backend=spec.backend, input_hash=key, status="ok", error=None, diagnostics_path=None,
               overrides_json=json.dumps(spec.override_dict(), sort_keys=True, separators=(",", ":")))
    if row.get("exposed_comm_s") is None and "exposed_comm_s" in columns:
        row["exposed_comm_s"] = max(wall - gpu, 0.0)
    for name, value in spec.overrides:
        if name in columns:
            row[name] = str(value)
    return row


def adopt(directory: str | Path, runs: Sequence[tuple[RunSpec, str, Mapping[str, Any]]],
          command: str | None = None) -> int:
    """Write each (spec, key, stored row) of ``runs`` into the store in ``directory`` as that spec's row, in one
    transaction (a kill leaves all or none); ``command`` enters the store's provenance. Returns the rows
    written (those not already stored)."""
    from moesim.experiments.store import ResultsStore

    with ResultsStore(directory) as store:
        done = store.completed_ids()
        extra = sorted({n for spec, _, _ in runs for n, _ in spec.overrides})
        if extra:
            store.add_factor_columns(extra)
        columns = [r[0] for r in store.con.execute("SELECT * FROM runs LIMIT 0").description]
        rows = [r for r in (store_row(s, k, st, columns) for s, k, st in runs) if r["run_id"] not in done]
        if not rows:
            return 0
        names = ", ".join(f'"{c}"' for c in columns)
        marks = ", ".join("?" for _ in columns)
        store.con.execute("BEGIN TRANSACTION")
        try:
            store.con.executemany("DELETE FROM runs WHERE spec_key = ? AND run_id <> ?",
                                  [[r["spec_key"], r["run_id"]] for r in rows])
            store.con.executemany(f"INSERT OR REPLACE INTO runs ({names}) VALUES ({marks})",
                                  [[r[c] for c in columns] for r in rows])
            store.con.execute("COMMIT")
        except BaseException:
            store.con.execute("ROLLBACK")
            raise
        if command:
            store.record_command(command)
    return len(rows)
