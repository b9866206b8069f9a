"""The standard analysis on the 4 × 192-run synthetic study with a known multiplicative structure.

wall = base · f_topo · f_strat · f_alg(model) · f_net (f_net = 1 on topology 6), see analysis_data.py.
On a full grid the mean of a product of independent factors is the product of the factor means, so
every statistic below is stated in closed form from the factor tables, not from the code.
"""

from __future__ import annotations

from statistics import mean

import pytest
from analysis_data import BASE, F_ALG, F_NET, F_STRAT, F_TOPO, MODELS, TP, study_rows

from moesim.analysis.findings import findings, reversal_findings
from moesim.analysis.results import as_table
from moesim.analysis.study import analyse

FB = ("ib_hpcc", "roce_hpcc", "roce_dcqcn")


def net_mean(topo: str, nets) -> float:
    return 1.0 if topo == "6" else mean(F_NET[n] for n in nets)


@pytest.fixture(scope="module")
def a(study_table):
    return analyse(study_table)


def _rows(table, **match):
    return [r for r in table.to_pylist() if all(r[k] == v for k, v in match.items())]


def test_subset_counts(a):
    for r in a.subset_counts.to_pylist():
        assert (r["S_full"], r["S_feedback"], r["S_RoCE"], r["S_network"]) == (192, 144, 96, 160)


@pytest.mark.parametrize("model", MODELS)
def test_overall_closed_form(a, model):
    (o,) = _rows(a.overall, subset="S_full", model=model)
    fa = F_ALG[model]
    wall = BASE[model] * mean(fa.values()) * mean(F_STRAT.values()) * mean(F_TOPO[t] * net_mean(t, F_NET) for t in F_TOPO)
    gpu = 0.02 * BASE[model] * mean(2 / tp for tp in TP.values())
    assert o["wall_mean_s"] == pytest.approx(wall, rel=1e-12)
    assert o["gpu_mean_s"] == pytest.approx(gpu, rel=1e-12)
    assert o["comm_fraction_aggregate"] == pytest.approx(1 - gpu / wall, rel=1e-12)
    lo = BASE[model] * F_TOPO["6"] * F_STRAT["TP2EP16"] * fa["ring_direct"]
    hi = BASE[model] * F_TOPO["3"] * F_STRAT["TP16EP2"] * fa["dbt_direct"] * F_NET["roce_dcqcn"]
    assert (o["wall_min_s"], o["wall_max_s"], o["sensitivity"]) == pytest.approx((lo, hi, hi / lo))
    assert o["wall_min_at"] == "topology=6, strategy=TP2EP16, algorithm=ring_direct, network=any"
    assert o["wall_max_at"] == "topology=3, strategy=TP16EP2, algorithm=dbt_direct, network=roce_dcqcn"


def test_marginals_closed_form(a):
    strat = a.marginal("strategy")
    assert strat.subset == "S_feedback"
    net = a.marginal("network")
    assert net.subset == "S_network"
    for m in MODELS:
        fa = mean(F_ALG[m].values())
        topo_fb = mean(F_TOPO[t] * net_mean(t, FB) for t in F_TOPO)
        for s, fs in F_STRAT.items():
            (r,) = _rows(strat.table, model=m, strategy=s)
            assert r["wall_s"] == pytest.approx(BASE[m] * fs * fa * topo_fb, rel=1e-12)
            assert r["vs_best"] == pytest.approx(fs / F_STRAT["TP2EP16"] - 1)
        for n, fn in F_NET.items():
            (r,) = _rows(net.table, model=m, network=n)
            assert r["wall_s"] == pytest.approx(BASE[m] * fn * fa * mean(F_STRAT.values()) *
                                                mean(F_TOPO[t] for t in F_TOPO if t != "6"), rel=1e-12)
    topo = a.marginal("topology")
    expected = tuple(sorted(F_TOPO, key=lambda t: F_TOPO[t] * net_mean(t, FB)))
    for m in MODELS:
        got = tuple(r["topology"] for r in sorted(_rows(topo.table, model=m), key=lambda r: r["rank"]))
        assert got == expected == ("6", "1", "2", "5", "4", "3")


