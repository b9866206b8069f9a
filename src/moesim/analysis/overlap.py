"""Report section "Overlap": the best TP/EP split with and without micro-batch overlap, and how much
communication each hides (``moesim sweep modern --preset overlap``; docs/analysis.md).

Built only from runs that carry the ``overlap`` factor with at least two levels. Hidden communication is
``comm_s − exposed_comm_s``: collective time that ran while the GPU computed.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from moesim.analysis.results import DEFAULT_LEVEL, MODEL, factor_columns, natural_key

NO_OVERLAP = "none"
_SHOWN = (MODEL, "topology", "network", "strategy", "overlap", "micro_batches", "phase", "batch", "context_tokens",
          "decode_steps")
"""Columns the table names itself (``pass`` stands for the phase and its knobs); any other factor a store varies
(``all_to_all_algorithm``, ``comm_sms``, ...) gets a column of its own and splits the rows."""


def _pass(row: dict[str, Any]) -> str:
    """``prefill`` or ``decode b<batch> c<context> s<steps>`` (from the run's recorded parameters)."""
    decode = json.loads(row.get("params_json") or "{}").get("decode")
    if not isinstance(decode, dict):
        return "prefill"
    return f"decode b{decode['batch']} c{decode.get('context_tokens')} s{decode.get('decode_steps')}"


def overlap_table(t: pa.Table) -> pa.Table | None:
    """Per model, topology, network, pass and any other varying factor: for each overlap level, the fastest
    strategy, its wall time, its exposed and its hidden communication; ``gain`` = 1 − best wall with overlap /
    best wall without. None when the runs do not vary ``overlap``."""
    if "overlap" not in t.column_names:
        return None
    rows = t.to_pylist()
    levels = sorted({NO_OVERLAP if r["overlap"] in (None, DEFAULT_LEVEL) else str(r["overlap"]) for r in rows},
                    key=lambda v: (v != NO_OVERLAP, natural_key(v)))
    if len(levels) < 2:
        return None
    others = tuple(c for c in factor_columns(t) if c not in _SHOWN)
    columns = (MODEL, "topology", "network", "pass", *others)
    best: dict[tuple[str, ...], dict[str, tuple[float, str, dict[str, Any]]]] = {}
    for r in rows:
        key: tuple[str, ...] = (str(r[MODEL]), str(r["topology"]), str(r.get("network") or ""), _pass(r),
                                *(str(r[c]) for c in others))
        level = NO_OVERLAP if r["overlap"] in (None, DEFAULT_LEVEL) else str(r["overlap"])
        cell = best.setdefault(key, {})
        if level not in cell or (r["wall_s"], str(r["strategy"])) < cell[level][:2]:
            cell[level] = (float(r["wall_s"]), str(r["strategy"]), r)
    out = []
    for key in sorted(best, key=lambda k: tuple(map(natural_key, k))):
        record: dict[str, Any] = dict(zip(columns, key, strict=True))
        for level in levels:
            if level not in best[key]:
                continue
            wall, strategy, r = best[key][level]
            exposed = float(r["exposed_comm_s"])
            record[f"{level}_best"] = strategy
            record[f"{level}_wall_s"] = wall
            record[f"{level}_exposed_comm_s"] = exposed
            record[f"{level}_hidden_comm_s"] = max(float(r["comm_s"]) - exposed, 0.0)
        base = best[key].get(NO_OVERLAP)
        other = [best[key][v][0] for v in levels[1:] if v in best[key]]
        record["gain"] = 1.0 - min(other) / base[0] if base and other and base[0] > 0 else None
        out.append(record)
    return pa.Table.from_pylist(out) if out else None
