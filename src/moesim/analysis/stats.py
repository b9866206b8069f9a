"""Statistics over a results table (docs/study.md §7): subsets, group means, marginals, interactions.

Everything is a pure function from a normalised results table (``moesim.analysis.results.as_table``)
to a small ``pyarrow.Table``. Aggregates are arithmetic means over the factors not grouped by;
factor names come from the data, so user matrices with other factors work the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from moesim.analysis.results import METRICS, MODEL, describe_configs, factor_columns, level_key, levels, where
from moesim.errors import MoesimError

TIE_RTOL = 1e-9  # runs within this relative distance of the min/max count as attaining it


# --- subsets -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Subset:
    """A named selection of runs: keep levels in ``include``, drop levels in ``exclude`` (per column)."""

    name: str
    description: str
    include: dict[str, tuple[str, ...]] = field(default_factory=dict)
    exclude: dict[str, tuple[str, ...]] = field(default_factory=dict)


SUBSETS: dict[str, Subset] = {s.name: s for s in (
    Subset("S_full", "all runs"),
    Subset("S_feedback", "the three feedback network modes",
           include={"network": ("ib_hpcc", "roce_hpcc", "roce_dcqcn")}),
    Subset("S_RoCE", "the two RoCE network modes", include={"network": ("roce_hpcc", "roce_dcqcn")}),
    Subset("S_network", "topologies with an external network (topology 6 excluded)",
           exclude={"topology": ("6",)}),
)}


def subset(table: pa.Table, which: str | Subset) -> pa.Table:
    """Rows of a named subset (docs/study.md §7) or of a user-defined ``Subset``."""
    if isinstance(which, str):
        if which not in SUBSETS:
            raise MoesimError(f"unknown subset '{which}' (allowed: {', '.join(SUBSETS)})")
        which = SUBSETS[which]
    return where(table, include=which.include, exclude=which.exclude)


# --- grouping ----------------------------------------------------------------------------------

def _group_index(table: pa.Table, by: Sequence[str]) -> tuple[list[tuple[str, ...]], np.ndarray]:
    """Distinct key tuples of ``by`` in display order, and each row's group number."""
    cols = [table.column(c).to_pylist() for c in by]
    keys = list(zip(*cols, strict=True)) if by else [()] * table.num_rows
    uniq = sorted(set(keys), key=lambda k: tuple(level_key(c, v or "") for c, v in zip(by, k, strict=True)))
    pos = {k: i for i, k in enumerate(uniq)}
    return uniq, np.fromiter((pos[k] for k in keys), dtype=np.int64, count=len(keys))