def test_normalized_strategy(a):
    n = next(x for x in a.normalized if x.subset == "S_feedback")
    for r in n.table.to_pylist():
        assert r["normalized"] == pytest.approx(F_STRAT[r["strategy"]] / F_STRAT["TP2EP16"])


def test_interactions_closed_form(a):
    grid, dbt, dcqcn = (i.table for i in a.interactions)
    assert grid.num_rows == 4 * 6 * 4
    for r in grid.to_pylist():
        n = 1.0 if r["topology"] == "6" else F_NET["roce_hpcc"]
        assert r["normalized"] == pytest.approx(F_TOPO[r["topology"]] * n * F_STRAT[r["strategy"]])
    assert dbt.num_rows == 4 * 4
    for r in dbt.to_pylist():
        assert r["ratio"] == pytest.approx(F_ALG[r["model"]]["dbt_direct"] / F_ALG[r["model"]]["ring_direct"])
    assert sorted(set(dcqcn.column("topology").to_pylist())) == ["1", "2", "3", "4", "5"]
    for r in dcqcn.to_pylist():
        assert r["ratio"] == pytest.approx(F_NET["roce_dcqcn"] / F_NET["roce_hpcc"])


def test_matched_closed_form(a):
    # within one configuration only base · f_alg(model) differs between models
    for alg in ("ring_direct", "dbt_direct"):
        order = sorted(MODELS, key=lambda m: BASE[m] * F_ALG[m][alg])
        c = next(x for x in a.conditionals if x.factor == "algorithm")
        for pos, m in enumerate(order, start=1):
            (r,) = _rows(c.ranks, algorithm=alg, model=m)
            assert r["mean_rank"] == pos and r["configs"] == 96
    d = {r["model"]: r for r in a.rank_distribution.to_pylist()}
    assert d["deepseek-v4-flash"]["rank_1"] == 192 and d["kimi-k3"]["rank_2"] == 192
    assert (d["glm-5.3"]["rank_3"], d["glm-5.3"]["rank_4"]) == (96, 96)
    rev = next(x for x in a.conditionals if x.factor == "algorithm").reversals.to_pylist()
    assert [(r["model_a"], r["model_b"], r["a_wins_at"], r["b_wins_at"]) for r in rev] == \
        [("glm-5.3", "deepseek-v4-pro", "ring_direct", "dbt_direct")]
    assert next(x for x in a.conditionals if x.factor == "strategy").reversals.num_rows == 0


def test_findings_state_the_numbers(a):
    text = "\n".join(f.text for f in findings(a))
    assert "strategy (S_feedback): TP2EP16 is fastest for every model" in text
    assert f"adds {100 * (F_STRAT['TP16EP2'] - 1):.1f}%" in text
    lo = F_ALG["deepseek-v4-pro"]["dbt_direct"] - 1
    hi = F_ALG["kimi-k3"]["dbt_direct"] - 1
    assert f"ring_direct is fastest for every model; the slowest level (dbt_direct) adds {100 * lo:.1f}%–{100 * hi:.1f}%" in text
    assert "glm-5.3 beats deepseek-v4-pro in most configurations at algorithm ring_direct but loses at dbt_direct" in text
    assert f"{F_NET['roce_dcqcn'] / F_NET['roce_hpcc']:.2f}× at every topology" in text
    assert "topology 6 / TP2EP16" in text
    # overall: sensitivity of kimi-k3 = (f_topo3 · f_TP16EP2 · f_dbt · f_dcqcn) / 1
    sens = F_TOPO["3"] * F_STRAT["TP16EP2"] * F_ALG["kimi-k3"]["dbt_direct"] * F_NET["roce_dcqcn"]
    assert f"a {sens:.2f}× spread" in text
    # architecture: TP proxy h × layers, largest first (docs/study.md §2)
    assert "TP proxy (h × layers) glm-5.3 > deepseek-v4-pro > kimi-k3 > deepseek-v4-flash" in text
    # the structure is multiplicative: no factor's best level changes with another factor
    assert reversal_findings(a) == []


