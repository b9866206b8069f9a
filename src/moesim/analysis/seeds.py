"""Start-jitter seeds as replicates: a configuration run with several seeds is one configuration.

``--seeds N`` runs every configuration N times with its ranks started at seeded uniform draws in
[0, start_jitter_s) (``jitter_seed`` 1..N). How far a completion time moves when nothing but the
ranks' start times does (nanoseconds) tells whether a result is robust or sits on a knife edge. Each
seed is stored as its own row; the analysis works on the per-configuration median and keeps min/max.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from moesim.analysis.results import METRICS, MODEL, candidate_factors, level_key

SEED = "jitter_seed"
"""The replicate column: runs that differ only in it are one configuration."""
JITTER = "start_jitter_s"
DEFAULT_JITTER_S = 1e-8
"""The default start jitter of ``--seeds``: 10 ns, far below anything a deployment controls."""
SPREAD_FLAG = 0.05
"""A configuration whose wall times spread more than this (max − min over the median) is flagged."""


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min, max and relative spread ((max − min) / median) of one configuration's seeds."""
    med = float(statistics.median(values))
    lo, hi = float(min(values)), float(max(values))
    return {"median": med, "min": lo, "max": hi, "spread": (hi - lo) / med if med else 0.0}


def has_seeds(table: pa.Table) -> bool:
    """Whether the table holds several seeds of some configuration."""
    if SEED not in table.column_names:
        return False
    return len({v for v in table.column(SEED).to_pylist() if v is not None}) > 1


def config_columns(table: pa.Table) -> tuple[str, ...]:
    """The columns that identify a configuration: the model and every factor but the seed."""
    return (MODEL, *(c for c in candidate_factors(table) if c != SEED))


def seeds_of(table: pa.Table) -> tuple[str, ...]:
    """The seeds present, in natural order."""
    if SEED not in table.column_names:
        return ()
    return tuple(sorted({str(v) for v in table.column(SEED).to_pylist() if v is not None},
                        key=lambda v: level_key(SEED, v)))


def collapse(table: pa.Table) -> pa.Table:
    """One row per configuration: the median of each metric over its seeds, plus ``wall_min_s``,
    ``wall_max_s``, ``wall_spread`` and ``seeds`` (how many). Rows keep the order of their first seed."""
    keys = config_columns(table)
    cols = {c: table.column(c).to_pylist() for c in table.column_names}
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i in range(table.num_rows):
        groups.setdefault(tuple(cols[k][i] for k in keys), []).append(i)
    rows = []
    for idx in groups.values():
        first = {c: cols[c][idx[0]] for c in table.column_names if c not in (SEED, *METRICS)}
        for m in METRICS:
            first[m] = float(np.median([cols[m][i] for i in idx]))
        s = spread([cols["wall_s"][i] for i in idx])
        first.update(wall_min_s=s["min"], wall_max_s=s["max"], wall_spread=s["spread"], seeds=len(idx))
        rows.append(first)
    return pa.Table.from_pylist(rows)


def per_seed(table: pa.Table) -> dict[str, pa.Table]:
    """The table of each seed that every configuration has (a seed missing somewhere is left out)."""
    out = {}
    n_configs = len({tuple(r[k] for k in config_columns(table)) for r in table.select(
        list(config_columns(table))).to_pylist()})
    for seed in seeds_of(table):
        mask = pa.array([str(v) == seed for v in table.column(SEED).to_pylist()])
        t = table.filter(mask).drop_columns([SEED])
        if t.num_rows == n_configs:
            out[seed] = t
    return out


def flagged(collapsed: pa.Table, threshold: float = SPREAD_FLAG) -> pa.Table:
    """Configurations whose seeds spread more than ``threshold``, widest first."""
    if "wall_spread" not in collapsed.column_names:
        return collapsed.slice(0, 0)
    rows = [r for r in collapsed.to_pylist() if r["wall_spread"] > threshold]
    rows.sort(key=lambda r: -r["wall_spread"])
    keep = [*config_columns(collapsed), "wall_s", "wall_min_s", "wall_max_s", "wall_spread", "seeds"]
    return pa.Table.from_pylist([{k: r[k] for k in keep if k in r} for r in rows]) if rows else \
        collapsed.select([k for k in keep if k in collapsed.column_names]).slice(0, 0)
