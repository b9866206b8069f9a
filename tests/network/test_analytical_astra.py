"""The analytical backend's ASTRA-sim model (``analytical_model = "astra"``): a flow alone costs the
route's link latencies plus payload / bottleneck bandwidth, truncated to whole ns, whatever else runs."""

from __future__ import annotations

import math

import pytest

from moesim.errors import MoesimError
from moesim.network.analytical import AnalyticalBackend
from moesim.network.base import Flow
from moesim.network.params import NetworkParams, network_mode
from moesim.topology.catalog import star_topology


def drain(backend: AnalyticalBackend) -> dict[int, float]:
    done = {}
    while (t := backend.next_completion_s()) < math.inf:
        for fid in backend.advance_to(t):
            done[fid] = t
    return done


@pytest.mark.parametrize("size", [1, 999, 32768, 2_097_153])
def test_latency_plus_size_over_bandwidth_truncated(size: int) -> None:
    """star: two 500 ns links of 400 Gb/s: ⌊1000 + size / 50⌋ ns, also with a second flow on the same links."""
    backend = AnalyticalBackend(star_topology(4), network_mode("astra"))
    backend.start_flow(Flow(0, 0, 1, size, False), 0.0)
    backend.start_flow(Flow(1, 2, 1, size, False), 0.0)
    done = drain(backend)
    expected_ns = math.floor(1000 + size / 50)
    assert done[0] * 1e9 == pytest.approx(expected_ns, abs=1e-6)
    assert done[1] == done[0]


def test_rdma_model_is_slower() -> None:
    """The default model adds headers, the ACK's way back and store-and-forward on top."""
    size = 1 << 20
    times = {}
    for mode in ("none", "astra"):
        backend = AnalyticalBackend(star_topology(2), network_mode(mode))
        backend.start_flow(Flow(0, 0, 1, size, False), 0.0)
        times[mode] = drain(backend)[0]
    assert times["none"] > times["astra"] * 1.03


def test_unknown_model_is_a_one_line_error() -> None:
    with pytest.raises(MoesimError, match="'analytical_model'.*rdma, astra"):
        NetworkParams().with_overrides({"analytical_model": "exact"})
