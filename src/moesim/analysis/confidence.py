"""How sure each ordering of the report is, given the measured paired error bands of the rows behind it.

An ordering of two runs A before B (wall times a ≤ b) is decided by their ratio, and the ratio's error is
ε_B − ε_A with ε = log(backend / packet) per run. ``ErrorBands.pair_band`` bounds it by d(A, B): the paired
band of the two runs' families (``moesim.analysis.bands``), the single-run band when one run is from packet
level, 0 when both are or when both are one simulation (equal input hash: equal results, equal errors). The ordering is *resolved* when log(b / a) > d and *unresolved at this fidelity*
otherwise. For two means over rows, log(mean_B / mean_A) errs by (to first order) the wall-time-weighted
mean of ε over B minus that over A, which equals Σ π_ij (ε_j − ε_i) for any coupling π of the two groups'
weights, so Σ π_ij d(i, j) bounds it; the coupling pairs each row's weight with rows of the same simulation
(equal input hash, e.g. topology 6 under its four network modes) on the other side first, whose errors are
equal (d = 0), then each family's weight with the same family (their errors move together), and the rest in
proportion. Averaging shrinks the error, so
that bound is multiplied by the backend's ``mean_factor``, calibrated on the studies of the stored references
(``calibrate_studies``). The
configurations that would
settle an unresolved ordering are those of its two sides whose rows are not yet from the reference backend
(``moesim refine`` reruns them). The fastest (slowest) configuration is resolved against every other run.

The orderings are those ``benchmarks/accuracy.py study`` compares with packet level, under the same
labels: where the minimum and maximum lie per subset, every marginal ranking, every conditional order; and
the interaction views: each ratio's side of 1, and the slowest and fastest cell of each grid.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from moesim.analysis.bands import ErrorBands, RowKey, row_bands, row_keys
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
KEY = "band_key"
"""Column added to the analysed table: the index of the row's (backend, family) in ``Paired.keys``."""
SIM = "simulation_key"
"""Column added to the analysed table: which simulation the row is (its input hash and wall time; each row its
own without a hash). Rows of one simulation carry the same result, so the same error."""
REF = "reference_wall_s"
"""Column of a table being calibrated (``calibrate``): each row's wall time on the reference backend."""


@dataclass(frozen=True)
class Pair:
    """Two neighbours of an ordering that the bands cannot tell apart (``first`` is stated as faster)."""

    first: str
    second: str
    margin: float
    """(second − first) / first."""
    band: float
    """The paired band of the two sides, as a ratio: exp(d) − 1."""
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


Shares = dict[tuple[int, str], float]
"""The wall-time share of each (``KEY``, ``SIM``) among a group's rows."""


@dataclass(frozen=True)
class Comparison:
    """One comparison of two sides an ordering makes, on a table that carries the reference's times."""

    statistic: str
    means: bool
    """Two means (a ranking's levels, a grid's cells), or two runs (where the fastest or slowest run lies)."""
    margin: float
    """log(slower / faster) as stated."""
    error: float
    """The realised error of that ratio: the margin minus the reference's log ratio of the same two sides."""
    band: float
    """The log band the margin is judged against (for means, before ``mean_factor``)."""


@dataclass
class Paired:
    """The paired bands of the keys of one table's rows (``KEY`` indexes ``keys``)."""

    bands: ErrorBands
    keys: list[RowKey]
    record: list[Comparison] | None = None
    """When a list, each comparison an ordering makes is appended to it; the analysed table then carries
    ``REF``."""
    _cache: dict[tuple[int, int], float] = field(default_factory=dict)

    def d(self, i: int, j: int) -> float:
        """The log band of the ratio of a row of key ``i`` and one of key ``j``."""
        k = (i, j) if i <= j else (j, i)
        if k not in self._cache:
            self._cache[k] = self.bands.pair_band(self.keys[k[0]], self.keys[k[1]])
        return self._cache[k]

    def between(self, a: Shares, b: Shares) -> float:
        """The log band of the ratio of two means: Σ π_ij d(i, j) over the coupling that pairs each
        simulation's share with the same simulation on the other side first (equal errors: d = 0), then each
        key's share with the same key, and couples what is left in proportion."""
        twin = {ks: min(w, b[ks]) for ks, w in a.items() if ks in b}
        ra: dict[int, float] = {}
        rb: dict[int, float] = {}
        for side, rest in ((a, ra), (b, rb)):
            for (k, sim), w in side.items():
                rest[k] = rest.get(k, 0.0) + w - twin.get((k, sim), 0.0)
        same = {k: min(w, rb[k]) for k, w in ra.items() if k in rb}
        band = sum(w * self.d(k, k) for k, w in same.items())
        ra = {k: w - same.get(k, 0.0) for k, w in ra.items()}
        rb = {k: w - same.get(k, 0.0) for k, w in rb.items()}
        left = sum(ra.values())
        if left > 1e-12:
            band += sum(wa * wb * self.d(i, j) for i, wa in ra.items() for j, wb in rb.items()) / left
        return band

    def factor(self, a: Shares, b: Shares) -> float:
        """The ``mean_factor`` of the fast backends behind two means (the largest; exact rows have none)."""
        fast = {self.keys[k][0] for k, _ in (*a, *b)} - {self.bands.reference}
        return max((self.bands.mean_factor(name) for name in sorted(fast)), default=1.0)


