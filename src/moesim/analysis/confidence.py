"""How sure each ordering of the report is, given the measured error band of the rows behind it.

A row's wall time y from a backend whose band is e for the row's family (``moesim.analysis.bands``) stands
for a packet-level time within y·(1 ± e); a reference-backend (packet) row has e = 0. A mean over rows is
then uncertain by u = mean(y·e). Two levels ranked A before B (means a ≤ b) are *resolved* when
b − a > u_A + u_B and *unresolved at this fidelity* otherwise; the configurations that would settle them
are those of A and B whose rows are not yet from the reference backend (``moesim refine`` reruns them).
The fastest (slowest) configuration is resolved when no other run's band reaches its own.

The orderings are those ``benchmarks/accuracy.py study`` compares with packet level, under the same
labels: where the minimum and maximum lie per subset, every marginal ranking, every conditional order; and
the interaction views: each ratio's side of 1, and the slowest and fastest cell of each grid.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from moesim.analysis.bands import ErrorBands, row_bands
from moesim.analysis.results import (
    BACKEND,
    MODEL,
    candidate_factors,
    describe_configs,
    level_key,
    levels,
    where,
)
from moesim.analysis.seeds import SEED
from moesim.analysis.stats import TIE_RTOL, GridView, group_means, subset
from moesim.analysis.study import Analysis

BAND = "wall_band_s"
"""Column added to the analysed table: a row's wall time times its relative band (seconds)."""


@dataclass(frozen=True)
class Pair:
    """Two neighbours of an ordering that the bands cannot tell apart (``first`` is stated as faster)."""

    first: str
    second: str
    margin: float
    """(second − first) / first."""
    band: float
    """The combined band (u_first + u_second) / first."""
    position: int
    """Index of ``first`` in the ordering (0: the pair that decides the best level)."""


@dataclass(frozen=True)
class Ordering:
    """One stated ordering: its label (as ``benchmarks/accuracy.py`` names it), the order, the pairs left
    unresolved, the configurations that would settle them and the backends of the rows behind it."""

    statistic: str
    order: str
    pairs: tuple[Pair, ...]
    settle: tuple[dict[str, str], ...]
    backends: str

    @property
    def resolved(self) -> bool:
        return not self.pairs


def most_exact(table: pa.Table, bands: ErrorBands) -> pa.Table:
    """Per configuration (the model and every factor but the backend and the seed), the rows of the most
    exact backend stored: the reference backend first, then the others by their measured backend-wide band
    (``ErrorBands.exactness``: packet, fluid, flow, analytical). Rows of less exact backends are left out."""
    if BACKEND not in table.column_names or len(levels(table, BACKEND)) < 2:
        return table
    keys = [c for c in (MODEL, *candidate_factors(table)) if c not in (BACKEND, SEED)]
    configs = list(zip(*(table.column(c).to_pylist() for c in keys), strict=True))
    backends = [str(b) for b in table.column(BACKEND).to_pylist()]
    best: dict[tuple[Any, ...], str] = {}
    for key, b in zip(configs, backends, strict=True):
        if key not in best or (bands.exactness(b), b) < (bands.exactness(best[key]), best[key]):
            best[key] = b
    return table.filter(pa.array([best[k] == b for k, b in zip(configs, backends, strict=True)]))


def backend_mix(table: pa.Table) -> str:
    """Which backends a table's rows come from: ``fluid``, or ``packet 4, fluid 12`` (most rows first)."""
    if BACKEND not in table.column_names or not table.num_rows:
        return ""
    names = [str(b) for b in table.column(BACKEND).to_pylist()]
    counts = {b: names.count(b) for b in sorted(set(names))}
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{b} {n}" for b, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))


def with_bands(table: pa.Table, bands: ErrorBands) -> pa.Table:
    """``table`` with column ``BAND``: each row's wall time times its band (0 where none is measured)."""
    e = np.array([b or 0.0 for b in row_bands(table, bands)], dtype=np.float64)
    wall = table.column("wall_s").to_numpy(zero_copy_only=False).astype(np.float64)
    out = table.drop_columns([BAND]) if BAND in table.column_names else table
    return out.append_column(BAND, pa.array(wall * e))


def _configs(t: pa.Table, factors: Sequence[str]) -> list[dict[str, str]]:
    """The configurations of ``t``'s rows that carry a band (not yet from the reference backend)."""
    keep = [c for c in (MODEL, *factors) if c in t.column_names]
    return [{c: str(r[c]) for c in keep} for r in t.to_pylist() if r[BAND] > 0]