def test_reversal_finding_when_the_best_level_flips():
    rows = study_rows(models=("kimi-k3",))
    for r in rows:  # make topology 1 the fastest under TP16EP2 only
        if r["topology"] == "1" and r["strategy"] == "TP16EP2":
            r["wall_s"] *= 0.1
            r["comm_s"] = r["wall_s"] - r["gpu_s"]
    fs = reversal_findings(analyse(as_table(rows), with_architecture=False))
    text = " ".join(f.text for f in fs)
    assert "The best topology depends on the strategy" in text
    assert "TP2EP16 → 6" in text and "TP16EP2 → 1" in text


def test_findings_carry_their_backend(a):
    fs = findings(a)
    assert fs and {f.backend for f in fs} == {"fluid"}
    assert any("network" in f.factors for f in fs)  # a CC-aware backend states network-mode findings


def test_a_cc_blind_backend_states_no_network_mode_finding(study_rows_flow):
    fs = findings(analyse(study_rows_flow))
    assert {f.backend for f in fs} == {"flow"}
    network = [f for f in fs if "network" in f.factors]
    # the one line about network modes is the caveat; no ranking, ratio or reversal of network modes
    assert len(network) == 1 and network[0].text.startswith("No finding about network modes: the flow backend")
    text = "\n".join(f.text for f in fs)
    assert "DCQCN / HPCC" not in text and "network (S_network)" not in text and "per network" not in text
    assert any(f.topic == "strategy" for f in fs)  # the other findings are still there


@pytest.fixture(scope="module")
def study_rows_flow():
    rows = [{**r, "backend": "flow"} for r in study_rows()]
    return as_table(rows)


def _seeded(seeds: int, wobble: dict[tuple[str, str], tuple[float, ...]]) -> list[dict]:
    """The synthetic study run with ``seeds`` seeds; configurations in ``wobble`` (topology, strategy) get
    a per-seed factor on their wall time (and comm), all others repeat exactly."""
    out = []
    for r in study_rows(("deepseek-v4-flash",)):
        for s in range(1, seeds + 1):
            f = wobble.get((r["topology"], r["strategy"]), (1.0,) * seeds)[s - 1]
            w = r["wall_s"] * f
            out.append({**r, "wall_s": w, "comm_s": w - r["gpu_s"], "jitter_seed": str(s), "start_jitter_s": "1e-08"})
    return out


def test_seeds_collapse_to_the_median_and_keep_the_range():
    wob = {("4", "TP16EP2"): (1.0, 1.3, 0.9)}
    a3 = analyse(as_table(_seeded(3, wob)))
    assert a3.table.num_rows == 192 and sorted(a3.per_seed) == ["1", "2", "3"] and a3.seed_runs.num_rows == 576
    rows = _rows(a3.table, topology="4", strategy="TP16EP2", algorithm="ring_direct", network="ib_cc0")
    (r,) = rows
    base = BASE["deepseek-v4-flash"] * F_TOPO["4"] * F_STRAT["TP16EP2"]
    assert r["wall_s"] == pytest.approx(base) and r["wall_min_s"] == pytest.approx(0.9 * base)
    assert r["wall_max_s"] == pytest.approx(1.3 * base) and r["wall_spread"] == pytest.approx(0.4)
    assert "jitter_seed" not in a3.factors and r["seeds"] == 3


def test_each_finding_says_in_how_many_seeds_it_holds():
    # seed 3 makes topology 4 / TP2EP16 (2 × 5.5) the slowest cell of the grid instead of 3 / TP16EP2
    # (2.5 × 4): the grid finding holds in 2 of 3 seeds; TP2EP16 stays the fastest strategy in all three
    wob = {("4", "TP2EP16"): (1.0, 1.0, 5.5)}
    fs = findings(analyse(as_table(_seeded(3, wob))))
    assert all(f.text.endswith(("Holds in 3 of 3 seeds.", "Holds in 2 of 3 seeds.")) for f in fs if f.claim is not None)
    grid = next(f for f in fs if f.topic == "topology_strategy")
    assert grid.text.endswith("Holds in 2 of 3 seeds.")
    strat = next(f for f in fs if f.topic == "strategy")
    assert strat.text.endswith("Holds in 3 of 3 seeds.")
