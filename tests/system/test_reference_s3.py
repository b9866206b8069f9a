"""NS3_REFERENCE_RUNS.md scenario S3: ASTRA-sim's own microbenchmark ET files, read and simulated.

The reference completion times come from ASTRA-sim + NS-3 (no congestion control). The flow-level
backend must land within 2 % on every collective and size."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import star

from moesim.network.flow import FlowBackend
from moesim.network.params import REFERENCE_PRESETS
from moesim.system.engine import SystemSettings, simulate
from moesim.workload.chakra import read_et

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "chakra" / "astra-sim-microbenchmarks"
REFERENCE_NS = {
    ("all_reduce", 4): 83_704, ("all_reduce", 8): 154_096, ("all_reduce", 16): 287_080,
    ("reduce_scatter", 4): 42_592, ("reduce_scatter", 8): 77_908, ("reduce_scatter", 16): 144_460,
    ("all_gather", 4): 93_088, ("all_gather", 8): 217_152, ("all_gather", 16): 465_280,
    ("all_to_all", 4): 25_280, ("all_to_all", 8): 28_164, ("all_to_all", 16): 29_604,
}
SETTINGS = SystemSettings(roofline=False, all_reduce=("ring",), all_to_all=("direct",),
                          all_gather=("ring",), reduce_scatter=("ring",))


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="shared/ fixtures not present beside the checkout")
@pytest.mark.parametrize("collective,n", sorted(REFERENCE_NS))
def test_s3_microbenchmarks_match_the_reference(collective, n):
    workload = read_et(FIXTURES / collective / f"{n}npus_1MB")
    topo = star(n)
    times = simulate(workload, topo, FlowBackend(topo, REFERENCE_PRESETS["none"]), SETTINGS)
    assert max(t.wall_s for t in times) * 1e9 == pytest.approx(REFERENCE_NS[(collective, n)], rel=0.02)
