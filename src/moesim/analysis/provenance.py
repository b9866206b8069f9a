"""Where a report's numbers come from: the command, software, date, inputs and seeds of the runs.

Read from the store itself, never from the machine that renders the report, so the same store gives
the same provenance: the command lines that filled it (``store_meta``: a sweep's from its start, a refine's
once it stored a row), each row's ``version``, the simulator's ``source_sha256`` and parameters
(``params_json``), ``finished_at``, ``backend``, ``cc_model`` and the start-jitter columns. Each backend is described from its registry entry
(``moesim.network.base.BACKENDS``), with whether it models congestion control.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from moesim.analysis.results import natural_key, ordered
from moesim.analysis.seeds import JITTER, SEED
from moesim.analysis.tables import format_seconds
from moesim.experiments.store_schema import COMMAND_KEY

MAX_SHOWN = 8
"""A parameter with more distinct values than this shows the first ones and how many there are."""


@dataclass(frozen=True)
class BackendNote:
    name: str
    description: str
    reference: str
    models_cc: bool


@dataclass(frozen=True)
class Provenance:
    """What produced a results store, as the report's first block shows it."""

    commands: tuple[str, ...]
    versions: tuple[str, ...]
    source_hashes: tuple[str, ...]
    finished: tuple[dt.datetime, dt.datetime] | None
    runs: int
    failed: int
    tokens: tuple[str, ...]
    backends: tuple[BackendNote, ...]
    networks: tuple[str, ...]
    cc_models: tuple[str, ...]
    seeds: tuple[str, ...]
    jitter_s: tuple[float, ...]
    parameters: pa.Table
    """One row per simulation parameter (dotted path in ``params_json``): its distinct values."""

    def items(self) -> list[tuple[str, str]]:
        """(label, text) lines of the provenance block, in reading order."""
        out = [("command", "\n".join(self.commands) if self.commands else
                "not recorded (a store written before sweeps recorded their command line)")]
        out.append(("moesim version", ", ".join(self.versions) or "not recorded"))
        hashes = ", ".join(self.source_hashes) or "not recorded"
        if len(self.source_hashes) > 1:
            hashes += f" ({len(self.source_hashes)} different source trees: results of different code are mixed)"
        out.append(("source hash (sha256)", hashes))
        out.append(("date (runs finished, UTC)", _date_range(self.finished)))
        out.append(("runs", f"{self.runs} successful, {self.failed} failed"))
        out.append(("tokens per batch", ", ".join(self.tokens) or "not recorded"))
        for b in self.backends:
            cc = "models congestion control" if b.models_cc else \
                "does not model congestion control (CC settings of the network modes have no effect)"
            out.append((f"backend {b.name}", f"{b.description}; {cc}. Reference: {b.reference}"))
        if not self.backends:
            out.append(("backend", "not recorded"))
        out.append(("network modes", ", ".join(self.networks) or "not recorded"))
        out.append(("congestion control as run", ", ".join(self.cc_models) or "not recorded"))
        if self.seeds:
            jit = ", ".join(format_seconds(j) for j in self.jitter_s) or "?"
            out.append(("seeds", f"{len(self.seeds)} start-jitter seeds per configuration ({_span(self.seeds)}); ranks "
                                 f"start at seeded uniform draws in [0, {jit})"))
        else:
            out.append(("seeds", "none: one run per configuration, every rank starts at time 0"))
        return out


def _date_range(finished: tuple[dt.datetime, dt.datetime] | None) -> str:
    if finished is None:
        return "not recorded"
    lo, hi = (t.strftime("%Y-%m-%d %H:%M") for t in finished)
    if lo == hi:
        return lo
    return f"{lo} – {hi[11:]}" if lo[:10] == hi[:10] else f"{lo} – {hi}"


def _span(values: tuple[str, ...]) -> str:
    """``1–5`` for consecutive integers, else the list."""
    if all(v.isdigit() for v in values) and [int(v) for v in values] == list(range(int(values[0]), int(values[-1]) + 1)):
        return f"{values[0]}–{values[-1]}" if len(values) > 1 else values[0]
    return ", ".join(values)


def _distinct(values: Iterable[Any]) -> tuple[str, ...]:
    return tuple(sorted({str(v) for v in values if v is not None and v != ""}, key=natural_key))


def _flatten(value: Any, prefix: str, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix] = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _column(table: pa.Table, name: str) -> list[Any]:
    return table.column(name).to_pylist() if name in table.column_names else []


def parameter_table(params: list[dict[str, Any]]) -> pa.Table:
    """The distinct values of every parameter over the runs, as (parameter, values, distinct).

    A key under ``backend.`` that repeats a top-level key with the same values is left out.
    """
    seen: dict[str, set[str]] = {}
    for p in params:
        flat: dict[str, str] = {}
        _flatten(p, "", flat)
        for k, v in flat.items():
            seen.setdefault(k, set()).add(v)
    rows = []
    for k in sorted(seen, key=natural_key):
        if k.startswith("backend.") and seen.get(k[len("backend."):]) == seen[k]:
            continue
        vals = sorted(seen[k], key=natural_key)
        shown = "; ".join(vals[:MAX_SHOWN]) + (f"; … ({len(vals)} values)" if len(vals) > MAX_SHOWN else "")
        rows.append({"parameter": k, "values": shown, "distinct": len(vals)})
    return pa.Table.from_pylist(rows, schema=pa.schema([("parameter", pa.string()), ("values", pa.string()),
                                                        ("distinct", pa.int64())]))


def provenance(raw: pa.Table, meta: Mapping[str, str]) -> Provenance:
    """The provenance of a store from its rows (``raw``: every row, failed ones too) and its ``store_meta``."""
    from moesim.network.base import (  # the network package loads its JIT kernels
        BACKENDS,
        models_congestion_control,
    )

    ok = [s == "ok" for s in _column(raw, "status")] or [True] * raw.num_rows
    params = []
    for text, good in zip(_column(raw, "params_json") or [None] * raw.num_rows, ok, strict=True):
        if good and text:
            try:
                params.append(json.loads(text))
            except ValueError:
                continue
    try:
        commands = json.loads(meta[COMMAND_KEY]) if COMMAND_KEY in meta else []
    except ValueError:
        commands = [meta[COMMAND_KEY]]
    finished = [t for t in _column(raw, "finished_at") if isinstance(t, dt.datetime)]
    backends = []
    for name in ordered("backend", _distinct(_column(raw, "backend"))):
        entry = BACKENDS.entry(name) if name in BACKENDS else None
        backends.append(BackendNote(name, entry.description if entry else "not a registered backend",
                                    entry.reference if entry else "-", models_congestion_control(name)))
    tokens = _distinct(p.get("tokens") for p in params) or _distinct(_column(raw, "tokens"))
    jitter = sorted({float(v) for v in _column(raw, JITTER) if v not in (None, "")})
    return Provenance(
        commands=tuple(str(c) for c in (commands if isinstance(commands, list) else [commands])),
        versions=_distinct(_column(raw, "version")),
        source_hashes=_distinct(p.get("source_sha256") for p in params),
        finished=(min(finished), max(finished)) if finished else None,
        runs=sum(ok), failed=len(ok) - sum(ok), tokens=tokens, backends=tuple(backends),
        networks=ordered("network", _distinct(_column(raw, "network"))), cc_models=_distinct(_column(raw, "cc_model")),
        seeds=_distinct(_column(raw, SEED)), jitter_s=tuple(jitter),
        parameters=parameter_table(params),
    )
