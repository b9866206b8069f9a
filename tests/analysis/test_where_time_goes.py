"""Reading a stored breakdown: per-layer rows and the time split add up to what the rows hold, and the
report's figure draws one stacked bar per run."""

from __future__ import annotations

import pyarrow as pa
import pytest

from moesim.analysis.breakdown import layer_breakdown, slowest_splits, time_split
from moesim.analysis.figures import breakdown_figure
from moesim.system.run import prepare, result_of, simulate_prepared
from moesim.system.spec import RunSpec


@pytest.fixture(scope="module")
def run():
    p = prepare(RunSpec("deepseek-v4-flash", "3", "TP4EP8", "dbt_direct", "ib_cc0", "flow"))
    sim = simulate_prepared(p, breakdown="layers")
    return result_of(p, sim), sim.breakdown


@pytest.mark.parametrize("level", ["layers", "nodes"])
def test_layer_rows_add_up_for_either_level(run, level):
    result, breakdown = run
    r = result.bottleneck_rank
    rows, kinds = layer_breakdown(breakdown.table(level), r)
    assert kinds == ["compute", "tp_all_reduce", "ep_dispatch", "ep_combine"]
    assert [x["layer"] for x in rows] == list(range(len(rows)))
    t = result.ranks[r]
    assert sum(x["compute_s"] for x in rows) == pytest.approx(t.gpu_s, rel=1e-9)
    assert sum(x[f"{k}_s"] for x in rows for k in kinds[1:]) == pytest.approx(t.comm_s, rel=1e-6)
    assert rows[-1]["end_s"] == pytest.approx(t.wall_s, rel=1e-12)
    for x in rows:
        assert sum(x[f"{k}_s"] for k in kinds) <= x["end_s"] - x["start_s"] + 1e-12  # one node at a time
        assert 0 <= x["wait_s"] <= sum(x[f"{k}_s"] for k in kinds[1:])
    assert any(x["copied"] for x in rows) and not rows[0]["copied"]


def test_time_split_sums_to_the_busy_time(run):
    result, breakdown = run
    r = result.bottleneck_rank
    split = time_split(breakdown.table(), r)
    assert list(split)[0] == "compute" and list(split)[-1] == "wait on other ranks"
    assert split["compute"] == pytest.approx(result.ranks[r].gpu_s, rel=1e-9)
    assert sum(split.values()) == pytest.approx(result.ranks[r].gpu_s + result.ranks[r].comm_s, rel=1e-6)
    assert sum(split.values()) <= result.ranks[r].wall_s * (1 + 1e-9)


def test_figure_draws_a_stacked_bar_per_run(run):
    result, breakdown = run
    split = time_split(breakdown.table(), result.bottleneck_rank)
    fig = breakdown_figure([("a", result.wall_s, split), ("b", result.wall_s / 2, {k: v / 2 for k, v in split.items()})])
    ax = fig.axes[0]
    assert len(ax.patches) == 2 * len(split)
    widths = [p.get_width() for p in ax.patches]
    assert sum(widths) == pytest.approx(1.5 * sum(split.values()) * 1e3)  # milliseconds


def test_slowest_runs_without_a_stored_breakdown_are_skipped(tmp_path):
    table = pa.table({"run_id": ["a", "b"], "wall_s": [2.0, 1.0], "bottleneck_rank": [0, 0], "model": ["m", "m"]})
    assert slowest_splits(table, tmp_path, ["model"]) == []
    assert slowest_splits(table.drop_columns(["run_id"]), tmp_path, ["model"]) == []


@pytest.mark.slow
def test_report_of_a_seeded_sweep_shows_the_slowest_runs_not_medians(tmp_path):
    """With start-jitter seeds the statistics use each configuration's median; the figure shows runs."""
    import moesim
    from moesim.analysis.report import build_report

    runs = [{"model": "deepseek-v4-flash", "topology": 6, "strategy": s, "backend": "flow", "tokens": 64,
             "jitter_seed": seed, "start_jitter_s": 1e-8} for s in ("TP2EP16", "TP4EP8") for seed in (1, 2)]
    summary = moesim.sweep(runs, tmp_path / "store", workers=1)
    assert summary.ran == 4 and not summary.failures
    files = build_report(tmp_path / "store", tmp_path / "out")
    assert any(p.name == "breakdown.png" for p in files.figures)
    assert "The 4 slowest runs" in files.html.read_text()  # every seed's run, not 2 configurations' medians
    slowest = slowest_splits(moesim.load_results(tmp_path / "store").pipe(pa.Table.from_pandas), tmp_path / "store",
                             ["strategy", "jitter_seed"])
    assert len(slowest) == 4 and len({label for label, _, _ in slowest}) == 4
    assert [w for _, w, _ in slowest] == sorted((w for _, w, _ in slowest), reverse=True)