def _shares(t: pa.Table, by: Sequence[str]) -> dict[tuple[Any, ...], Shares]:
    """Per group of ``by``'s levels, the wall-time share of each key among its rows."""
    out: dict[tuple[Any, ...], Shares] = {}
    cols = [t.column(c).to_pylist() for c in (*by, "wall_s", KEY, SIM)]
    for *group, wall, key, sim in zip(*cols, strict=True):
        g = out.setdefault(tuple(group), {})
        g[key, sim] = g.get((key, sim), 0.0) + wall
    for g in out.values():
        total = sum(g.values())
        for k in g:
            g[k] = g[k] / total if total > 0 else 1.0 / len(g)
    return out


def _pair(first: str, second: str, wa: float, wb: float, d: float, position: int) -> Pair | None:
    """The pair ``first`` < ``second`` (means ``wa`` <= ``wb``) when its log margin lies inside ``d``."""
    if d > 0 and wa > 0 and math.log(wb / wa) <= d:
        return Pair(first, second, wb / wa - 1, math.expm1(d), position)
    return None


Means = dict[str, tuple[float, float | None]]
"""Per level (or cell): the mean wall time, and on a table being calibrated the reference's mean."""


def _means(t: pa.Table, by: Sequence[str], name: Callable[[dict[str, Any]], str]) -> Means:
    cols = ("wall_s", REF) if REF in t.column_names else ("wall_s",)
    return {name(r): (r["wall_s"], r.get(REF)) for r in group_means(t, tuple(by), cols).to_pylist()}


def _record(paired: Paired, statistic: str, means: bool, sides: tuple[float, float, float | None, float | None],
            band: float) -> None:
    """Append the comparison of (faster, slower, their reference times) to ``paired.record``, if kept."""
    wa, wb, ra, rb = sides
    if paired.record is not None and ra and rb and wa > 0:
        margin = math.log(wb / wa)
        paired.record.append(Comparison(statistic, means, margin, margin - math.log(rb / ra), band))


def _chain(order: Sequence[str], means: Means, shares: dict[str, Shares], paired: Paired,
           statistic: str = "") -> list[Pair]:
    """The adjacent pairs of ``order`` whose margin lies inside their paired band (times ``mean_factor``)."""
    out = []
    for i, (a, b) in enumerate(itertools.pairwise(order)):
        (wa, ra), (wb, rb) = means[a], means[b]
        band = paired.between(shares[a], shares[b])
        _record(paired, statistic, True, (wa, wb, ra, rb), band)
        p = _pair(a, b, wa, wb, band * paired.factor(shares[a], shares[b]), i)
        if p is not None:
            out.append(p)
    return out


def _ranking(statistic: str, t: pa.Table, factor: str, order: Sequence[str], factors: Sequence[str],
             paired: Paired) -> Ordering:
    means = _means(t, (factor,), lambda r: r[factor])
    shares = {k[0]: v for k, v in _shares(t, (factor,)).items()}
    pairs = _chain(order, means, shares, paired, statistic)
    unsure = {lv for p in pairs for lv in (p.first, p.second)}
    settle = _configs(where(t, include={factor: tuple(unsure)}), factors) if unsure else []
    return Ordering(statistic, " < ".join(order), tuple(pairs), tuple(settle), backend_mix(t))


