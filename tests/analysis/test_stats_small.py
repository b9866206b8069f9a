"""Every statistic on a small table computed by hand (tests/analysis/conftest.py: SMALL_A, SMALL_B_WALL).

Model A's walls: topology 1: TP2EP16 2 (ib_cc0) / 4 (roce_dcqcn), TP4EP8 6 / 8;
topology 6: TP2EP16 1 / 1, TP4EP8 3 / 3. B = 2 × A except (1, TP4EP8, roce_dcqcn) = 7 and (6, TP2EP16, *) = 1.
"""

from __future__ import annotations

import pytest

from moesim.analysis.results import as_table
from moesim.analysis.stats import (
    GridView,
    RatioView,
    applicable,
    conditional_order,
    group_means,
    interaction_grid,
    marginal,
    normalized,
    overall,
    ranking,
    ratio_by,
    subset,
)
from moesim.errors import MoesimError


def _rows(table, **match):
    return [r for r in table.to_pylist() if all(r[k] == v for k, v in match.items())]


def test_subsets(small_table):
    assert subset(small_table, "S_full").num_rows == 16
    # S_network drops topology 6; S_feedback / S_RoCE keep the feedback / RoCE modes (here roce_dcqcn only)
    assert set(subset(small_table, "S_network").column("topology").to_pylist()) == {"1"}
    assert subset(small_table, "S_network").num_rows == 8
    for name in ("S_feedback", "S_RoCE"):
        assert set(subset(small_table, name).column("network").to_pylist()) == {"roce_dcqcn"}
    with pytest.raises(MoesimError, match="unknown subset"):
        subset(small_table, "S_nope")


def test_group_means(small_table):
    g = group_means(small_table, ("model", "network"))
    (r,) = _rows(g, model="A", network="ib_cc0")
    assert r["n"] == 4
    assert r["wall_s"] == pytest.approx((2 + 6 + 1 + 3) / 4)
    assert r["gpu_s"] == pytest.approx((1 + 2 + 0.5 + 1) / 4)
    assert r["comm_s"] == pytest.approx((1 + 4 + 0.5 + 2) / 4)


def test_overall(small_table):
    (a,) = _rows(overall(small_table), model="A")
    assert a["n"] == 8
    assert a["wall_mean_s"] == pytest.approx(28 / 8)
    assert a["gpu_mean_s"] == pytest.approx(9 / 8)
    assert a["comm_mean_s"] == pytest.approx(19 / 8)
    assert a["comm_fraction_aggregate"] == pytest.approx((19 / 8) / (28 / 8))  # mean comm / mean wall
    assert a["comm_fraction_mean"] == pytest.approx(5.0 / 8)  # mean of per-run comm / wall
    assert a["wall_min_s"] == 1.0 and a["wall_max_s"] == 8.0 and a["sensitivity"] == 8.0
    assert a["wall_min_at"] == "topology=6, strategy=TP2EP16, network=any"
    assert a["wall_max_at"] == "topology=1, strategy=TP4EP8, network=roce_dcqcn"
    (b,) = _rows(overall(small_table), model="B")
    assert b["wall_mean_s"] == pytest.approx((4 + 8 + 12 + 7 + 1 + 1 + 6 + 6) / 8)
    assert b["wall_max_at"] == "topology=1, strategy=TP4EP8, network=ib_cc0"


def test_marginal_and_ranking(small_table):
    m = marginal(small_table, "strategy")
    (tp2,) = _rows(m, model="A", strategy="TP2EP16")
    (tp4,) = _rows(m, model="A", strategy="TP4EP8")
    assert tp2["wall_s"] == pytest.approx(2.0) and tp4["wall_s"] == pytest.approx(5.0)
    assert (tp2["rank"], tp4["rank"]) == (1, 2)
    assert tp2["vs_best"] == 0 and tp4["vs_best"] == pytest.approx((5 - 2) / 2)
    assert tp4["comm_fraction"] == pytest.approx(((4 + 6 + 2 + 2) / 4) / 5.0)
    assert ranking(small_table, "topology") == {"A": ("6", "1"), "B": ("6", "1")}
    # B by network: roce_dcqcn (8+7+1+6)/4 = 5.5 beats ib_cc0 (4+12+1+6)/4 = 5.75
    assert ranking(small_table, "network")["B"] == ("roce_dcqcn", "ib_cc0")
    assert ranking(small_table, "network")["A"] == ("ib_cc0", "roce_dcqcn")


