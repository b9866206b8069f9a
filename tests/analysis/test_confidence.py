"""How sure an ordering is (moesim.analysis.confidence): the paired-band rule in closed form, the most exact
backend per configuration, the same orderings as benchmarks/accuracy.py, and findings that say what is
unresolved."""

from __future__ import annotations

import math

import numpy as np
import pytest
from analysis_data import study_rows

from moesim.analysis.accuracy import statistics_agreement
from moesim.analysis.bands import (
    SERVERS,
    BackendBands,
    Band,
    ErrorBands,
    Family,
    PairedBands,
    measure,
    measure_paired,
)
from moesim.analysis.confidence import (
    backend_mix,
    calibrate,
    calibrate_studies,
    comparisons,
    most_exact,
    orderings,
)
from moesim.analysis.findings import findings
from moesim.analysis.results import as_table, candidate_factors, factor_columns
from moesim.analysis.study import analyse

RING = Family("ring_direct", SERVERS, "roce_dcqcn")
"""The family of every run of ``_rows`` (topologies 1 and 2 cross servers)."""
ONE, TWO = math.log(1.1), math.log(1.15)
PAIRED = PairedBands(Band(ONE, 20), {RING: Band(ONE, 20)}, Band(0.5, 190), {(RING, RING): Band(TWO, 190)})
"""|log(fluid / packet)| of one run within log 1.1; of the ratio of two runs of the family within log 1.15."""
BANDS = ErrorBands("packet", {"fluid": BackendBands(Band(0.1, 100), paired=PAIRED), "flow": BackendBands(Band(0.3, 100))})
"""Fluid with paired bands; flow with a per-run band of ±30 % alone."""
MODEL = "deepseek-v4-flash"


def _rows(walls: dict[tuple[str, str], float], backend: str = "fluid") -> list[dict]:
    return [{"model": MODEL, "topology": t, "strategy": s, "algorithm": "ring_direct", "network": "roce_dcqcn",
             "backend": backend, "wall_s": w, "gpu_s": 0.0, "comm_s": w, "overrides_json": "{}"}
            for (t, s), w in walls.items()]


def _grid(b: float, backend: str = "fluid") -> list[dict]:
    """2 × 2: at TP2EP16 topology 1 takes 1 s and topology 2 ``b`` s; at TP4EP8 topology 2 is the faster."""
    return _rows({("1", "TP2EP16"): 1.0, ("2", "TP2EP16"): b, ("1", "TP4EP8"): 3.0, ("2", "TP4EP8"): 2.0}, backend)


def _given(ords, level="TP2EP16"):
    return next(o for o in ords if o.statistic == f"{MODEL} topology given strategy = {level}")


@pytest.mark.parametrize(("b", "resolved"), [(1.1, False), (1.1499, False), (1.1501, True), (1.2, True)])
def test_two_runs_are_unresolved_while_their_ratio_is_inside_the_paired_band(b, resolved):
    # one run per level: the ratio b / 1 errs by ε_2 − ε_1, bounded by the family pair's band log 1.15
    o = _given(orderings(analyse(as_table(_grid(b))), BANDS))
    assert o.order == "1 < 2" and o.resolved is resolved
    if not resolved:
        (p,) = o.pairs
        assert (p.first, p.second, p.position) == ("1", "2", 0)
        assert p.margin == pytest.approx(b - 1) and p.band == pytest.approx(0.15)
        assert sorted((c["topology"], c["strategy"]) for c in o.settle) == [("1", "TP2EP16"), ("2", "TP2EP16")]


def test_the_band_of_two_means_is_scaled_by_the_calibrated_mean_factor():
    half = ErrorBands("packet", {"fluid": BackendBands(Band(0.1, 100), paired=PairedBands(
        PAIRED.single, PAIRED.families, PAIRED.pair, PAIRED.pairs, mean_factor=0.5))})
    # log 1.1 lies inside log 1.15 but outside 0.5 × log 1.15 (= log 1.0724)
    assert not _given(orderings(analyse(as_table(_grid(1.1))), BANDS)).resolved
    assert _given(orderings(analyse(as_table(_grid(1.1))), half)).resolved
    assert not _given(orderings(analyse(as_table(_grid(1.07))), half)).resolved
    # a packet row on one side: the fluid row's own band log 1.1, scaled by fluid's factor (packet has none)
    rows = _grid(1.06)
    rows[1]["backend"] = "packet"
    assert not _given(orderings(analyse(as_table(rows)), BANDS)).resolved  # log 1.06 <= log 1.1
    assert _given(orderings(analyse(as_table(rows)), half)).resolved  # log 1.06 > 0.5 × log 1.1