def _extreme(statistic: str, t: pa.Table, stated: str, factors: Sequence[str], slowest: bool,
             paired: Paired) -> Ordering:
    """Whether the fastest (``slowest``) configuration of ``t`` is resolved against every other run."""
    rows = t.to_pylist()
    wall = np.array([r["wall_s"] for r in rows])
    x = wall.max() if slowest else wall.min()
    at = np.abs(wall - x) <= TIE_RTOL * abs(x)
    best = [r for r, a in zip(rows, at, strict=True) if a]
    close = []
    for r, a in zip(rows, at, strict=True):
        if not a:
            d = max(paired.d(b[KEY], r[KEY]) for b in best)
            lo, hi = (r["wall_s"], x) if slowest else (x, r["wall_s"])
            ref = (r.get(REF), best[0].get(REF))
            _record(paired, statistic, False, (lo, hi, *(ref if slowest else ref[::-1])), d)
            if _pair("", "", lo, hi, d, 0) is not None:
                close.append((r, d))
    pairs: tuple[Pair, ...] = ()
    settle: list[dict[str, str]] = []
    if close:
        near, d = min(close, key=lambda c: abs(c[0]["wall_s"] - x))
        label = ", ".join(f"{f}={near[f]}" for f in factors)
        lo, hi = (near["wall_s"], x) if slowest else (x, near["wall_s"])
        pairs = (Pair(label, stated, hi / lo - 1, math.expm1(d), 0) if slowest else
                 Pair(stated, label, hi / lo - 1, math.expm1(d), 0),)
        settle = _configs(pa.Table.from_pylist(best + [r for r, _ in close]), factors)
    return Ordering(statistic, stated, pairs, tuple(settle), backend_mix(t))


def _sort_levels(column: str, values: Iterable[str]) -> list[str]:
    return sorted(set(values), key=lambda v: level_key(column, v))


def _with_keys(table: pa.Table, bands: ErrorBands) -> tuple[pa.Table, Paired]:
    """``table`` with columns ``BAND`` and ``KEY``, and the paired bands of its keys."""
    table = with_bands(table, bands)
    keys = row_keys(table, bands)
    distinct = list(dict.fromkeys(keys))
    index = {k: i for i, k in enumerate(distinct)}
    out = table.drop_columns([c for c in (KEY, SIM) if c in table.column_names])
    hashes = table.column("input_hash").to_pylist() if "input_hash" in table.column_names else [None] * table.num_rows
    walls = table.column("wall_s").to_pylist()  # with the hash: rows a store got from different code stay apart
    sims = [f"{h} {w!r}" if h else f"row {i}" for i, (h, w) in enumerate(zip(hashes, walls, strict=True))]
    out = out.append_column(KEY, pa.array([index[k] for k in keys], pa.int64()))
    return out.append_column(SIM, pa.array(sims, pa.string())), Paired(bands, distinct)


def orderings(a: Analysis, bands: ErrorBands, record: list[Comparison] | None = None) -> list[Ordering]:
    """Every ordering the report states, each with its unresolved pairs (empty: resolved). Given ``record``
    (and ``REF`` in the analysed table), each comparison the orderings make is appended to it."""
    table, paired = _with_keys(a.table, bands)
    paired.record = record
    factors = a.factors
    out: list[Ordering] = []
    for r in a.overall.to_pylist():
        t = where(subset(table, r["subset"]), include={MODEL: (r[MODEL],)})
        out.append(_extreme(f"{r['subset']} {r[MODEL]} fastest at", t, r["wall_min_at"], factors, False, paired))
        out.append(_extreme(f"{r['subset']} {r[MODEL]} slowest at", t, r["wall_max_at"], factors, True, paired))
    for m in a.marginals:
        rows = m.table.to_pylist()
        for model in _sort_levels(MODEL, (r[MODEL] for r in rows)):
            order = [r[m.factor] for r in sorted((r for r in rows if r[MODEL] == model), key=lambda r: r["wall_s"])]
            t = where(subset(table, m.subset), include={MODEL: (model,)})
            out.append(_ranking(f"{m.subset} {model} {m.factor} ranking", t, m.factor, order, factors, paired))
    for r in a.orders.to_pylist():
        t = where(table, include={MODEL: (r[MODEL],), r["given"]: (r["given_level"],)})
        out.append(_ranking(f"{r[MODEL]} {r['factor']} given {r['given']} = {r['given_level']}", t, r["factor"],
                            r["order"].split(" < "), factors, paired))
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
                    out.append(_cell(f"{v.name} {model} {name} cell", t, (v.rows, v.cols), cell, factors, slow,
                                     paired))
            continue
        for row in it.table.to_pylist():
            t = where(base, include={MODEL: (row[MODEL],), v.by: (row[v.by],),
                                     v.factor: (v.numerator, v.denominator)})
            order = [v.denominator, v.numerator] if row["ratio"] >= 1 else [v.numerator, v.denominator]
            out.append(_ranking(f"{v.name} {row[MODEL]} {v.by} = {row[v.by]}", t, v.factor, order, factors, paired))
    return out


