"""Error bands (moesim.analysis.bands): the quantile rule, the paired bands of two runs, the families of study
runs, the shipped file."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest

from moesim.analysis.bands import (
    ANY_NETWORK,
    MIN_FAMILY_RUNS,
    ONE_SERVER,
    SERVERS,
    BackendBands,
    Band,
    ErrorBands,
    Family,
    PairedBands,
    bands_yaml,
    family_of,
    load_bands,
    measure,
    measure_paired,
    pair_key,
    parse_bands,
)
from moesim.errors import MoesimError
from moesim.system.spec import RunSpec

RING_DCQCN = Family("ring_direct", SERVERS, "roce_dcqcn")
DBT_CC0 = Family("dbt_direct", SERVERS, "ib_cc0")
RING_ONE = Family("ring_direct", ONE_SERVER, ANY_NETWORK)


def _log_errors(fam: Family, logs: list[float]) -> list[tuple[Family, float]]:
    """Errors backend / packet − 1 whose logs are ``logs``."""
    return [(fam, math.expm1(x)) for x in logs]


def test_a_family_with_enough_runs_gets_its_90th_percentile():
    # errors 1 %, 2 %, ..., 20 % (signs mixed): numpy's linear 90 % quantile of 1..20 is 18.1
    errs = [(RING_DCQCN, (-1) ** i * (i + 1) / 100) for i in range(20)]
    b = measure([errs])
    assert b.families[RING_DCQCN] == Band(pytest.approx(0.181), 20)
    assert b.overall == Band(pytest.approx(0.181), 20)


def test_a_small_family_gets_the_larger_of_its_worst_run_and_the_backend_wide_band():
    big = [(RING_DCQCN, 0.10)] * 20  # backend-wide 90 % quantile: 10 %
    small_good = [(DBT_CC0, 0.01)] * (MIN_FAMILY_RUNS - 1)
    small_bad = [(RING_ONE, 0.50), (RING_ONE, 0.02)]
    b = measure([big + small_good + small_bad])
    overall = float(np.quantile([0.10] * 20 + [0.01] * 9 + [0.50, 0.02], 0.9))
    assert b.overall.band == pytest.approx(overall)
    assert b.families[DBT_CC0].band == pytest.approx(overall)  # never better than the backend overall
    assert b.families[RING_ONE].band == pytest.approx(0.50)  # never better than its own worst run


def test_each_reference_is_measured_apart_and_the_larger_band_kept():
    at_4096 = [(RING_DCQCN, 0.30)] * 10 + [(DBT_CC0, 0.02)] * 3
    at_256 = [(RING_DCQCN, 0.05)] * 10 + [(DBT_CC0, 0.04)] * 12
    b = measure([at_4096, at_256], relative_cost=0.03)
    assert b.families[RING_DCQCN] == Band(pytest.approx(0.30), 20)
    # DBT: only the second reference has enough runs of it, so its quantile counts, not the first's 3 runs
    assert b.families[DBT_CC0] == Band(pytest.approx(0.04), 15)
    assert b.relative_cost == 0.03


def test_the_paired_band_is_the_90th_percentile_of_the_difference_of_two_runs_log_errors():
    # ring: log errors 0.3 + 0.001 i (i < 20), DBT: 0.1 on each of 12 runs. Each ring run is 30-32 % off in
    # log, but a ring run against a DBT run differs by 0.2 + 0.001 i, two ring runs by 0.001 |i − j|.
    ring = [0.3 + 0.001 * i for i in range(20)]
    paired = measure_paired([[_log_errors(RING_DCQCN, ring) + _log_errors(DBT_CC0, [0.1] * 12)]])
    assert paired.families[RING_DCQCN].band == pytest.approx(np.quantile(ring, 0.9))
    assert paired.pairs[pair_key(RING_DCQCN, DBT_CC0)] == Band(
        pytest.approx(np.quantile([x - 0.1 for x in ring for _ in range(12)], 0.9)), 240)
    assert paired.pairs[(RING_DCQCN, RING_DCQCN)] == Band(
        pytest.approx(np.quantile([abs(a - b) for a, b in itertools.combinations(ring, 2)], 0.9)), 190)
    assert paired.pairs[(DBT_CC0, DBT_CC0)].band == pytest.approx(0.0, abs=1e-12)
    assert paired.two(DBT_CC0, RING_DCQCN) == paired.pairs[pair_key(RING_DCQCN, DBT_CC0)].band
    assert paired.two(RING_ONE, RING_DCQCN) == paired.pair.band  # a pair no reference holds: backend-wide


def test_pairs_are_formed_within_one_scale_of_a_reference():
    # the same family 50 % slow at one token count and 50 % fast at the other: every run is far off, but two
    # runs simulated alike are not, so their ratio is exact
    at_256, at_1024 = _log_errors(RING_DCQCN, [0.5] * 10), _log_errors(RING_DCQCN, [-0.5] * 10)
    paired = measure_paired([[at_256, at_1024]])
    assert paired.pairs[(RING_DCQCN, RING_DCQCN)] == Band(0.0, 90)
    assert paired.families[RING_DCQCN].band == pytest.approx(0.5)


def test_a_pair_with_a_small_family_gets_the_larger_of_its_worst_pair_and_the_backend_wide_band():
    big = _log_errors(RING_DCQCN, [0.1 * (i % 2) for i in range(20)])  # pairs differ by 0 or 0.1
    small = _log_errors(DBT_CC0, [0.0, 0.02])  # below MIN_FAMILY_RUNS
    paired = measure_paired([[big + small]])
    logs = [0.1 * (i % 2) for i in range(20)] + [0.0, 0.02]
    overall = float(np.quantile([abs(a - b) for a, b in itertools.combinations(logs, 2)], 0.9))
    assert paired.pair.band == pytest.approx(overall)
    assert paired.pairs[(DBT_CC0, DBT_CC0)].band == pytest.approx(max(0.02, overall))
    assert paired.pairs[pair_key(DBT_CC0, RING_DCQCN)].band == pytest.approx(max(0.1, overall))


def test_the_band_of_a_ratio_of_two_rows_by_their_backends():
    paired = PairedBands(Band(0.2, 20), {RING_DCQCN: Band(0.25, 20)}, Band(0.3, 190),
                         {(RING_DCQCN, RING_DCQCN): Band(0.05, 190)})
    bands = ErrorBands("packet", {"fluid": BackendBands(Band(0.3, 20), {}, paired=paired),
                                  "flow": BackendBands(Band(0.5, 20))})
    fluid, flow, packet = ("fluid", RING_DCQCN), ("flow", RING_DCQCN), ("packet", None)
    assert bands.pair_band(packet, packet) == 0.0  # two exact runs
    assert bands.pair_band(packet, fluid) == 0.25  # one exact run: the other's own error
    assert bands.pair_band(fluid, fluid) == 0.05  # two runs of one backend: their paired band
    assert bands.pair_band(fluid, flow) == pytest.approx(0.25 + math.log(1.5))  # not measured together: added
    assert bands.pair_band(("plugin", None), packet) == 0.0  # a backend without bands counts as exact


def test_no_matching_run_is_an_error():
    with pytest.raises(MoesimError, match="no run of the backend"):
        measure([[], []])


@pytest.mark.parametrize(("topology", "strategy", "network", "overrides", "family"), [
    ("6", "TP4EP8", "roce_dcqcn", (), Family("ring_direct", ONE_SERVER, ANY_NETWORK)),
    ("1", "TP2EP16", "roce_dcqcn", (), Family("ring_direct", SERVERS, "roce_dcqcn")),
    ("4", "TP16EP2", "ib_cc0", (), Family("ring_direct", SERVERS, "ib_cc0")),
    # congestion control on flows inside the server: the network mode matters there too
    ("6", "TP4EP8", "roce_hpcc", (("intra_server_cc", True),), Family("ring_direct", ONE_SERVER, "roce_hpcc")),
])
def test_the_family_of_a_study_run(topology, strategy, network, overrides, family):
    assert family_of(RunSpec("deepseek-v4-flash", topology, strategy, "ring_direct", network, "fluid",
                             overrides)) == family


def test_the_yaml_reads_back_as_written():
    errs = [(RING_DCQCN, 0.123456)] * 12 + [(DBT_CC0, 0.01)] * 3
    b = measure([errs], relative_cost=0.0312)
    paired = measure_paired([[errs]])
    paired = PairedBands(paired.single, paired.families, paired.pair, paired.pairs, mean_factor=0.51234)
    bands = ErrorBands("packet", {"fluid": BackendBands(b.overall, b.families, b.relative_cost, paired)},
                       {"date": "2026-01-01", "command": "x"})
    back = parse_bands(bands_yaml(bands), "test")
    fluid = back.backends["fluid"]
    assert fluid.paired is not None and fluid.paired.mean_factor == 0.5123
    assert set(fluid.paired.pairs) == set(paired.pairs) and fluid.paired.pairs[(DBT_CC0, RING_DCQCN)] == Band(
        round(math.log(1.123456) - math.log(1.01), 4), 36)
    assert fluid.families[RING_DCQCN].band == 0.1235 and fluid.families[RING_DCQCN].runs == 12
    assert fluid.relative_cost == 0.031 and back.provenance["date"] == "2026-01-01"
    assert back.band("fluid", DBT_CC0) == fluid.families[DBT_CC0].band
    assert back.band("fluid", Family("dbt_direct", SERVERS, "other_mode")) == fluid.overall.band
    assert back.band("packet", RING_DCQCN) == 0.0 and back.band("plugin", RING_DCQCN) is None


@pytest.mark.parametrize(("text", "field"), [
    ("backends: 3", "backends"),
    ("backends: {fluid: {band: -1}}", "backends.fluid.band"),
    ("backends: {fluid: {band: 0.1, families: [{algorithm: ring_direct}]}}", "backends.fluid.families[0]"),
    ("backends: {fluid: {band: 0.1, paired: 3}}", "backends.fluid.paired"),
    ("backends: {fluid: {band: 0.1, paired: {band: 0.1, pair_band: 0.2, pairs: [{a: [x, y], b: [x, y, z], band: 0}]}}}",
     "backends.fluid.paired.pairs[0].a"),
    ("backends: {fluid: {band: 0.1, paired: {band: 0.1, pair_band: 0.2, mean_factor: -1}}}",
     "backends.fluid.paired.mean_factor"),
])
def test_a_bad_bands_file_is_one_line_naming_the_field(text, field):
    with pytest.raises(MoesimError, match=re.escape(f"field '{field}'")) as exc:
        parse_bands(text, "bands.yaml")
    assert "\n" not in str(exc.value)


def test_the_shipped_bands_cover_every_backend_and_study_family():
    bands = load_bands()
    assert bands.reference == "packet" and set(bands.backends) == {"fluid", "flow", "analytical"}
    study = {Family(alg, SERVERS, net) for alg in ("ring_direct", "dbt_direct")
             for net in ("ib_cc0", "ib_hpcc", "roce_hpcc", "roce_dcqcn")}
    study |= {Family(alg, ONE_SERVER, ANY_NETWORK) for alg in ("ring_direct", "dbt_direct")}
    for name, b in bands.backends.items():
        assert set(b.families) == study, name
        assert all(0 <= f.band <= 10 and f.runs > 0 for f in b.families.values())
        assert b.relative_cost is not None and 0 < b.relative_cost < 1  # every fast tier is cheaper than packet
        assert b.paired is not None and set(b.paired.families) == study, name
        assert set(b.paired.pairs) == {pair_key(x, y) for x in study for y in study}, name
        assert 0 < b.paired.mean_factor <= 1.5 and all(0 <= p.band <= 10 for p in b.paired.pairs.values())
    assert {"date", "commit", "command", "references", "moesim_version"} <= set(bands.provenance)
    # the measured order of the tiers: packet, then fluid, flow, analytical
    assert sorted(["analytical", "flow", "packet", "fluid"], key=bands.exactness) == \
        ["packet", "fluid", "flow", "analytical"]
    assert bands.cost_factor("fluid", "packet") == pytest.approx(1 / bands.backends["fluid"].relative_cost)


def test_the_shipped_bands_were_fit_on_every_stored_packet_reference_as_it_is():
    import hashlib
    from pathlib import Path

    stored = Path(__file__).resolve().parents[2] / "benchmarks" / "reference"
    fit_on = {r["file"]: r["sha256"] for r in load_bands().provenance["references"]}
    assert fit_on == {f"benchmarks/reference/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest()
                      for p in sorted(stored.glob("*.parquet"))}


def test_the_provenance_names_the_repository_command_not_a_scratch_folder():
    from moesim.analysis.bands import ErrorBands

    b = ErrorBands("packet", {}, {"command": "python benchmarks/accuracy.py bands --store /tmp/scratch/x --workers 2 "
                                             "--out=/home/me/b.yaml"})
    text = b.describe(["packet"])
    assert "/tmp" not in text and "/home" not in text
    assert "`python benchmarks/accuracy.py bands --store DIR --workers 2 --out DIR`" in text
