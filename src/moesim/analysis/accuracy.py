"""How closely one backend's results reproduce another's: run by run, and statistic by statistic.

The fast tier (``fluid``) is judged against the exact one (``packet``) in two ways:

* per configuration (``per_configuration``): the candidate's wall time against the median of the
  reference's start-jitter seeds, and, where those seeds spread widely, whether the candidate lies
  inside their range (a reference that 10 ns of jitter moves by 40 % has no single right answer);
* per statistic (``statistics_agreement``): every number and ordering the report prints (means by
  factor and subset, normalised times, interaction ratios, rankings, best level per group) computed on
  both tables with the same code, so a study's conclusions are compared, not only its runs.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from moesim.analysis import seeds
from moesim.analysis.results import MODEL, candidate_factors
from moesim.analysis.stats import GridView
from moesim.analysis.study import analyse

WIDE_SPREAD = 0.10
"""A reference configuration whose seeds spread more than this has a range, not a value."""
RANGE_MARGIN = 0.02
"""How far outside a wide reference range a candidate may lie and still count as inside."""


def _keys(table: pa.Table) -> tuple[str, ...]:
    """Columns that identify a configuration across backends (not the backend, not the seed)."""
    return tuple(c for c in (MODEL, *candidate_factors(table)) if c not in ("backend", seeds.SEED))


def _by_config(table: pa.Table, keys: tuple[str, ...]) -> dict[tuple[str, ...], list[float]]:
    cols = {k: table.column(k).to_pylist() for k in (*keys, "wall_s")}
    out: dict[tuple[str, ...], list[float]] = {}
    for i in range(table.num_rows):
        out.setdefault(tuple(str(cols[k][i]) for k in keys), []).append(float(cols["wall_s"][i]))
    return out


def per_configuration(candidate: pa.Table, reference: pa.Table) -> pa.Table:
    """One row per configuration present in both: the reference's seeds (median, min, max, spread), the
    candidate's wall time (median over its seeds if it has several), the error against the reference
    median, and for a reference spread above ``WIDE_SPREAD`` whether the candidate lies inside the range
    widened by ``RANGE_MARGIN`` (null otherwise)."""
    keys = tuple(k for k in _keys(reference) if k in candidate.column_names)
    ref, cand = _by_config(reference, keys), _by_config(candidate, keys)
    rows = []
    for key in ref:
        if key not in cand:
            continue
        r = seeds.spread(ref[key])
        c = float(statistics.median(cand[key]))
        wide = r["spread"] > WIDE_SPREAD
        inside = r["min"] * (1 - RANGE_MARGIN) <= c <= r["max"] * (1 + RANGE_MARGIN) if wide else None
        rows.append({**dict(zip(keys, key, strict=True)), "reference_s": r["median"], "reference_min_s": r["min"],
                     "reference_max_s": r["max"], "reference_spread": r["spread"], "reference_seeds": len(ref[key]),
                     "candidate_s": c, "error": c / r["median"] - 1.0, "inside_range": inside})
    return pa.Table.from_pylist(rows)


@dataclass(frozen=True)
class ConfigurationSummary:
    """Decision figures of ``per_configuration``: median and 90th percentile of |error|, and how many
    wide-spread reference configurations hold the candidate inside their range."""

    n: int
    median_abs_error: float
    p90_abs_error: float
    worst_abs_error: float
    wide: int
    wide_inside: int

    def lines(self) -> list[str]:
        return [f"{self.n} configurations: median |error| {100 * self.median_abs_error:.2f} %, 90th percentile "
                f"{100 * self.p90_abs_error:.2f} %, worst {100 * self.worst_abs_error:.2f} %",
                f"{self.wide} with a reference spread above {100 * WIDE_SPREAD:.0f} %: the candidate lies inside the "
                f"range (±{100 * RANGE_MARGIN:.0f} %) in {self.wide_inside}"]


def summarise(table: pa.Table) -> ConfigurationSummary:
    errs = np.abs(np.array(table.column("error").to_pylist(), dtype=float))
    inside = [v for v in table.column("inside_range").to_pylist() if v is not None]
    return ConfigurationSummary(len(errs), float(np.median(errs)), float(np.percentile(errs, 90)),
                                float(errs.max()), len(inside), sum(bool(v) for v in inside))


# --- statistics -------------------------------------------------------------------------------


def _numbers(table: pa.Table) -> tuple[dict[str, float], dict[str, str]]:
    """Every number and ordering of the standard analysis, keyed by a readable label."""
    a = analyse(table, with_architecture=False)
    nums: dict[str, float] = {}
    orders: dict[str, str] = {}
    for r in a.overall.to_pylist():
        for k in ("wall_mean_s", "gpu_mean_s", "comm_mean_s", "wall_min_s", "wall_max_s"):
            nums[f"{r['subset']} {r[MODEL]} {k}"] = r[k]
        orders[f"{r['subset']} {r[MODEL]} fastest at"] = r["wall_min_at"]
        orders[f"{r['subset']} {r[MODEL]} slowest at"] = r["wall_max_at"]
    for m in a.marginals:
        rows = m.table.to_pylist()
        for r in rows:
            nums[f"{m.subset} {r[MODEL]} mean wall by {m.factor} = {r[m.factor]}"] = r["wall_s"]
        for model in {r[MODEL] for r in rows}:
            mine = sorted((r for r in rows if r[MODEL] == model), key=lambda r: r["wall_s"])
            orders[f"{m.subset} {model} {m.factor} ranking"] = " < ".join(str(r[m.factor]) for r in mine)
    for m in a.normalized:
        for r in m.table.to_pylist():
            nums[f"{m.subset} {r[MODEL]} normalised wall by {m.factor} = {r[m.factor]}"] = r["normalized"]
    for it in a.interactions:
        if it.table is None:
            continue
        v = it.view
        value, cells = ("normalized", (v.rows, v.cols)) if isinstance(v, GridView) else ("ratio", (v.by,))
        for r in it.table.to_pylist():
            if r[value] == r[value]:  # not NaN
                nums[f"{v.name} {r[MODEL]} {' / '.join(str(r[c]) for c in cells)}"] = r[value]
    for r in a.orders.to_pylist():
        orders[f"{r[MODEL]} {r['factor']} given {r['given']} = {r['given_level']}"] = r["order"]
    return nums, orders


@dataclass(frozen=True)
class StatisticsAgreement:
    numbers: pa.Table  # statistic, reference, candidate, error
    orderings: pa.Table  # statistic, reference, candidate, same

    @property
    def worst_abs_error(self) -> float:
        errs = [abs(e) for e in self.numbers.column("error").to_pylist() if not math.isnan(e)]
        return max(errs, default=0.0)

    @property
    def orderings_differ(self) -> int:
        return sum(not s for s in self.orderings.column("same").to_pylist())

    def lines(self, tolerance: float) -> list[str]:
        n_over = sum(abs(e) > tolerance for e in self.numbers.column("error").to_pylist())
        return [f"{self.numbers.num_rows} statistics: worst |error| {100 * self.worst_abs_error:.2f} %, "
                f"{n_over} above {100 * tolerance:.0f} %",
                f"{self.orderings.num_rows} orderings (rankings, best levels, where min/max are): "
                f"{self.orderings_differ} differ"]


def statistics_agreement(candidate: pa.Table, reference: pa.Table) -> StatisticsAgreement:
    """Every statistic and ordering of the standard analysis on both tables, side by side. Both tables
    are analysed with their backend column dropped, so the same configurations line up."""
    def strip(t: pa.Table) -> pa.Table:
        return t.drop_columns([c for c in ("backend",) if c in t.column_names])

    rn, ro = _numbers(strip(reference))
    cn, co = _numbers(strip(candidate))
    nums = [{"statistic": k, "reference": v, "candidate": cn[k], "error": cn[k] / v - 1.0 if v else math.nan}
            for k, v in rn.items() if k in cn]
    ords = [{"statistic": k, "reference": v, "candidate": co[k], "same": v == co[k]} for k, v in ro.items() if k in co]
    return StatisticsAgreement(pa.Table.from_pylist(nums), pa.Table.from_pylist(ords))