def _chain(order: Sequence[str], means: dict[str, tuple[float, float]]) -> list[Pair]:
    """The adjacent pairs of ``order`` whose margin lies inside their combined band."""
    out = []
    for i, (a, b) in enumerate(itertools.pairwise(order)):
        (wa, ua), (wb, ub) = means[a], means[b]
        if ua + ub > 0 and wb - wa <= ua + ub:
            out.append(Pair(a, b, (wb - wa) / wa, (ua + ub) / wa, i))
    return out


def _ranking(statistic: str, t: pa.Table, factor: str, order: Sequence[str], factors: Sequence[str]) -> Ordering:
    g = group_means(t, (factor,), ("wall_s", BAND)).to_pylist()
    means = {r[factor]: (r["wall_s"], r[BAND]) for r in g}
    pairs = _chain(order, means)
    unsure = {lv for p in pairs for lv in (p.first, p.second)}
    settle = _configs(where(t, include={factor: tuple(unsure)}), factors) if unsure else []
    return Ordering(statistic, " < ".join(order), tuple(pairs), tuple(settle), backend_mix(t))


def _extreme(statistic: str, t: pa.Table, stated: str, factors: Sequence[str], slowest: bool) -> Ordering:
    """Whether the fastest (``slowest``) configuration of ``t`` is resolved against every other run."""
    rows = t.to_pylist()
    wall = np.array([r["wall_s"] for r in rows])
    x = wall.max() if slowest else wall.min()
    at = np.abs(wall - x) <= TIE_RTOL * abs(x)
    u = max(r[BAND] for r, a in zip(rows, at, strict=True) if a)
    close = [r for r, a in zip(rows, at, strict=True)
             if not a and u + r[BAND] > 0 and abs(r["wall_s"] - x) <= u + r[BAND]]
    pairs: tuple[Pair, ...] = ()
    settle: list[dict[str, str]] = []
    if close:
        near = min(close, key=lambda r: abs(r["wall_s"] - x))
        label = ", ".join(f"{f}={near[f]}" for f in factors)
        lo, hi = (near["wall_s"], x) if slowest else (x, near["wall_s"])
        pairs = (Pair(label, stated, hi / lo - 1, (u + near[BAND]) / lo, 0) if slowest else
                 Pair(stated, label, hi / lo - 1, (u + near[BAND]) / lo, 0),)
        settle = _configs(pa.Table.from_pylist([r for r, a in zip(rows, at, strict=True) if a] + close), factors)
    return Ordering(statistic, stated, pairs, tuple(settle), backend_mix(t))


def _sort_levels(column: str, values: Iterable[str]) -> list[str]:
    return sorted(set(values), key=lambda v: level_key(column, v))


def orderings(a: Analysis, bands: ErrorBands) -> list[Ordering]:
    """Every ordering the report states, each with its unresolved pairs (empty: resolved)."""
    table = with_bands(a.table, bands)
    factors = a.factors
    out: list[Ordering] = []
    for r in a.overall.to_pylist():
        t = where(subset(table, r["subset"]), include={MODEL: (r[MODEL],)})
        out.append(_extreme(f"{r['subset']} {r[MODEL]} fastest at", t, r["wall_min_at"], factors, slowest=False))
        out.append(_extreme(f"{r['subset']} {r[MODEL]} slowest at", t, r["wall_max_at"], factors, slowest=True))
    for m in a.marginals:
        rows = m.table.to_pylist()
        for model in _sort_levels(MODEL, (r[MODEL] for r in rows)):
            order = [r[m.factor] for r in sorted((r for r in rows if r[MODEL] == model), key=lambda r: r["wall_s"])]
            t = where(subset(table, m.subset), include={MODEL: (model,)})
            out.append(_ranking(f"{m.subset} {model} {m.factor} ranking", t, m.factor, order, factors))
    for r in a.orders.to_pylist():
        t = where(table, include={MODEL: (r[MODEL],), r["given"]: (r["given_level"],)})
        out.append(_ranking(f"{r[MODEL]} {r['factor']} given {r['given']} = {r['given_level']}", t, r["factor"],
                            r["order"].split(" < "), factors))
    for it in a.interactions:
        if it.table is None or not it.table.num_rows:
            continue
        v = it.view
        base = subset(table, v.subset)
        if isinstance(v, GridView):
            base = where(base, include={k: (lv,) for k, lv in v.fixed.items()})
            for model in levels(it.table, MODEL):
                t = where(base, include={MODEL: (model,)})
                cells = group_means(t, (v.rows, v.cols), ("wall_s",)).to_pylist()
                lo = min(cells, key=lambda c: c["wall_s"])
                hi = max(cells, key=lambda c: c["wall_s"])
                for name, c, slow in (("fastest", lo, False), ("slowest", hi, True)):
                    cell = f"{v.rows}={c[v.rows]}, {v.cols}={c[v.cols]}"
                    out.append(_cell(f"{v.name} {model} {name} cell", t, (v.rows, v.cols), cell, factors, slow))
            continue
        for row in it.table.to_pylist():
            t = where(base, include={MODEL: (row[MODEL],), v.by: (row[v.by],),
                                     v.factor: (v.numerator, v.denominator)})
            order = [v.denominator, v.numerator] if row["ratio"] >= 1 else [v.numerator, v.denominator]
            out.append(_ranking(f"{v.name} {row[MODEL]} {v.by} = {row[v.by]}", t, v.factor, order, factors))
    return out


