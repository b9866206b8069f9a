"""The standard analysis of a results table: every statistic of docs/study.md §7, computed once.

``analyse(table)`` returns an ``Analysis`` that the tables, figures, findings and the HTML report
all read, so each number is computed in one place. Which subset each marginal uses follows the
study's calibration figures (section 8): topology, strategy and algorithm over S_feedback, network
mode over S_network; any other factor over S_full. Every marginal is also given over S_full.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pyarrow as pa

from moesim.analysis import architecture as arch
from moesim.analysis import ensemble, matched, seeds
from moesim.analysis.results import MODEL, factor_columns, levels
from moesim.analysis.stats import (
    INTERACTIONS,
    ORDER_SCHEMA,
    SUBSETS,
    GridView,
    RatioView,
    applicable,
    conditional_order,
    group_means,
    interaction,
    marginal,
    normalized,
    overall,
    subset,
)

MARGINAL_SUBSETS = {"topology": "S_feedback", "strategy": "S_feedback", "algorithm": "S_feedback", "network": "S_network"}
NORMALIZE_TO = {"strategy": "TP2EP16"}
CONDITIONAL_FACTORS = ("algorithm", "strategy")


@dataclass(frozen=True)
class Marginal:
    factor: str
    subset: str
    table: pa.Table


@dataclass(frozen=True)
class Interaction:
    view: GridView | RatioView
    table: pa.Table | None
    reason: str | None = None  # why it could not be computed


@dataclass(frozen=True)
class Conditional:
    factor: str
    ranks: pa.Table
    wins: pa.Table
    reversals: pa.Table


@dataclass(frozen=True)
class Analysis:
    table: pa.Table
    factors: tuple[str, ...]
    models: tuple[str, ...]
    subset_counts: pa.Table  # runs per model (rows) and subset (columns)
    overall: pa.Table
    marginals: tuple[Marginal, ...]
    normalized: tuple[Marginal, ...]
    interactions: tuple[Interaction, ...]
    orders: pa.Table  # conditional rankings: best-first levels of each factor given each other factor's level
    ranks: pa.Table
    rank_distribution: pa.Table
    pairwise: pa.Table
    conditionals: tuple[Conditional, ...]
    architecture: pa.Table | None = None
    proxies: pa.Table | None = None
    unknown_models: tuple[str, ...] = field(default=())
    per_seed: dict[str, Analysis] = field(default_factory=dict)
    """With several start-jitter seeds: the analysis of each seed's runs alone (``table`` holds the
    per-configuration medians, with ``wall_min_s``/``wall_max_s``/``wall_spread``)."""
    seed_runs: pa.Table | None = None
    """With several seeds: every run, one row per seed (``table`` holds their medians)."""
    ensemble_runs: pa.Table | None = None
    """Ensemble members beyond member 0 (``moesim.analysis.ensemble``); the statistics use member 0."""

    def marginal(self, factor: str, subset_name: str | None = None) -> Marginal | None:
        """The marginal of ``factor`` over its calibration subset (or over ``subset_name``)."""
        want = subset_name or MARGINAL_SUBSETS.get(factor, "S_full")
        for m in self.marginals:
            if m.factor == factor and m.subset == want:
                return m
        return next((m for m in self.marginals if m.factor == factor), None)


def _subset_for(table: pa.Table, factor: str) -> str:
    """The calibration subset of ``factor`` if it keeps at least two of its levels, else S_full."""
    name = MARGINAL_SUBSETS.get(factor, "S_full")
    t = subset(table, name)
    return name if t.num_rows and len(levels(t, factor)) > 1 else "S_full"


def analyse(table: pa.Table, with_architecture: bool = True) -> Analysis:
    """Compute every statistic of the report from a normalised results table. Runs that differ only in
    their start-jitter seed are one configuration: the statistics use its median (``moesim.analysis.seeds``).
    Ensemble members are set aside (``ensemble_runs``): the statistics use the run as specified."""
    if ensemble.has_members(table):
        base, members = ensemble.split(table)
        return replace(analyse(base, with_architecture), ensemble_runs=members)
    if seeds.has_seeds(table):
        per_seed = {s: analyse(t, with_architecture=False) for s, t in seeds.per_seed(table).items()}
        a = analyse(seeds.collapse(table), with_architecture)
        return replace(a, per_seed=per_seed, seed_runs=table)
    factors = factor_columns(table)
    ms = levels(table, MODEL)
    counts = {m: {MODEL: m} for m in ms}
    overall_rows = []
    for name in SUBSETS:
        t = subset(table, name)
        n = {r[MODEL]: r["n"] for r in group_means(t, (MODEL,), ()).to_pylist()}
        for m in ms:
            counts[m][name] = n.get(m, 0)
        if t.num_rows:
            overall_rows += [{"subset": name, **r} for r in overall(t, factors).to_pylist()]
    marginals, normals = [], []
    for f in factors:
        chosen = _subset_for(table, f)
        for name in dict.fromkeys(("S_full", chosen)):
            t = subset(table, name)
            marginals.append(Marginal(f, name, marginal(t, f)))
            if f in NORMALIZE_TO:
                lv = levels(t, f)
                base = NORMALIZE_TO[f] if NORMALIZE_TO[f] in lv else lv[0]
                normals.append(Marginal(f, name, normalized(t, f, base)))
    inters = []
    for view in INTERACTIONS:
        reason = applicable(table, view)
        inters.append(Interaction(view, None if reason else interaction(table, view), reason))
    parts = [conditional_order(table, f, g) for f in factors for g in factors if f != g]
    orders = pa.concat_tables(parts) if parts else pa.Table.from_pylist([], schema=ORDER_SCHEMA)
    ranks = matched.matched_ranks(table, factors=factors)
    cond_factors = [f for f in CONDITIONAL_FACTORS if f in factors] or list(factors)
    conds = tuple(Conditional(f, matched.conditional_ranks(ranks, f), matched.pairwise_wins(ranks, f),
                              matched.reversals(ranks, f)) for f in cond_factors) if len(ms) > 1 else ()
    arch_table = proxies = None
    unknown: list[str] = list(ms)
    if with_architecture:
        specs, unknown = arch.lookup_models(ms)
        if specs:
            arch_table, proxies = arch.architecture(specs), arch.comm_proxies(specs, table)
    return Analysis(
        table=table, factors=factors, models=ms, subset_counts=pa.Table.from_pylist(list(counts.values())),
        overall=pa.Table.from_pylist(overall_rows), marginals=tuple(marginals), normalized=tuple(normals),
        interactions=tuple(inters), orders=orders, ranks=ranks, rank_distribution=matched.rank_distribution(ranks),
        pairwise=matched.pairwise_wins(ranks), conditionals=conds, architecture=arch_table, proxies=proxies,
        unknown_models=tuple(unknown),
    )
