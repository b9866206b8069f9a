"""Serving results in a results store: table ``serving`` of ``DIR/results.duckdb`` (its columns:
``moesim.experiments.store_schema.SERVING_COLUMNS``) and one per-request Parquet file per row.

The Parquet file is written under a temporary name and renamed into place before the row that names it
is committed, so an interrupted command leaves whole rows only. A row is keyed by its ``serve_id`` (every
input hashed): recording the same simulation again replaces it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from moesim.experiments.store import ResultsStore
from moesim.experiments.store_schema import SERVING_COLUMNS, SERVING_DDL, SERVING_DIR, SERVING_TABLE


def row_of(record: dict[str, Any], search_id: str | None, requests_path: str | None) -> dict[str, Any]:
    """The table row of a serving record (``ServeResult.record()``)."""
    disagg = record.get("disaggregate")
    row = {c.name: record.get(c.name) for c in SERVING_COLUMNS}
    row.update(search_id=search_id, requests_path=requests_path,
               prefill_strategy=record.get("prefill_strategy") or (record["strategy"] if disagg else None),
               prefill_servers=disagg[0] if disagg else None, decode_servers=disagg[1] if disagg else None,
               params_json=json.dumps(record, sort_keys=True, default=repr),
               finished_at=dt.datetime.now(dt.UTC).replace(tzinfo=None))
    return row


def record_serving(directory: str | Path, items: Sequence[tuple[dict[str, Any], pa.Table | None]],
                   search_id: str | None = None, command: str | None = None) -> Path:
    """Store serving records (each with its per-request table, or None) in the results store ``directory``."""
    with ResultsStore(directory) as store:
        if command:
            store.record_command(command)
        store.con.execute(SERVING_DDL)
        folder = Path(directory) / SERVING_DIR
        rows = []
        for record, table in items:
            rel = None
            if table is not None:
                folder.mkdir(parents=True, exist_ok=True)
                tmp = folder / f".tmp-{record['serve_id']}-{uuid.uuid4().hex[:8]}"
                pq.write_table(table, tmp)
                rel = f"{SERVING_DIR}/{record['serve_id']}.parquet"
                os.replace(tmp, Path(directory) / rel)
            rows.append(row_of(record, search_id, rel))
        names = [c.name for c in SERVING_COLUMNS]
        store.con.execute("BEGIN TRANSACTION")
        store.con.executemany(
            f"INSERT OR REPLACE INTO {SERVING_TABLE} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})",
            [[r[n] for n in names] for r in rows])
        store.con.execute("COMMIT")
        return store.path