def _cell(statistic: str, t: pa.Table, by: tuple[str, str], stated: str, factors: Sequence[str],
          slowest: bool) -> Ordering:
    """The fastest (``slowest``) cell of a grid against every other cell, from the cells' means."""
    g = group_means(t, by, ("wall_s", BAND)).to_pylist()
    name = {f"{by[0]}={c[by[0]]}, {by[1]}={c[by[1]]}": c for c in g}
    order = sorted(name, key=lambda k: name[k]["wall_s"], reverse=slowest)
    means = {k: (c["wall_s"], c[BAND]) for k, c in name.items()}
    best = order[0]
    pairs = []
    for other in order[1:]:
        a_, b_ = (other, best) if slowest else (best, other)
        p = _chain([a_, b_], means)
        if p:
            pairs.append(p[0])
    settle: list[dict[str, str]] = []
    if pairs:
        unsure = {best, *(p.first if slowest else p.second for p in pairs)}
        for c in (c for c in order if c in unsure):
            settle += _configs(where(t, include={by[0]: (name[c][by[0]],), by[1]: (name[c][by[1]],)}), factors)
    return Ordering(statistic, stated, tuple(pairs[:1]), tuple(settle), backend_mix(t))


def unresolved(ords: Iterable[Ordering]) -> list[Ordering]:
    return [o for o in ords if not o.resolved]


MAX_LISTED = 4
"""Settling runs beyond this many are described by the levels they span, not one by one."""


def describe_settle(o: Ordering, factors: Sequence[str], all_levels: dict[str, tuple[str, ...]]) -> str:
    """The configurations that would settle ``o``, compactly: ``topology=2|5, strategy=TP2EP16`` for a full
    product, each one up to ``MAX_LISTED``, else the levels they span (``among topology=1|2|6, ...``)."""
    cols = [f for f in factors if any(f in c for c in o.settle)]
    text = describe_configs(list(o.settle), cols, all_levels)
    if len(o.settle) <= MAX_LISTED or "; " not in text:
        return text
    span = {f: _sort_levels(f, (c[f] for c in o.settle)) for f in cols}
    return "among " + ", ".join(f"{f}={'|'.join(v)}" if len(v) < len(all_levels.get(f, ())) or len(v) == 1
                                else f"{f}=any" for f, v in span.items())


def pair_text(p: Pair) -> str:
    return f"{p.first} vs {p.second}: {100 * p.margin:.1f} % apart, inside the combined band of {100 * p.band:.1f} %"


def confidence_table(ords: Sequence[Ordering], a: Analysis) -> pa.Table:
    """One row per ordering: its status, the closest unresolved pair, and what would settle it."""
    all_levels = {f: levels(a.table, f) for f in a.factors}
    rows: list[dict[str, Any]] = []
    for o in ords:
        p = o.pairs[0] if o.pairs else None
        rows.append({"statistic": o.statistic, "order": o.order,
                     "status": "resolved" if o.resolved else "unresolved at this fidelity",
                     "unresolved_pairs": len(o.pairs), "closest_pair": f"{p.first} vs {p.second}" if p else "",
                     "margin_rel": p.margin if p else None, "band_rel": p.band if p else None,
                     "backends": o.backends, "runs_to_settle": len(o.settle),
                     "settle_with": describe_settle(o, a.factors, all_levels) if o.settle else ""})
    schema = pa.schema([("statistic", pa.string()), ("order", pa.string()), ("status", pa.string()),
                        ("unresolved_pairs", pa.int64()), ("closest_pair", pa.string()), ("margin_rel", pa.float64()),
                        ("band_rel", pa.float64()), ("backends", pa.string()), ("runs_to_settle", pa.int64()),
                        ("settle_with", pa.string())])
    return pa.Table.from_pylist(rows, schema=schema)
