"""Scenario runners for the packet backend: an 8-to-1 incast on one switch, sampled every few µs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from helpers import star

from moesim.network.base import Flow
from moesim.network.diagnostics import DiagnosticsSpec
from moesim.network.packet import PacketBackend
from moesim.network.params import REFERENCE_PRESETS, NetworkParams


@dataclass
class Incast:
    """Per sampling step: per-flow payload throughput (b/s) and rate (b/s); the bottleneck queue samples."""

    backend: PacketBackend
    step_ns: int
    times_ns: list[int] = field(default_factory=list)
    goodput: list[list[float]] = field(default_factory=list)
    rates: list[list[float]] = field(default_factory=list)
    queue_t: np.ndarray | None = None
    queue_b: np.ndarray | None = None
    sizes: list[int] = field(default_factory=list)

    def window(self, t0_ns: int, t1_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """(goodput, rate) arrays [steps, flows] for steps ending in (t0, t1] while all flows run."""
        sel = [i for i, t in enumerate(self.times_ns) if t0_ns < t <= t1_ns and len(self.goodput[i]) == len(self.sizes)]
        return np.array([self.goodput[i] for i in sel]), np.array([self.rates[i] for i in sel])

    def queue(self, t0_ns: int, t1_ns: int) -> np.ndarray:
        m = (self.queue_t > t0_ns) & (self.queue_t <= t1_ns)
        return self.queue_b[m]


def run_incast(params: NetworkParams, size_bytes: int, n: int = 8, step_ns: int = 2000,
               sample_ns: int = 100) -> Incast:
    topo = star(n + 1)
    spec = DiagnosticsSpec(pfc=True, qlen=True, fct=True, qlen_interval_s=sample_ns * 1e-9, qlen_min_bytes=0,
                           qlen_window_s=(0.0, 0.01))
    backend = PacketBackend(topo, params, diagnostics=spec)
    for i in range(n):
        backend.start_flow(Flow(i, i, n, size_bytes), 0.0)
    res = Incast(backend, step_ns, sizes=[size_bytes] * n)
    prev: dict[int, int] = {}
    t = 0
    while backend.active_flows:
        t += step_ns
        while backend.advance_to(t * 1e-9):
            pass
        prog = backend.flow_progress()
        res.times_ns.append(t)
        res.goodput.append([(prog[f][0] - prev.get(f, 0)) * 8 / (step_ns * 1e-9) for f in sorted(prog)])
        res.rates.append([prog[f][1] for f in sorted(prog)])
        prev = {f: prog[f][0] for f in prog}
        assert t < 1e8, "incast did not finish"
    bottleneck = next(link.id for link in topo.links if link.src == "sw" and link.dst == f"h{n}")
    q = backend.tables()["qlen"].to_pydict()
    links = np.array(q["link"])
    res.queue_t = np.array(q["time_ns"])[links == bottleneck]
    res.queue_b = np.array(q["bytes"])[links == bottleneck]
    return res


@pytest.fixture(scope="session")
def incast_none() -> Incast:
    """No CC and no window (the windowed none preset never fills the buffer): PFC must hold the line."""
    return run_incast(REFERENCE_PRESETS["none"].with_overrides({"has_win": False}), 3_000_000)


@pytest.fixture(scope="session")
def incast_hpcc() -> Incast:
    return run_incast(REFERENCE_PRESETS["hpcc"], 2_000_000)


@pytest.fixture(scope="session")
def incast_dcqcn() -> Incast:
    return run_incast(REFERENCE_PRESETS["dcqcn"], 2_000_000)
