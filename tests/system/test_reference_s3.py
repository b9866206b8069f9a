"""docs/reference-runs.md scenario S3: ASTRA-sim's own microbenchmark ET files, read and simulated.

The reference completion times come from ASTRA-sim + NS-3 under its three per-mode presets (no
congestion control, DCQCN, HPCC). The packet backend implements the reference's RDMA model, so it
must give every completion time to the nanosecond; the fluid backend must land within 2 % in every
mode; the flow backend, which is blind to congestion control, within 2 % of the mode without it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import star

from moesim.network.flow import FlowBackend
from moesim.network.fluid import FluidBackend
from moesim.network.packet import PacketBackend
from moesim.network.params import REFERENCE_PRESETS
from moesim.system.engine import SystemSettings
from moesim.system.run import simulate
from moesim.workload.chakra import read_et

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "chakra" / "astra-sim-microbenchmarks"
MODES = ("none", "dcqcn", "hpcc")
REFERENCE_NS = {  # (collective, hosts): completion ns under the presets none, dcqcn, hpcc
    ("all_reduce", 4): (83_704, 83_704, 85_912), ("all_reduce", 8): (154_096, 154_096, 156_112),
    ("all_reduce", 16): (287_080, 287_080, 289_480),
    ("reduce_scatter", 4): (42_592, 42_592, 43_696), ("reduce_scatter", 8): (77_908, 77_908, 78_916),
    ("reduce_scatter", 16): (144_460, 144_460, 145_660),
    ("all_gather", 4): (93_088, 93_088, 98_944), ("all_gather", 8): (217_152, 217_152, 230_816),
    ("all_gather", 16): (465_280, 465_280, 494_560),
    ("all_to_all", 4): (25_280, 25_280, 26_712), ("all_to_all", 8): (28_164, 28_164, 29_860),
    ("all_to_all", 16): (29_604, 29_604, 31_468),
}
SETTINGS = SystemSettings(roofline=False, all_reduce=("ring",), all_to_all=("direct",),
                          all_gather=("ring",), reduce_scatter=("ring",))


def completion_ns(backend_cls, collective: str, n: int, mode: str) -> float:
    workload = read_et(FIXTURES / collective / f"{n}npus_1MB")
    topo = star(n)
    times = simulate(workload, topo, backend_cls(topo, REFERENCE_PRESETS[mode]), SETTINGS)
    return max(t.wall_s for t in times) * 1e9


@pytest.mark.parametrize("collective,n", sorted(REFERENCE_NS))
def test_flow_backend_matches_the_reference_without_cc(collective, n):
    assert completion_ns(FlowBackend, collective, n, "none") == pytest.approx(REFERENCE_NS[(collective, n)][0], rel=0.02)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("collective,n", sorted(REFERENCE_NS))
def test_packet_backend_gives_the_reference_to_the_ns(collective, n, mode):
    got = completion_ns(PacketBackend, collective, n, mode)
    assert round(got) == REFERENCE_NS[(collective, n)][MODES.index(mode)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("collective,n", sorted(REFERENCE_NS))
def test_fluid_backend_is_within_2_percent_of_the_reference(collective, n, mode):
    got = completion_ns(FluidBackend, collective, n, mode)
    assert got == pytest.approx(REFERENCE_NS[(collective, n)][MODES.index(mode)], rel=0.02)
