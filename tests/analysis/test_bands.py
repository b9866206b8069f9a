"""Error bands (moesim.analysis.bands): the quantile rule, the families of study runs, the shipped file."""

from __future__ import annotations

import re

import numpy as np
import pytest

from moesim.analysis.bands import (
    ANY_NETWORK,
    MIN_FAMILY_RUNS,
    ONE_SERVER,
    SERVERS,
    Band,
    ErrorBands,
    Family,
    bands_yaml,
    family_of,
    load_bands,
    measure,
    parse_bands,
)
from moesim.errors import MoesimError
from moesim.system.spec import RunSpec

RING_DCQCN = Family("ring_direct", SERVERS, "roce_dcqcn")
DBT_CC0 = Family("dbt_direct", SERVERS, "ib_cc0")
RING_ONE = Family("ring_direct", ONE_SERVER, ANY_NETWORK)


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
    b = measure([[(RING_DCQCN, 0.123456)] * 12 + [(DBT_CC0, 0.01)] * 3], relative_cost=0.0312)
    bands = ErrorBands("packet", {"fluid": b}, {"date": "2026-01-01", "command": "x"})
    back = parse_bands(bands_yaml(bands), "test")
    fluid = back.backends["fluid"]
    assert fluid.families[RING_DCQCN].band == 0.1235 and fluid.families[RING_DCQCN].runs == 12
    assert fluid.relative_cost == 0.031 and back.provenance["date"] == "2026-01-01"
    assert back.band("fluid", DBT_CC0) == fluid.families[DBT_CC0].band
    assert back.band("fluid", Family("dbt_direct", SERVERS, "other_mode")) == fluid.overall.band
    assert back.band("packet", RING_DCQCN) == 0.0 and back.band("plugin", RING_DCQCN) is None


@pytest.mark.parametrize(("text", "field"), [
    ("backends: 3", "backends"),
    ("backends: {fluid: {band: -1}}", "backends.fluid.band"),
    ("backends: {fluid: {band: 0.1, families: [{algorithm: ring_direct}]}}", "backends.fluid.families[0]"),
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
    assert {"date", "commit", "command", "references", "moesim_version"} <= set(bands.provenance)
    # the measured order of the tiers: packet, then fluid, flow, analytical
    assert sorted(["analytical", "flow", "packet", "fluid"], key=bands.exactness) == \
        ["packet", "fluid", "flow", "analytical"]
    assert bands.cost_factor("fluid", "packet") == pytest.approx(1 / bands.backends["fluid"].relative_cost)