def metric(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy(zero_copy_only=False).astype(np.float64)


def group_means(table: pa.Table, by: Sequence[str], metrics: Sequence[str] = METRICS) -> pa.Table:
    """Arithmetic means of ``metrics`` per combination of ``by``; columns: *by, n, *metrics."""
    uniq, inv = _group_index(table, by)
    counts = np.bincount(inv, minlength=len(uniq))
    out: dict[str, object] = {c: [k[i] for k in uniq] for i, c in enumerate(by)}
    out["n"] = pa.array(counts, type=pa.int64())
    for m in metrics:
        sums = np.bincount(inv, weights=metric(table, m), minlength=len(uniq))
        out[m] = pa.array(sums / np.maximum(counts, 1), type=pa.float64())
    return pa.table(out)


def competition_rank(values: np.ndarray) -> np.ndarray:
    """Competition ranks (1 = smallest; equal values share the lower rank)."""
    return np.array([1 + int(np.sum(values < v)) for v in values], dtype=np.int64)


def _cells(table: pa.Table, keys: Sequence[str], value: str) -> dict[tuple[str, ...], float]:
    cols = [table.column(k).to_pylist() for k in keys]
    return dict(zip(zip(*cols, strict=True), table.column(value).to_pylist(), strict=True))


# --- per-model overall statistics --------------------------------------------------------------

def overall(table: pa.Table, factors: Sequence[str] | None = None) -> pa.Table:
    """Per model: means of wall/GPU/comm, both communication fractions, min/max and where, sensitivity.

    comm_fraction_aggregate = mean comm / mean wall; comm_fraction_mean = mean of per-run comm/wall;
    sensitivity = max wall / min wall (docs/study.md §7).
    """
    factors = tuple(factor_columns(table) if factors is None else factors)
    all_levels = {f: levels(table, f) for f in factors}
    rows = []
    for m in levels(table, MODEL):
        t = where(table, include={MODEL: (m,)})
        wall, gpu, comm = (metric(t, k) for k in ("wall_s", "gpu_s", "comm_s"))
        configs = t.select(list(factors)).to_pylist()
        lo, hi = float(wall.min()), float(wall.max())
        at_lo = [c for c, w in zip(configs, wall, strict=True) if w <= lo * (1 + TIE_RTOL)]
        at_hi = [c for c, w in zip(configs, wall, strict=True) if w >= hi * (1 - TIE_RTOL)]
        rows.append({
            MODEL: m, "n": t.num_rows,
            "wall_mean_s": float(wall.mean()), "gpu_mean_s": float(gpu.mean()), "comm_mean_s": float(comm.mean()),
            "comm_fraction_aggregate": float(comm.mean() / wall.mean()),
            "comm_fraction_mean": float(np.mean(comm / wall)),
            "wall_min_s": lo, "wall_min_at": describe_configs(at_lo, factors, all_levels),
            "wall_max_s": hi, "wall_max_at": describe_configs(at_hi, factors, all_levels),
            "sensitivity": hi / lo,
        })
    return pa.Table.from_pylist(rows)


# --- marginals and rankings --------------------------------------------------------------------

def marginal(table: pa.Table, factor: str, by_metric: str = "wall_s") -> pa.Table:
    """Per model and level of ``factor``: n, mean wall/GPU/comm, comm fraction, rank, overhead vs best.

    rank 1 = smallest mean ``by_metric`` within the model; vs_best = (x − best) / best.
    """
    g = group_means(table, (MODEL, factor))
    value = metric(g, by_metric)
    model_col = g.column(MODEL).to_pylist()
    rank = np.zeros(len(value), dtype=np.int64)
    vs_best = np.zeros(len(value))
    for m in set(model_col):
        idx = np.array([i for i, x in enumerate(model_col) if x == m])
        rank[idx] = competition_rank(value[idx])
        vs_best[idx] = (value[idx] - value[idx].min()) / value[idx].min()
    frac = metric(g, "comm_s") / metric(g, "wall_s")
    return g.append_column("comm_fraction", pa.array(frac)).append_column("rank", pa.array(rank)) \
        .append_column("vs_best", pa.array(vs_best))


def ranking(table: pa.Table, factor: str, by_metric: str = "wall_s") -> dict[str, tuple[str, ...]]:
    """Per model, the levels of ``factor`` best first (smallest mean ``by_metric``)."""
    g = marginal(table, factor, by_metric)
    out: dict[str, tuple[str, ...]] = {}
    for row in sorted(g.to_pylist(), key=lambda r: (r["rank"], level_key(factor, r[factor]))):
        out.setdefault(row[MODEL], ())
        out[row[MODEL]] += (row[factor],)
    return {m: out[m] for m in levels(g, MODEL)}


def normalized(table: pa.Table, factor: str, baseline: str, by_metric: str = "wall_s") -> pa.Table:
    """Per model, mean ``by_metric`` per level of ``factor`` divided by its mean at ``baseline``."""
    if baseline not in levels(table, factor):
        raise MoesimError(f"normalisation: field '{factor}': no level '{baseline}' (allowed: {', '.join(levels(table, factor))})")
    g = group_means(table, (MODEL, factor), (by_metric,))
    base = {r[MODEL]: r[by_metric] for r in g.to_pylist() if r[factor] == baseline}
    norm = [r[by_metric] / base[r[MODEL]] if r[MODEL] in base else math.nan for r in g.to_pylist()]
    return g.append_column("normalized", pa.array(norm, type=pa.float64()))


# --- interaction views -------------------------------------------------------------------------

@dataclass(frozen=True)
class GridView:
    """``rows`` × ``cols`` means normalised to the ``baseline`` cell, with ``fixed`` factor levels."""

    name: str
    title: str
    rows: str
    cols: str
    baseline: tuple[str, str]
    fixed: dict[str, str] = field(default_factory=dict)
    subset: str = "S_full"
    by_metric: str = "wall_s"


@dataclass(frozen=True)
class RatioView:
    """Ratio of mean ``by_metric`` at ``numerator`` to that at ``denominator`` of ``factor``, per level of ``by``."""

    name: str
    title: str
    factor: str
    numerator: str
    denominator: str
    by: str
    subset: str = "S_full"
    by_metric: str = "wall_s"


INTERACTIONS: tuple[GridView | RatioView, ...] = (
    GridView("topology_strategy", "Topology × strategy, normalised to topology 6 / TP2EP16 (roce_hpcc, ring_direct)",
             rows="topology", cols="strategy", baseline=("6", "TP2EP16"),
             fixed={"network": "roce_hpcc", "algorithm": "ring_direct"}),
    RatioView("dbt_ring_by_strategy", "DBT / Ring wall ratio by strategy (S_RoCE)",
              factor="algorithm", numerator="dbt_direct", denominator="ring_direct", by="strategy", subset="S_RoCE"),
    RatioView("dcqcn_hpcc_by_topology", "DCQCN / HPCC wall ratio by topology (S_network)",
              factor="network", numerator="roce_dcqcn", denominator="roce_hpcc", by="topology", subset="S_network"),
)


def interaction_grid(table: pa.Table, view: GridView) -> pa.Table:
    """Per model, rows × cols means (``fixed`` levels only) divided by the model's baseline cell."""
    t = where(subset(table, view.subset), include={k: (v,) for k, v in view.fixed.items()})
    g = group_means(t, (MODEL, view.rows, view.cols), (view.by_metric,))
    cells = _cells(g, (MODEL, view.rows, view.cols), view.by_metric)
    norm = [v / cells[(k[0], *view.baseline)] if (k[0], *view.baseline) in cells else math.nan
            for k, v in cells.items()]
    return g.append_column("normalized", pa.array(norm, type=pa.float64()))


def ratio_by(table: pa.Table, view: RatioView) -> pa.Table:
    """Per model and level of ``by``: both means and their ratio (rows where both levels exist)."""
    t = where(subset(table, view.subset), include={view.factor: (view.numerator, view.denominator)})
    g = group_means(t, (MODEL, view.by, view.factor), (view.by_metric,))
    cells = _cells(g, (MODEL, view.by, view.factor), view.by_metric)
    rows = []
    for (m, b) in dict.fromkeys((k[0], k[1]) for k in cells):
        num, den = cells.get((m, b, view.numerator)), cells.get((m, b, view.denominator))
        if num is not None and den is not None:
            rows.append({MODEL: m, view.by: b, view.numerator: num, view.denominator: den, "ratio": num / den})
    schema = pa.schema([(MODEL, pa.string()), (view.by, pa.string()), (view.numerator, pa.float64()),
                        (view.denominator, pa.float64()), ("ratio", pa.float64())])
    return pa.Table.from_pylist(rows, schema=schema)


def interaction(table: pa.Table, view: GridView | RatioView) -> pa.Table:
    return interaction_grid(table, view) if isinstance(view, GridView) else ratio_by(table, view)


def applicable(table: pa.Table, view: GridView | RatioView) -> str | None:
    """None if ``view`` can be computed on ``table``, else the reason (missing column or level)."""
    t = subset(table, view.subset)
    needs: dict[str, tuple[str, ...]]
    if isinstance(view, GridView):
        needs = {view.rows: (view.baseline[0],), view.cols: (view.baseline[1],)}
        needs.update({k: (v,) for k, v in view.fixed.items()})
    else:
        needs = {view.factor: (view.numerator, view.denominator), view.by: ()}
    for col, lv in needs.items():
        if col not in t.column_names:
            return f"the results have no column '{col}'"
        have = levels(t, col)
        for v in lv:
            if v not in have:
                return f"'{col}' has no level '{v}' in {view.subset}"
    return None


def conditional_order(table: pa.Table, factor: str, given: str, by_metric: str = "wall_s") -> pa.Table:
    """Per model and level of ``given``: the levels of ``factor`` best first (``order``) and the best one.

    Rankings that change with ``given`` are the interactions ("where rankings reverse").
    """
    g = group_means(table, (MODEL, given, factor), (by_metric,))
    groups: dict[tuple[str, str], list[tuple[float, str]]] = {}
    for r in g.to_pylist():
        groups.setdefault((r[MODEL], r[given]), []).append((r[by_metric], r[factor]))
    rows = []
    for (m, gv), vals in groups.items():
        order = [lv for _, lv in sorted(vals, key=lambda x: (x[0], level_key(factor, x[1])))]
        rows.append({"factor": factor, "given": given, MODEL: m, "given_level": gv, "order": " < ".join(order),
                     "best": order[0]})
    return pa.Table.from_pylist(rows, schema=ORDER_SCHEMA)


ORDER_SCHEMA = pa.schema([(c, pa.string()) for c in ("factor", "given", MODEL, "given_level", "order", "best")])
