"""Matched-configuration analysis on hand-computed tables.

Small table (analysis_data.SMALL_*): A is faster in 5 of the 8 shared configurations, B in one
((1, TP4EP8, roce_dcqcn): 7 < 8), two tie ((6, TP2EP16, *): 1 = 1). B's extra configuration
(topology 2) and A's failed run there must not count.
"""

from __future__ import annotations

import re

import pytest
from analysis_data import small_rows

from moesim.analysis.matched import (
    conditional_ranks,
    matched_ranks,
    pairwise_wins,
    rank_distribution,
    reversals,
)
from moesim.analysis.results import as_table


@pytest.fixture()
def ranks():
    return matched_ranks(as_table(small_rows(extra_unmatched=True)))


def test_only_matched_configurations(ranks):
    assert ranks.num_rows == 16  # 8 configurations × 2 models; topology 2 dropped
    assert "2" not in ranks.column("topology").to_pylist()
    tie = [r["rank"] for r in ranks.to_pylist() if r["topology"] == "6" and r["strategy"] == "TP2EP16"]
    assert tie == [1, 1, 1, 1]  # equal times share rank 1


def test_rank_distribution(ranks):
    d = {r["model"]: r for r in rank_distribution(ranks).to_pylist()}
    assert (d["A"]["rank_1"], d["A"]["rank_2"], d["A"]["configs"]) == (7, 1, 8)
    assert (d["B"]["rank_1"], d["B"]["rank_2"]) == (3, 5)
    assert d["A"]["mean_rank"] == pytest.approx(9 / 8)
    assert d["B"]["mean_rank"] == pytest.approx(13 / 8)


def test_pairwise_wins(ranks):
    (w,) = pairwise_wins(ranks).to_pylist()
    assert (w["model_a"], w["model_b"], w["wins_a"], w["wins_b"], w["ties"], w["configs"]) == ("A", "B", 5, 1, 2, 8)
    by_net = {r["network"]: (r["wins_a"], r["wins_b"], r["ties"]) for r in pairwise_wins(ranks, "network").to_pylist()}
    assert by_net == {"ib_cc0": (3, 0, 1), "roce_dcqcn": (2, 1, 1)}


def test_conditional_ranks(ranks):
    c = {(r["network"], r["model"]): (r["rank_1"], r["mean_rank"]) for r in conditional_ranks(ranks, "network").to_pylist()}
    assert c[("ib_cc0", "A")] == (4, 1.0)
    assert c[("roce_dcqcn", "B")] == (2, pytest.approx(1.5))


def test_reversals():
    # X is faster under ring for both strategies, Y under dbt: a reversal by algorithm, none by strategy
    walls = {("ring", "s1"): (1.0, 2.0), ("ring", "s2"): (1.0, 3.0), ("dbt", "s1"): (5.0, 4.0), ("dbt", "s2"): (6.0, 2.0)}
    rows = [{"model": m, "algorithm": alg, "strategy": s, "wall_s": w[i], "gpu_s": 0.0, "comm_s": w[i]}
            for (alg, s), w in walls.items() for i, m in enumerate(("X", "Y"))]
    r = matched_ranks(as_table(rows))
    (rev,) = reversals(r, "algorithm").to_pylist()
    assert (rev["model_a"], rev["model_b"], rev["a_wins_at"], rev["b_wins_at"]) == ("X", "Y", "ring", "dbt")
    assert rev["wins_a_b"] == "dbt: 0–2; ring: 2–0"
    assert reversals(r, "strategy").num_rows == 0
    assert reversals(matched_ranks(as_table(small_rows())), "network").num_rows == 0


def test_a_pair_with_rare_exceptions_has_a_winner():
    """X beats Y in 19 of 20 matched configurations: a winner with one exception, not a pair without one;
    Y and Z split 10–10: no consistent winner."""
    from moesim.analysis.findings import matched_findings
    from moesim.analysis.study import analyse

    rows = []
    for t in range(20):
        for m, w in (("X", 1.0 if t else 3.0), ("Y", 2.0), ("Z", 1.5 if t % 2 else 2.5)):
            rows.append({"model": m, "topology": str(t), "strategy": "TP2EP16", "wall_s": w, "gpu_s": 0.1,
                         "comm_s": w - 0.1, "status": "ok"})
    text = {f.text.split(":")[0]: f.text for f in matched_findings(analyse(as_table(rows), with_architecture=False))}
    assert text["Nearly consistent winners"] == ("Nearly consistent winners: X beats Y in 19 of 20 (1 exception); "
                                                 "X beats Z in 19 of 20 (1 exception).")
    assert re.fullmatch(r"Pairs without a consistent winner: [YZ] beats [YZ] in 10 of 20, loses 10\.",
                        text["Pairs without a consistent winner"])
