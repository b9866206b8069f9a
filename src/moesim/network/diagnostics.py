"""Per-run network diagnostics: what to record, bounded collection, Parquet and reference text writers.

Four tables (requested per run with ``DiagnosticsSpec``): flow completion records, PFC pause/resume
events, queue-length samples per switch port, and bytes sent per port. Each is capped at
``max_rows`` rows (queue samples also by sampling interval and time window), so a long run never
produces unbounded files; a capped table says so in its ``truncated`` flag. Text formats follow the
reference's outputs (docs/reference-semantics.md A.4): ``fct.txt``, ``pfc.txt`` and ANS3's ``qlen.txt``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from moesim.errors import MoesimError
from moesim.fileio import atomic_write
from moesim.schema import MAX_COUNT, MAX_DURATION_S, check_fields, param


@dataclass(frozen=True)
class DiagnosticsSpec:
    """Which diagnostics a run records, and their bounds."""

    fct: bool = False
    pfc: bool = False
    qlen: bool = False
    port_bytes: bool = False
    qlen_interval_s: float = param(1e-6, low=0, low_open=True, high=MAX_DURATION_S)
    qlen_window_s: tuple[float, float] = (0.0, 0.01)
    qlen_min_bytes: int = 1000
    max_rows: int = param(1_000_000, low=1, high=MAX_COUNT)

    def __post_init__(self) -> None:
        check_fields(self, "diagnostics")
        lo, hi = self.qlen_window_s
        if not lo <= hi:
            raise MoesimError(f"diagnostics: field 'qlen_window_s': need 0 <= start <= end, got {self.qlen_window_s}")

    @classmethod
    def everything(cls, **bounds: Any) -> DiagnosticsSpec:
        return cls(fct=True, pfc=True, qlen=True, port_bytes=True, **bounds)

    @property
    def any(self) -> bool:
        return self.fct or self.pfc or self.qlen or self.port_bytes


@dataclass
class RowLog:
    """Column chunks appended by a backend, capped at ``max_rows`` rows."""

    max_rows: int
    chunks: list[dict[str, np.ndarray]] = field(default_factory=list)
    rows: int = 0
    truncated: bool = False

    def add(self, columns: dict[str, np.ndarray]) -> bool:
        """Append a chunk (cut at the cap); False once the log is full."""
        n = len(next(iter(columns.values()))) if columns else 0
        room = self.max_rows - self.rows
        if n > room:
            columns = {k: v[:room] for k, v in columns.items()}
            n = room
            self.truncated = True
        if n:
            self.chunks.append({k: np.asarray(v).copy() for k, v in columns.items()})
            self.rows += n
        return not self.truncated

    def mark(self) -> tuple[int, int, bool]:
        return (len(self.chunks), self.rows, self.truncated)

    def rollback(self, mark: tuple[int, int, bool]) -> None:
        """Forget what was added after ``mark`` (a backend's look-ahead was undone)."""
        del self.chunks[mark[0]:]
        self.rows, self.truncated = mark[1], mark[2]

    def table(self, schema: pa.Schema) -> pa.Table:
        cols = {}
        for f in schema:
            parts = [c[f.name] for c in self.chunks]
            cols[f.name] = pa.array(np.concatenate(parts) if parts else [], type=f.type)
        return pa.table(cols, schema=schema.with_metadata({"truncated": str(self.truncated).lower()}))


FCT_SCHEMA = pa.schema([
    ("flow_id", pa.int64()), ("src_gpu", pa.int32()), ("dst_gpu", pa.int32()), ("sport", pa.int32()),
    ("dport", pa.int32()), ("size_bytes", pa.int64()), ("start_ns", pa.int64()), ("fct_ns", pa.int64()),
    ("standalone_fct_ns", pa.int64()),
])
PFC_SCHEMA = pa.schema([
    ("time_ns", pa.int64()), ("node", pa.int32()), ("node_type", pa.int32()), ("if_index", pa.int32()),
    ("link", pa.int32()), ("type", pa.int32()),
])
QLEN_SCHEMA = pa.schema([
    ("time_ns", pa.int64()), ("node", pa.int32()), ("if_index", pa.int32()), ("link", pa.int32()),
    ("bytes", pa.int64()),
])
PORT_BYTES_SCHEMA = pa.schema([
    ("link", pa.int32()), ("src", pa.string()), ("dst", pa.string()), ("bytes", pa.int64()),
])
SCHEMAS = {"fct": FCT_SCHEMA, "pfc": PFC_SCHEMA, "qlen": QLEN_SCHEMA, "port_bytes": PORT_BYTES_SCHEMA}


def host_ip(host: int) -> int:
    """The reference's host IP for node id ``host``: 11.(id/256).(id%256).1."""
    return 0x0B000001 + ((host // 256) << 16) + ((host % 256) << 8)


def fct_text(table: pa.Table) -> str:
    """fct.txt: ``sip dip sport dport size start_ns fct_ns standalone_fct_ns`` per completed flow."""
    d = table.to_pydict()
    return "".join(
        f"{host_ip(s):08x} {host_ip(t):08x} {sp} {dp} {size} {start} {fct} {alone}\n"
        for s, t, sp, dp, size, start, fct, alone in zip(
            d["src_gpu"], d["dst_gpu"], d["sport"], d["dport"], d["size_bytes"], d["start_ns"], d["fct_ns"],
            d["standalone_fct_ns"], strict=True)
    )


def pfc_text(table: pa.Table) -> str:
    """pfc.txt: ``time_ns node node_type if_index type`` (type 1 = PAUSE received, 0 = RESUME)."""
    d = table.to_pydict()
    return "".join(
        f"{t} {n} {k} {i} {ty}\n"
        for t, n, k, i, ty in zip(d["time_ns"], d["node"], d["node_type"], d["if_index"], d["type"], strict=True)
    )


def qlen_text(table: pa.Table) -> str:
    """qlen.txt (ANS3): ``time <t> <switch> j <port> <bytes> ...`` per sample time and switch."""
    d = table.to_pydict()
    lines: list[str] = []
    key: tuple[int, int] | None = None
    for t, n, i, b in zip(d["time_ns"], d["node"], d["if_index"], d["bytes"], strict=True):
        if key != (t, n):
            key = (t, n)
            lines.append(f"\ntime {t} {n}")
        lines.append(f" j {i} {b}")
    return ("".join(lines).lstrip("\n") + "\n") if lines else ""


TEXT_WRITERS = {"fct": ("fct.txt", fct_text), "pfc": ("pfc.txt", pfc_text), "qlen": ("qlen.txt", qlen_text)}


def write_diagnostics(tables: dict[str, pa.Table], out_dir: str | Path, text: bool = True) -> list[Path]:
    """Write each table as ``<name>.parquet`` and, when ``text``, in the reference text format (atomically)."""
    out = Path(out_dir)
    written: list[Path] = []
    for name, table in tables.items():
        if name not in SCHEMAS:
            continue
        buf = io.BytesIO()
        pq.write_table(table, buf)
        written.append(atomic_write(out / f"{name}.parquet", buf.getvalue()))
        if text and name in TEXT_WRITERS:
            fname, render = TEXT_WRITERS[name]
            written.append(atomic_write(out / fname, render(table)))
    return written
