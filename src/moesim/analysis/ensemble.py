"""Ensembles in the analysis: how members of one configuration spread, and which orderings they move.

A member (``moesim.system.ensemble``) is the same configuration under another start skew, packet size and ECN
stream. Members are stored as rows with an ``ensemble_member`` column; the analysis keeps the run as specified
(member 0) as the configuration's value and uses the members to judge each ordering:

- **robust**: the certainty rule resolves it and no stored member (nor start-jitter seed) reverses it;
- **regime-dependent**: some members give another order (which ones, in one sentence);
- **unresolved**: inside the error bands and not yet settled at packet level (the runs that would settle it).

Members fall into separate **clusters** when sorted wall times leave a gap wider than ``CLUSTER_GAP`` of their
median and ``CLUSTER_SPACING`` times the members' usual spacing (the median of the other gaps): the
configuration is bistable, the regimes docs/calibration.md describes.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from moesim.analysis import seeds
from moesim.analysis.results import DEFAULT_LEVEL, level_key
from moesim.system.ensemble import ENSEMBLE, PERTURBED

CLUSTER_GAP = 0.05
"""Sorted wall times split into clusters at a gap wider than this share of their median ..."""
CLUSTER_SPACING = 2.0
"""... and wider than this many times the median of the other gaps (a spread-out regime is one cluster)."""
ROBUST, REGIME, UNRESOLVED = "robust", "regime-dependent", "unresolved"
STATUSES = (ROBUST, REGIME, UNRESOLVED)
"""The status of an ordering or finding, best first."""


@dataclass(frozen=True)
class Spread:
    """Members' wall times: median, min, max, and the clusters they fall into (member indices, fastest first)."""

    median: float
    min: float
    max: float
    clusters: tuple[tuple[int, ...], ...]

    @property
    def bistable(self) -> bool:
        return len(self.clusters) > 1

    @property
    def spread(self) -> float:
        return (self.max - self.min) / self.median if self.median else 0.0


def spread(values: Sequence[float], indices: Sequence[int] | None = None) -> Spread:
    """The spread of members' wall times; ``indices`` name the members (default 0, 1, ...)."""
    idx = list(indices) if indices is not None else list(range(len(values)))
    stats = seeds.spread(values)
    med = stats["median"]
    order = sorted(range(len(values)), key=lambda i: (values[i], idx[i]))
    gaps = [values[b] - values[a] for a, b in zip(order, order[1:], strict=False)]
    groups: list[list[int]] = [[idx[order[0]]]]
    for k, b in enumerate(order[1:]):
        others = gaps[:k] + gaps[k + 1:]
        usual = statistics.median(others) if others else 0.0
        if gaps[k] > CLUSTER_GAP * med and gaps[k] > CLUSTER_SPACING * usual:
            groups.append([])
        groups[-1].append(idx[b])
    return Spread(med, stats["min"], stats["max"], tuple(tuple(sorted(g)) for g in groups))


def has_members(table: pa.Table) -> bool:
    """Whether the table holds ensemble members beyond member 0."""
    if ENSEMBLE not in table.column_names:
        return False
    return any(v not in (None, DEFAULT_LEVEL, "0") for v in table.column(ENSEMBLE).to_pylist())


def split(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(member-0 rows without the member columns, the other members' rows)."""
    col = table.column(ENSEMBLE)
    base_mask = pc.is_in(pc.fill_null(pc.cast(col, pa.string()), DEFAULT_LEVEL), pa.array([DEFAULT_LEVEL, "0"]))
    base, members = table.filter(base_mask), table.filter(pc.invert(base_mask))
    unused = [c for c in (ENSEMBLE, *PERTURBED) if c in base.column_names
              and set(base.column(c).to_pylist()) <= {None, DEFAULT_LEVEL}]
    return base.drop_columns(unused), members


def config_columns(table: pa.Table) -> tuple[str, ...]:
    """The columns that identify a configuration: the model and every factor but the member, the perturbed
    parameters and the seed."""
    return tuple(c for c in seeds.config_columns(table) if c not in (ENSEMBLE, *PERTURBED))


def member_tables(base: pa.Table, members: pa.Table) -> dict[str, pa.Table]:
    """For each member index stored: ``base`` with every configuration that has that member replaced by its row."""
    keys = [c for c in config_columns(base) if c in members.column_names]
    cols = [c for c in base.column_names if c in members.column_names]
    rows = base.to_pylist()
    by_member: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
    for r in members.to_pylist():
        by_member.setdefault(str(r[ENSEMBLE]), {})[tuple(str(r[k]) for k in keys)] = r
    out = {}
    for m in sorted(by_member, key=lambda v: level_key(ENSEMBLE, v)):
        sub = by_member[m]
        swapped = [{c: sub[k][c] for c in cols} if (k := tuple(str(r[c]) for c in keys)) in sub else r
                   for r in rows]
        out[m] = pa.Table.from_pylist(swapped, schema=base.schema)
    return out


@dataclass(frozen=True)
class Verdict:
    """An ordering's status: the order as stated, and the members (or seeds) that give another order."""

    statistic: str
    status: str
    order: str
    others: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Another order → the members ("member 2") or seeds ("seed 3") that give it."""

    def sentence(self) -> str:
        """One sentence saying which regime gives which answer (empty unless regime-dependent)."""
        if not self.others:
            return ""
        alt = "; ".join(f"{', '.join(who)} give{'s' if len(who) == 1 else ''} {order}"
                        for order, who in self.others.items())
        return f"As specified: {self.order}; {alt}."


def verdicts(ords: Sequence[Any], variants: dict[str, Sequence[Any]]) -> dict[str, Verdict]:
    """Each ordering's status from the orderings (``confidence.Ordering``) of the stated analysis and of each
    variant (a member's or a seed's analysis, named by its label)."""
    out = {}
    by_variant = {label: {o.statistic: o.order for o in v} for label, v in variants.items()}
    for o in ords:
        others: dict[str, list[str]] = {}
        for label, orders in by_variant.items():
            got = orders.get(o.statistic)
            if got is not None and got != o.order:
                others.setdefault(got, []).append(label)
        status = REGIME if others else (ROBUST if o.resolved else UNRESOLVED)
        out[o.statistic] = Verdict(o.statistic, status, o.order, {k: tuple(v) for k, v in others.items()})
    return out


def worst(statuses: Sequence[str]) -> str:
    """The weakest of several statuses (a finding is as sure as the least sure ordering it rests on)."""
    return max(statuses, key=STATUSES.index) if statuses else ROBUST


def judge(a: Any, ords: Sequence[Any], bands: Any) -> dict[str, Verdict]:
    """The status of each of ``ords`` (the orderings of analysis ``a`` under ``bands``): every stored member and
    every start-jitter seed is analysed on its own and its orderings compared with the stated ones."""
    from moesim.analysis.confidence import orderings
    from moesim.analysis.study import analyse

    variants: dict[str, Sequence[Any]] = {}
    if a.ensemble_runs is not None:
        for m, t in member_tables(a.table, a.ensemble_runs).items():
            variants[f"member {m}"] = orderings(analyse(t, with_architecture=False), bands)
    for s, sa in a.per_seed.items():
        variants[f"seed {s}"] = orderings(sa, bands)
    return verdicts(ords, variants)