def test_without_paired_bands_the_two_runs_bands_add_up():
    # flow has no paired section: log(1.3) + log(1.3), i.e. unresolved while b <= 1.3² = 1.69
    assert not _given(orderings(analyse(as_table(_grid(1.68, "flow"))), BANDS)).resolved
    assert _given(orderings(analyse(as_table(_grid(1.70, "flow"))), BANDS)).resolved


def test_an_ordering_outside_the_paired_band_of_a_reference_set_is_resolved(tmp_path):
    # A reference set whose fluid errors share an offset: ε_i = 0.3 + 0.001 i for 20 runs of one family. Each
    # run is 35 % off (one-run band), but two runs' ratio is off by 0.001 |i − j| at most (paired band).
    errs = [(RING, math.expm1(0.3 + 0.001 * i)) for i in range(20)]
    d = float(np.quantile([0.001 * (j - i) for i in range(20) for j in range(i + 1, 20)], 0.9))
    paired = measure_paired([[errs]])
    assert paired.pairs[(RING, RING)].band == pytest.approx(d)
    bands = ErrorBands("packet", {"fluid": BackendBands(measure([errs]).overall, paired=paired)})
    outside, inside = math.exp(2 * d), math.exp(d / 2)

    def stored(b: float, name: str):  # the fluid runs of a 2 × 2 study, read back from a results store
        from analysis_data import write_store

        from moesim.analysis.results import load_results

        return analyse(load_results(write_store(tmp_path / name, [{**r, "status": "ok"} for r in _grid(b)])))

    assert _given(orderings(stored(outside, "outside"), bands)).resolved
    o = _given(orderings(stored(inside, "inside"), bands))
    assert not o.resolved and o.pairs[0].band == pytest.approx(math.expm1(d))
    # the independent per-run bands added would have left the first one open too
    assert math.log(outside) < 2 * math.log1p(measure([errs]).overall.band)


def test_calibrate_measures_how_much_a_mean_shrinks_the_paired_band():
    # fluid 10 % slow on every run: every ratio of two means is exact, so the factor is 0; fluid 10 % slow on
    # topology 2 alone: a mean over topology 2 against one over topology 1 errs by log 1.1 exactly
    packet = study_rows((MODEL,))
    rows = [r for r in packet if r["topology"] in ("1", "2") and r["algorithm"] == "ring_direct"
            and r["network"] == "roce_dcqcn"]
    ref = as_table([{**r, "backend": "packet"} for r in rows])
    uniform = as_table([{**r, "backend": "fluid", "wall_s": 1.1 * r["wall_s"]} for r in rows])
    assert calibrate(uniform, ref, BANDS) == pytest.approx(0.0, abs=1e-12)
    skew = as_table([{**r, "backend": "fluid", "wall_s": (1.1 if r["topology"] == "2" else 1.0) * r["wall_s"]}
                     for r in rows])
    # the comparisons of two means: topology 1 vs 2 (error log 1.1 against the family pair's band log 1.15)
    # and strategies given a topology (exact); the factor is the 90 % quantile of |error| / band over them
    record = comparisons(skew, ref, BANDS)
    scores = [abs(c.error) / c.band for c in record if c.means and c.band > 0]
    topo = [c for c in record if c.statistic == f"{MODEL} topology given strategy = TP2EP16"]
    assert [(c.error, c.band) for c in topo] == [(pytest.approx(ONE), pytest.approx(TWO))]
    assert calibrate(skew, ref, BANDS) == pytest.approx(float(np.quantile(scores, 0.9)))
    # where the fastest run lies is a comparison of two runs, not counted in the factor
    assert any(not c.means for c in record)
    # studies (one per model, say) pool their scores: one quantile over all, not the largest factor; three
    # exact studies beside the skewed one leave its topology scores (6 of 18) under a tenth of the pool
    zeros = [0.0 for c in comparisons(uniform, ref, BANDS) if c.means and c.band > 0]
    pooled = calibrate_studies([(uniform, ref)] * 3 + [(skew, ref)], BANDS)
    assert pooled == pytest.approx(float(np.quantile(3 * zeros + scores, 0.9)))
    assert 0 < pooled < calibrate(skew, ref, BANDS)


