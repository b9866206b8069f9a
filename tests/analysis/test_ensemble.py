"""Ensembles in the analysis (moesim.analysis.ensemble): clusters of member wall times, and the status of every
ordering and finding when stored members agree or disagree with the run as specified."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from analysis_data import study_rows, write_store

from moesim.analysis.bands import ErrorBands
from moesim.analysis.confidence import orderings
from moesim.analysis.ensemble import REGIME, ROBUST, judge, member_tables, split, spread
from moesim.analysis.findings import findings, verdict_rows
from moesim.analysis.report import build_report
from moesim.analysis.results import as_table
from moesim.analysis.study import analyse

EXACT = ErrorBands("packet", {})
"""Packet rows only: every ordering is resolved by the bands, so only members can make one regime-dependent."""


def test_members_that_leave_a_gap_form_clusters():
    s = spread([1.00, 1.31, 1.01, 1.30])
    assert s.clusters == ((0, 2), (1, 3)) and s.bistable
    assert (s.min, s.max, s.median) == (1.0, 1.31, pytest.approx(1.155))
    one = spread([1.0, 1.04, 1.08, 1.12])  # steps of 4 %, below the 5 % gap: one cluster however wide
    assert one.clusters == ((0, 1, 2, 3),) and not one.bistable
    assert spread([2.0, 1.0], indices=[5, 7]).clusters == ((7,), (5,))
    # topology 2 TP8EP4 ring roce_dcqcn at packet level: the reference's packets, then three members spread over
    # 0.54-0.63 s (gaps of 7-8 %, far below the 0.25 s gap): two regimes, not four
    assert spread([0.2931, 0.6283, 0.5890, 0.5447]).clusters == ((0,), (1, 2, 3))
    assert spread([1.0, 1.06, 1.12, 1.18]).clusters == ((0, 1, 2, 3),)  # evenly spaced: one wide cluster


def _rows(flip_member: int | None) -> list[dict]:
    """V4 Flash on topologies 1 and 2, both strategies, packet rows; member rows k = 1, 2 of every configuration
    (1 % slower), and member ``flip_member`` making topology 1 TP2EP16 slower than topology 2 TP2EP16."""
    base = [dict(r, backend="packet") for r in study_rows(("deepseek-v4-flash",))
            if r["topology"] in ("1", "2") and r["strategy"] in ("TP2EP16", "TP4EP8")
            and r["algorithm"] == "ring_direct" and r["network"] == "ib_cc0"]
    rows = list(base)
    for k, r in itertools.product((1, 2), base):
        wall = r["wall_s"] * 1.01
        if k == flip_member and (r["topology"], r["strategy"]) == ("1", "TP2EP16"):
            wall = r["wall_s"] * 2.0
        rows.append(dict(r, ensemble_member=str(k), wall_s=wall, comm_s=wall - r["gpu_s"],
                         run_id=f"{r['run_id']}-{k}", spec_key=f"{r['spec_key']}-{k}"))
    for r in base:
        r["ensemble_member"] = None
    return rows


def test_members_are_set_aside_and_swapped_in_one_at_a_time():
    t = as_table(_rows(flip_member=2))
    base, members = split(t)
    assert base.num_rows == 4 and members.num_rows == 8 and "ensemble_member" not in base.column_names
    swapped = member_tables(base, members)
    assert sorted(swapped) == ["1", "2"]
    assert all(x.num_rows == 4 for x in swapped.values())
    a = analyse(t)
    assert a.table.num_rows == 4 and a.ensemble_runs is not None and a.ensemble_runs.num_rows == 8


def test_an_ordering_that_members_split_is_regime_dependent():
    a = analyse(as_table(_rows(flip_member=2)))
    ords = orderings(a, EXACT)
    v = judge(a, ords, EXACT)
    flipped = v["S_full deepseek-v4-flash topology ranking"]
    assert flipped.status == REGIME and flipped.order == "1 < 2"
    assert flipped.others == {"2 < 1": ("member 2",)}
    assert flipped.sentence() == "As specified: 1 < 2; member 2 gives 2 < 1."
    assert v["S_full deepseek-v4-flash strategy ranking"].status == ROBUST
    fs = {f.topic: f for f in findings(a, ords, v)}
    assert fs["topology"].status == REGIME and "member 2 gives 2 < 1" in fs["topology"].text
    assert fs["strategy"].status == ROBUST
    verdict = {r["question"].split(" (")[0]: r for r in verdict_rows(a, ords, v)}
    assert verdict["Best topology"]["status"] == REGIME and verdict["Best topology"]["answer"] == "1"
    assert verdict["Best TP/EP split"]["status"] == ROBUST
    assert verdict["Best TP/EP split"]["margin_rel"] == pytest.approx(1.0)  # TP4EP8 is twice TP2EP16


def test_members_that_agree_leave_every_ordering_robust():
    a = analyse(as_table(_rows(flip_member=None)))
    ords = orderings(a, EXACT)
    assert {v.status for v in judge(a, ords, EXACT).values()} == {ROBUST}


def test_the_report_leads_with_the_verdict_and_names_the_regimes(tmp_path: Path):
    store = write_store(tmp_path / "store", _rows(flip_member=1))
    files = build_report(store)
    md = (store / "findings.md").read_text()
    assert md.index("## Verdict") < md.index("## Summary") < md.index("## Regime-dependent orderings")
    assert "| Best topology (S_full) | 1 | regime-dependent |" in md
    assert "- S_full deepseek-v4-flash topology ranking: As specified: 1 < 2; member 1 gives 2 < 1." in md
    summary = md.split("\n## Summary\n\n", 1)[1].split("\n\n## ", 1)[0].splitlines()
    statuses = [line.split("(", 1)[1].split(")", 1)[0] for line in summary]
    assert statuses == sorted(statuses, key=["robust", "regime-dependent", "unresolved"].index)
    page = files.html.read_text()
    assert page.index('<section id="verdict">') < page.index('<section id="provenance">')
    confidence = (store / "tables" / "confidence.csv").read_text()
    assert "regime-dependent" in confidence and "member 1 gives 2 < 1" in confidence
