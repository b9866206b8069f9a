"""moesim.analysis: statistics, tables, figures and the HTML report over a results table (docs/study.md §7).

Modules: results (loading, level order), stats (subsets, means, marginals, interactions), matched
(matched-configuration ranks), architecture (proxies), study (the standard analysis), tables,
figures, findings, report, reference (comparison against published figures), bands (each backend's measured
error against packet level), confidence (which orderings those errors leave unresolved), refine (rerunning the
runs that settle them on packet level).
"""

from moesim.analysis.matched import (
    conditional_ranks,
    matched_ranks,
    pairwise_wins,
    rank_distribution,
    reversals,
)
from moesim.analysis.results import as_table, factor_columns, levels, load_results
from moesim.analysis.stats import (
    INTERACTIONS,
    SUBSETS,
    GridView,
    RatioView,
    Subset,
    conditional_order,
    group_means,
    interaction,
    marginal,
    normalized,
    overall,
    ranking,
    subset,
)
from moesim.analysis.study import Analysis, analyse

__all__ = [
    "INTERACTIONS", "SUBSETS", "Analysis", "GridView", "RatioView", "Subset", "analyse", "as_table",
    "conditional_order", "conditional_ranks", "factor_columns", "group_means", "interaction", "levels",
    "load_results", "marginal", "matched_ranks", "normalized", "overall", "pairwise_wins", "rank_distribution",
    "ranking", "reversals", "subset",
]
