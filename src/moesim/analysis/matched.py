"""Matched-configuration analysis (docs/study.md §7): rank the models within each configuration.

A configuration is one combination of the factor levels other than the model (192 in the study).
Only configurations that every model ran are used ("matched"). Within each, models are ranked by
wall time (1 = fastest, equal times share the better rank); the analysis then counts rank
positions, pairwise wins, and how those wins change with the level of one factor (reversals).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pyarrow as pa

from moesim.analysis.results import MODEL, factor_columns, level_key, levels
from moesim.analysis.stats import competition_rank, group_means


def matched_ranks(table: pa.Table, by_metric: str = "wall_s", factors: Sequence[str] | None = None) -> pa.Table:
    """One row per (configuration, model): the factor levels, model, value and rank in the configuration."""
    factors = tuple(factor_columns(table) if factors is None else factors)
    all_models = levels(table, MODEL)
    g = group_means(table, (*factors, MODEL), (by_metric,))
    per_cfg: dict[tuple[str, ...], dict[str, float]] = {}
    for row in g.to_pylist():
        per_cfg.setdefault(tuple(row[f] for f in factors), {})[row[MODEL]] = row[by_metric]
    rows = []
    for cfg, vals in per_cfg.items():
        if len(vals) != len(all_models):
            continue
        ms = [m for m in all_models]
        ranks = competition_rank(np.array([vals[m] for m in ms]))
        for m, r in zip(ms, ranks, strict=True):
            rows.append({**dict(zip(factors, cfg, strict=True)), MODEL: m, by_metric: vals[m], "rank": int(r)})
    schema = pa.schema([*((f, pa.string()) for f in factors), (MODEL, pa.string()), (by_metric, pa.float64()),
                        ("rank", pa.int64())])
    return pa.Table.from_pylist(rows, schema=schema)


def _configs(ranks: pa.Table) -> tuple[str, ...]:
    return tuple(c for c in ranks.column_names if c not in (MODEL, "rank") and pa.types.is_string(ranks.schema.field(c).type))


def rank_distribution(ranks: pa.Table) -> pa.Table:
    """Per model: how many matched configurations put it at rank 1, 2, …, and its mean rank."""
    all_models = levels(ranks, MODEL)
    k = len(all_models)
    rows = []
    for m in all_models:
        r = np.array([x["rank"] for x in ranks.to_pylist() if x[MODEL] == m], dtype=np.int64)
        row: dict[str, object] = {MODEL: m, "configs": int(len(r))}
        row.update({f"rank_{i}": int(np.sum(r == i)) for i in range(1, k + 1)})
        row["mean_rank"] = float(r.mean()) if len(r) else float("nan")
        rows.append(row)
    return pa.Table.from_pylist(rows)


def _values_by_config(ranks: pa.Table, value_col: str) -> dict[tuple[str, ...], dict[str, float]]:
    cfg_cols = _configs(ranks)
    out: dict[tuple[str, ...], dict[str, float]] = {}
    for row in ranks.to_pylist():
        out.setdefault(tuple(row[c] for c in cfg_cols), {})[row[MODEL]] = row[value_col]
    return out


def pairwise_wins(ranks: pa.Table, factor: str | None = None) -> pa.Table:
    """For each model pair (a before b in display order): configurations where a is faster, b is, or tie.

    With ``factor``, the counts are split by that factor's level (the conditional view).
    """
    value_col = next(c for c in ranks.column_names if pa.types.is_floating(ranks.schema.field(c).type))
    cfg_cols = _configs(ranks)
    by_cfg = _values_by_config(ranks, value_col)
    all_models = levels(ranks, MODEL)
    groups: dict[str, list[dict[str, float]]] = {}
    for cfg, vals in by_cfg.items():
        key = dict(zip(cfg_cols, cfg, strict=True))[factor] if factor else ""
        groups.setdefault(key, []).append(vals)
    rows = []
    for lv in sorted(groups, key=lambda v: level_key(factor or "", v)):
        for a, b in combinations(all_models, 2):
            va = np.array([g[a] for g in groups[lv]])
            vb = np.array([g[b] for g in groups[lv]])
            row: dict[str, object] = {factor: lv} if factor else {}
            row.update({"model_a": a, "model_b": b, "wins_a": int(np.sum(va < vb)), "wins_b": int(np.sum(vb < va)),
                        "ties": int(np.sum(va == vb)), "configs": int(len(va))})
            rows.append(row)
    return pa.Table.from_pylist(rows)


def conditional_ranks(ranks: pa.Table, factor: str) -> pa.Table:
    """Per level of ``factor`` and model: matched configurations, rank-1 count and mean rank."""
    rows = []
    data = ranks.to_pylist()
    for lv in levels(ranks, factor):
        for m in levels(ranks, MODEL):
            r = np.array([x["rank"] for x in data if x[factor] == lv and x[MODEL] == m])
            rows.append({factor: lv, MODEL: m, "configs": int(len(r)), "rank_1": int(np.sum(r == 1)),
                         "mean_rank": float(r.mean())})
    return pa.Table.from_pylist(rows)


def reversals(ranks: pa.Table, factor: str) -> pa.Table:
    """Model pairs whose majority winner changes with the level of ``factor``.

    For each pair, the levels where a wins most configurations and those where b does; a pair is
    listed when both sets are non-empty (a conditional ranking reversal).
    """
    wins = pairwise_wins(ranks, factor).to_pylist()
    pairs: dict[tuple[str, str], dict[str, list[str]]] = {}
    for w in wins:
        p = pairs.setdefault((w["model_a"], w["model_b"]), {"a": [], "b": [], "detail": []})
        if w["wins_a"] > w["wins_b"]:
            p["a"].append(w[factor])
        elif w["wins_b"] > w["wins_a"]:
            p["b"].append(w[factor])
        p["detail"].append(f"{w[factor]}: {w['wins_a']}–{w['wins_b']}")
    rows = [{"factor": factor, "model_a": a, "model_b": b, "a_wins_at": "|".join(p["a"]), "b_wins_at": "|".join(p["b"]),
             "wins_a_b": "; ".join(p["detail"])}
            for (a, b), p in pairs.items() if p["a"] and p["b"]]
    schema = pa.schema([(c, pa.string()) for c in ("factor", "model_a", "model_b", "a_wins_at", "b_wins_at", "wins_a_b")])
    return pa.Table.from_pylist(rows, schema=schema)