def test_packet_rows_have_no_band_so_a_tiny_gap_is_resolved():
    ords = orderings(analyse(as_table(_grid(1.000001, "packet"))), BANDS)
    assert all(o.resolved and not o.settle for o in ords) and ords


def test_a_packet_row_next_to_a_fluid_row_carries_only_the_fluid_band():
    rows = _grid(1.08)
    rows[1]["backend"] = "packet"  # topology 2 / TP2EP16 from packet level: unresolved iff log 1.08 <= log 1.1
    o = _given(orderings(analyse(as_table(rows)), BANDS))
    assert not o.resolved and o.pairs[0].band == pytest.approx(0.1)
    assert [(c["topology"], c["strategy"]) for c in o.settle] == [("1", "TP2EP16")]  # the packet row is settled
    assert o.backends == "fluid 1, packet 1"  # the two rows behind it
    rows[1]["wall_s"] = 1.11
    assert _given(orderings(analyse(as_table(rows)), BANDS)).resolved


def test_rows_of_one_simulation_on_both_sides_carry_no_band():
    # topology 1 vs 2 over both strategies; their TP4EP8 runs are one simulation (equal input hash, 3 s each), so
    # that share of the two means errs alike. Mean 2.0 vs 2.15 s: margin log 1.075; the coupling pairs 3 / 4.3 of
    # each side's weight with its twin (d = 0), and the remaining 1 − 3 / 4.3 with the family band log 1.15
    walls = {("1", "TP2EP16"): 1.0, ("2", "TP2EP16"): 1.3, ("1", "TP4EP8"): 3.0, ("2", "TP4EP8"): 3.0}
    rows = _rows(walls)
    for r, h in zip(rows, ("a", "b", "twin", "twin"), strict=True):
        r["input_hash"] = h
    ranking = f"S_full {MODEL} topology ranking"
    o = next(o for o in orderings(analyse(as_table(rows)), BANDS) if o.statistic == ranking)
    assert o.order == "1 < 2" and o.resolved  # log 1.075 > (1 − 3 / 4.3) × log 1.15 = log 1.043
    rows[3]["wall_s"] = 3.001  # the same hash with another result (a store filled by other code): not coupled
    (p,) = next(o for o in orderings(analyse(as_table(rows)), BANDS) if o.statistic == ranking).pairs
    assert p.band == pytest.approx(0.15)
    rows[3]["wall_s"] = 3.0
    for r in rows:
        r["input_hash"] = r["topology"] + r["strategy"]  # four simulations: the whole weight takes log 1.15
    (p,) = next(o for o in orderings(analyse(as_table(rows)), BANDS) if o.statistic == ranking).pairs
    assert p.margin == pytest.approx(0.075) and p.band == pytest.approx(0.15)
    rows[3]["input_hash"] = rows[2]["input_hash"]  # the twin again, with a smaller gap: unresolved by the rest
    rows[1]["wall_s"] = 1.15  # margin log 1.0375 <= (1 − 3 / 4.15) × log 1.15
    (p,) = next(o for o in orderings(analyse(as_table(rows)), BANDS) if o.statistic == ranking).pairs
    assert p.band == pytest.approx(math.expm1((1 - 3 / 4.15) * TWO))


def test_the_fastest_configuration_is_unresolved_while_another_run_reaches_its_band():
    ords = {o.statistic: o for o in orderings(analyse(as_table(_grid(1.1))), BANDS)}
    fastest = ords[f"S_full {MODEL} fastest at"]
    assert fastest.order == "topology=1, strategy=TP2EP16" and not fastest.resolved
    assert fastest.pairs[0].second == "topology=2, strategy=TP2EP16"
    assert ords[f"S_full {MODEL} slowest at"].resolved  # 3 s against 2 s: log 1.5 lies outside log 1.15