def _cell(statistic: str, t: pa.Table, by: tuple[str, str], stated: str, factors: Sequence[str],
          slowest: bool, paired: Paired) -> Ordering:
    """The fastest (``slowest``) cell of a grid against every other cell, from the cells' means."""
    g = group_means(t, by, ("wall_s",)).to_pylist()
    label = "{}={{}}, {}={{}}".format(*by).format
    name = {label(c[by[0]], c[by[1]]): c for c in g}
    shares = {label(*k): v for k, v in _shares(t, by).items()}
    order = sorted(name, key=lambda k: name[k]["wall_s"], reverse=slowest)
    means = _means(t, by, lambda r: label(r[by[0]], r[by[1]]))
    best = order[0]
    pairs = []
    for other in order[1:]:
        a_, b_ = (other, best) if slowest else (best, other)
        p = _chain([a_, b_], means, shares, paired, statistic)
        if p:
            pairs.append(p[0])
    settle: list[dict[str, str]] = []
    if pairs:
        unsure = {best, *(p.first if slowest else p.second for p in pairs)}
        for c in (c for c in order if c in unsure):
            settle += _configs(where(t, include={by[0]: (name[c][by[0]],), by[1]: (name[c][by[1]],)}), factors)
    return Ordering(statistic, stated, tuple(pairs[:1]), tuple(settle), backend_mix(t))


def with_reference(candidate: pa.Table, reference: pa.Table) -> pa.Table:
    """``candidate``'s rows that ``reference`` also ran, with column ``REF``: the reference's wall time (the
    median of its seeds)."""
    from moesim.analysis.accuracy import per_configuration

    rows = per_configuration(candidate, reference)
    keys = [c for c in (MODEL, *candidate_factors(reference)) if c in rows.column_names and c not in (BACKEND, SEED)]
    truth = {tuple(str(r[k]) for k in keys): r["reference_s"] for r in rows.to_pylist()}
    ref = [truth.get(tuple(str(r[k]) for k in keys)) for r in candidate.select(keys).to_pylist()]
    keep = pa.array([v is not None for v in ref])
    return candidate.append_column(REF, pa.array(ref, pa.float64())).filter(keep)


def comparisons(candidate: pa.Table, reference: pa.Table, bands: ErrorBands) -> list[Comparison]:
    """Every comparison the orderings of ``candidate``'s study make, with its realised error on ``reference``."""
    from moesim.analysis.study import analyse

    record: list[Comparison] = []
    orderings(analyse(with_reference(candidate, reference), with_architecture=False), bands, record)
    return record


def calibrate(candidate: pa.Table, reference: pa.Table, bands: ErrorBands) -> float:
    """``mean_factor`` measured on a study run on both backends: the ``QUANTILE`` over the comparisons of two
    means its orderings make of |realised log error of the ratio| / paired band. Averaging over many rows
    shrinks an error that one pair of runs carries whole; this is by how much, split-conformal style."""
    return calibrate_studies([(candidate, reference)], bands)


def calibrate_studies(studies: Sequence[tuple[pa.Table, pa.Table]], bands: ErrorBands) -> float:
    """``calibrate`` over several studies (each a candidate table and its reference, e.g. one per model): the
    ``QUANTILE`` of the scores of all their comparisons of two means, pooled."""
    from moesim.analysis.bands import QUANTILE

    scores = [abs(c.error) / c.band for candidate, reference in studies
              for c in comparisons(candidate, reference, bands) if c.means and c.band > 0]
    return float(np.quantile(scores, QUANTILE)) if scores else 1.0


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
