"""Analytical backend ("analytical"): no contention, each flow alone at its path's bottleneck rate.

Instant screening: a flow completes its path's fixed latency plus size × overhead / bottleneck bandwidth
after it starts (``moesim.network.paths``). With ``analytical_model = "astra"`` it is ASTRA-sim 2.0's
congestion-unaware analytical network instead: the route's link latencies plus size / bottleneck
bandwidth, no headers, no ACKs, truncated to whole ns as ASTRA-sim schedules it
(``astra-sim/network_frontend/analytical``, congestion_unaware).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from moesim.network.base import BACKENDS, Capabilities, Flow, NetworkBackend
from moesim.network.diagnostics import DiagnosticsSpec
from moesim.network.params import NetworkParams
from moesim.network.paths import PathModel
from moesim.topology.model import Topology


@BACKENDS.register(
    "analytical", "No contention: each flow alone at its path's bottleneck rate (instant screening)",
    "closed form per transfer: latency + size·overhead/bottleneck bandwidth",
)
class AnalyticalBackend(NetworkBackend):
    """Every flow gets its bottleneck bandwidth as if alone on the network."""

    capabilities = Capabilities(fast_forward_in_flight=True, sections=("transport", "analytical"))

    def __init__(self, topology: Topology, params: NetworkParams, diagnostics: DiagnosticsSpec | None = None) -> None:
        super().__init__(topology, params)
        self._paths = PathModel(topology, params)
        self._astra = params.analytical.analytical_model == "astra"
        self._done: list[tuple[float, int, int]] = []
        self._seq = 0
        self.link_bytes = np.zeros(len(topology.links))

    @property
    def active_flows(self) -> int:
        return len(self._done)

    def start_flow(self, flow: Flow, now_s: float) -> None:
        fwd, rev, dc, ac, lat, row, coef_row = self._paths.describe(flow)
        bw = float(self._paths.bw_Bps[list(fwd)].min()) if fwd else math.inf
        if self._astra:
            self.link_bytes[list(fwd)] += flow.size_bytes
            t = now_s + _whole_ns(float(self._paths.delay_s[list(fwd)].sum()) + flow.size_bytes / bw)
        else:
            self.link_bytes[row] += flow.size_bytes * coef_row
            t = now_s + lat + flow.size_bytes * dc / bw
        heapq.heappush(self._done, (t, self._seq, flow.flow_id))
        self._seq += 1

    def next_completion_s(self, horizon_s: float | None = None) -> float:
        return self._done[0][0] if self._done else math.inf

    def advance_to(self, t_s: float) -> list[int]:
        out = []
        while self._done and self._done[0][0] <= t_s:
            out.append(heapq.heappop(self._done)[2])
        return out

    def flow_state(self, now_s: float) -> dict[int, tuple[tuple[float, ...], tuple[float, ...]]]:
        return {fid: ((t - now_s,), ()) for t, _, fid in self._done}

    def shift_time(self, delta_s: float) -> None:
        self._done = [(t + delta_s, seq, fid) for t, seq, fid in self._done]

    def diagnostics(self) -> dict[str, object]:
        return {"link_bytes": self.link_bytes.copy()}


def _whole_ns(delay_s: float) -> float:
    """A delay truncated to whole ns (ASTRA-sim's integer tick), robust to the float error of s → ns."""
    return math.floor(delay_s * 1e9 + 1e-6) * 1e-9