def test_most_exact_keeps_each_configurations_best_backend_and_the_backend_stops_being_a_factor():
    rows = _grid(1.2, "flow") + _grid(1.2) + _rows({("1", "TP2EP16"): 1.5}, "packet")
    table = as_table(rows)
    assert "backend" in factor_columns(table)  # every configuration on flow and fluid: a backend comparison
    best = most_exact(table, BANDS)
    got = {(r["topology"], r["strategy"]): (r["backend"], r["wall_s"]) for r in best.to_pylist()}
    assert got == {("1", "TP2EP16"): ("packet", 1.5), ("2", "TP2EP16"): ("fluid", 1.2),
                   ("1", "TP4EP8"): ("fluid", 3.0), ("2", "TP4EP8"): ("fluid", 2.0)}
    assert "backend" not in candidate_factors(best) and backend_mix(best) == "fluid 3, packet 1"
    assert "backend" not in analyse(best).factors


def test_the_orderings_are_those_benchmarks_accuracy_compares(study_table):
    ords = {o.statistic: o.order for o in orderings(analyse(study_table), BANDS)}
    agreement = statistics_agreement(study_table, study_table)
    compared = agreement.orderings.to_pylist()
    assert len(compared) > 100
    assert all(ords[r["statistic"]] == r["candidate"] for r in compared)


def test_a_finding_resting_on_an_unresolved_ordering_says_so():
    a = analyse(as_table(_grid(1.1)))
    fs = {f.topic: f for f in findings(a, orderings(a, BANDS))}
    reversal = fs["reversals"]
    assert reversal.text.endswith("Unresolved at this fidelity: 1 vs 2: 10.0 % apart, inside the combined band of "
                                  f"15.0 % ({MODEL} topology given strategy = TP2EP16).")
    assert reversal.unresolved == (f"{MODEL} topology given strategy = TP2EP16",)
    resolved = analyse(as_table(_grid(1.2, "packet")))
    assert not any(f.unresolved for f in findings(resolved, orderings(resolved, BANDS)))
    assert "Unresolved" not in "".join(f.text for f in findings(a))  # no orderings given: no judgement


def test_study_rows_carry_their_families_band():
    # topology 6 runs sit inside one server, so their band is the one-server family's, whatever the network
    from moesim.analysis.bands import ANY_NETWORK, ONE_SERVER, Family, load_bands
    from moesim.analysis.confidence import BAND, with_bands

    bands = load_bands()
    t = with_bands(as_table([r for r in study_rows((MODEL,)) if r["topology"] in ("1", "6")]), bands)
    one = bands.band("fluid", Family("ring_direct", ONE_SERVER, ANY_NETWORK))
    for r in t.to_pylist():
        if r["topology"] == "6" and r["algorithm"] == "ring_direct":
            assert r[BAND] == pytest.approx(r["wall_s"] * one)


def test_compare_uses_the_most_exact_rows_and_names_their_backends(tmp_path):
    import yaml
    from analysis_data import write_store

    from moesim.analysis.reference import compare_dir

    rows = _grid(1.2) + _rows({("1", "TP2EP16"): 1.1}, "packet")
    store = write_store(tmp_path / "store", [{**r, "status": "ok"} for r in rows])
    ref = {"name": "r", "source": "test", "model": MODEL, "overall": {"wall_mean_s": 1.0},
           "means": [{"subset": "S_full", "factor": "topology", "values": {"1": 2.0, "2": 1.6}}],
           "runs": [{"topology": "1", "strategy": "TP2EP16", "wall_s": 1.0}]}
    (tmp_path / "ref.yaml").write_text(yaml.safe_dump(ref))
    comp, _ = compare_dir(store, tmp_path / "ref.yaml", tmp_path / "cmp")
    got = {(c.group, c.label): (c.ours, c.backend) for c in comp.checks}
    assert got[("overall", "wall_mean_s")] == (pytest.approx((1.1 + 1.2 + 3.0 + 2.0) / 4), "fluid 3, packet 1")
    assert got[("S_full wall_s by topology", "1")] == (pytest.approx((1.1 + 3.0) / 2), "fluid 1, packet 1")
    assert got[("S_full wall_s by topology", "2")] == (pytest.approx(1.6), "fluid")
    assert got[("runs wall_s", "1 TP2EP16")] == (pytest.approx(1.1), "packet")
    assert comp.backend == "fluid 3, packet 1" and comp.table().column("backend").to_pylist()[-1] == "packet"