def test_normalized(small_table):
    n = normalized(small_table, "strategy", "TP2EP16")
    assert [r["normalized"] for r in _rows(n, model="A")] == pytest.approx([1.0, 5.0 / 2.0])
    # B: TP2EP16 (4+8+1+1)/4 = 3.5, TP4EP8 (12+7+6+6)/4 = 7.75
    assert [r["normalized"] for r in _rows(n, model="B")] == pytest.approx([1.0, 7.75 / 3.5])
    with pytest.raises(MoesimError, match="no level 'TP8EP4'"):
        normalized(small_table, "strategy", "TP8EP4")


def test_interaction_grid(small_table):
    view = GridView("g", "grid", rows="topology", cols="strategy", baseline=("6", "TP2EP16"), fixed={"network": "ib_cc0"})
    g = interaction_grid(small_table, view)
    a = {(r["topology"], r["strategy"]): r["normalized"] for r in _rows(g, model="A")}
    assert a == pytest.approx({("1", "TP2EP16"): 2.0, ("1", "TP4EP8"): 6.0, ("6", "TP2EP16"): 1.0, ("6", "TP4EP8"): 3.0})
    b = {(r["topology"], r["strategy"]): r["normalized"] for r in _rows(g, model="B")}
    assert b == pytest.approx({("1", "TP2EP16"): 4.0, ("1", "TP4EP8"): 12.0, ("6", "TP2EP16"): 1.0, ("6", "TP4EP8"): 6.0})


def test_ratio_by(small_table):
    view = RatioView("r", "ratio", factor="network", numerator="roce_dcqcn", denominator="ib_cc0", by="topology")
    r = ratio_by(small_table, view)
    a = {x["topology"]: x["ratio"] for x in _rows(r, model="A")}
    assert a == pytest.approx({"1": ((4 + 8) / 2) / ((2 + 6) / 2), "6": 1.0})
    b = {x["topology"]: x["ratio"] for x in _rows(r, model="B")}
    assert b == pytest.approx({"1": ((8 + 7) / 2) / ((4 + 12) / 2), "6": 1.0})
    # ratios in S_network only keep topology 1
    r2 = ratio_by(small_table, RatioView("r", "ratio", "network", "roce_dcqcn", "ib_cc0", "topology", subset="S_network"))
    assert set(r2.column("topology").to_pylist()) == {"1"}


def test_applicable_names_the_missing_level(small_table):
    view = RatioView("r", "ratio", factor="network", numerator="roce_dcqcn", denominator="roce_hpcc", by="topology")
    assert "no level 'roce_hpcc'" in applicable(small_table, view)
    view = RatioView("r", "ratio", factor="algorithm", numerator="x", denominator="y", by="topology")
    assert "no column 'algorithm'" in applicable(small_table, view)
    ok = RatioView("r", "ratio", factor="network", numerator="roce_dcqcn", denominator="ib_cc0", by="topology")
    assert applicable(small_table, ok) is None


def test_conditional_order_finds_a_flip():
    # topology 1 wins under ring (1 < 2) but loses under dbt (4 > 3)
    walls = {("1", "ring"): 1.0, ("2", "ring"): 2.0, ("1", "dbt"): 4.0, ("2", "dbt"): 3.0}
    t = as_table([{"model": "m", "topology": k[0], "algorithm": k[1], "wall_s": w, "gpu_s": 0.0, "comm_s": w}
                  for k, w in walls.items()])
    c = conditional_order(t, "topology", "algorithm")
    best = {r["given_level"]: (r["best"], r["order"]) for r in c.to_pylist()}
    assert best == {"ring": ("1", "1 < 2"), "dbt": ("2", "2 < 1")}
