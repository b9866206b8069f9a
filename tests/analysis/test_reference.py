"""Comparison against reference figures: the shipped V4 Flash file, exact matches, mismatches, bad files."""

from __future__ import annotations

from statistics import mean

import pytest
import yaml
from analysis_data import BASE, F_ALG, F_NET, F_STRAT, F_TOPO, study_rows, write_store

from moesim.analysis.reference import compare, compare_dir, load_reference
from moesim.errors import MoesimError

M = "deepseek-v4-flash"


def test_builtin_v4_flash_reference_has_the_study_figures(study_table):
    ref = load_reference("v4_flash")
    assert ref["model"] == M and ref["overall"]["wall_mean_s"] == 0.550729
    c = compare(study_table, ref)
    groups = [ch.group for ch in c.checks]
    assert groups.count("overall") == 5
    assert groups.count("S_feedback wall_s by strategy") == 4
    assert groups.count("S_full gpu_s by tp") == 2
    assert groups.count("runs wall_s") == 14
    facts = {o.group: o.same for o in c.orders}
    # the synthetic study orders topologies as the reference does (6, 1, 2, 5, 4, 3) and has the same extremes
    assert facts == {"S_feedback topology order": True, "wall_min_at": True, "wall_max_at": True}


def test_exact_and_off_values(study_table, tmp_path):
    fa = mean(F_ALG[M].values())
    ring = BASE[M] * F_TOPO["1"] * F_STRAT["TP2EP16"] * F_NET["ib_cc0"]
    ref = {"name": "synthetic", "model": M, "tolerance_rel": 0.01,
           "means": [{"subset": "S_network", "factor": "network", "values": {
               "ib_cc0": BASE[M] * fa * mean(F_STRAT.values()) * mean(F_TOPO[t] for t in F_TOPO if t != "6"),
               "roce_dcqcn": 1.0}}],
           "runs": [{"topology": "1", "strategy": "TP2EP16", "algorithm": "ring_direct", "network": "ib_cc0", "wall_s": ring},
                    {"topology": "6", "strategy": "TP2EP16", "algorithm": "ring_direct", "wall_s": 2 * BASE[M]}]}
    path = tmp_path / "ref.yaml"
    path.write_text(yaml.safe_dump(ref))
    c = compare(study_table, load_reference(path))
    rows = {(r["group"], r["label"]): r for r in c.table().to_pylist()}
    assert rows[("S_network wall_s by network", "ib_cc0")]["rel_diff"] == pytest.approx(0, abs=1e-12)
    assert rows[("S_network wall_s by network", "ib_cc0")]["within_tolerance"] == "yes"
    off = rows[("S_network wall_s by network", "roce_dcqcn")]
    assert off["within_tolerance"] == "no" and off["rel_diff"] == pytest.approx(off["ours"] - 1.0)
    assert rows[("runs wall_s", "1 TP2EP16 ring_direct ib_cc0")]["rel_diff"] == pytest.approx(0, abs=1e-12)
    # topology 6 averaged over the four modes: BASE, against a reference of 2·BASE → −50 %
    assert rows[("runs wall_s", "6 TP2EP16 ring_direct")]["rel_diff"] == pytest.approx(-0.5)


@pytest.mark.parametrize("body,field", [
    ({"model": M, "bogus": 1}, "field 'bogus'"),
    ({"overall": {"wall_mean_s": 1}}, "field 'model'"),
    ({"model": M, "overall": {"wall_median_s": 1}}, "field 'overall.wall_median_s'"),
    ({"model": M, "means": [{"subset": "S_x", "factor": "network", "values": {}}]}, "field 'means[0].subset'"),
    ({"model": M, "runs": [{"topology": "1"}]}, "field 'runs[0]'"),
])
def test_bad_reference_files_name_the_field(tmp_path, body, field):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(body))
    with pytest.raises(MoesimError, match=field.replace("[", r"\[").replace("]", r"\]")):
        load_reference(path)


def test_unknown_model_is_a_user_error(study_table, tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({"model": "nobody", "overall": {"wall_mean_s": 1.0}}))
    with pytest.raises(MoesimError, match="no runs of 'nobody'"):
        compare(study_table, load_reference(path))


def test_compare_dir_writes_side_by_side_figures(tmp_path):
    write_store(tmp_path / "store", study_rows(models=(M,)))
    comp, page = compare_dir(tmp_path / "store", "v4_flash")
    out = tmp_path / "store" / "compare"
    assert page == out / "compare.html"
    pngs = sorted(p.name for p in out.glob("compare_*.png"))
    assert len(pngs) == len({c.group for c in comp.checks})  # one figure per group of numbers
    html = page.read_text()
    assert html.count("data:image/png;base64,") == len(pngs)
    assert (out / "compare.csv").is_file() and (out / "compare_facts.md").is_file()
