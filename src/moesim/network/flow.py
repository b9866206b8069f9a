"""Flow-level backend ("flow"): concurrent flows share links max-min fairly (progressive filling).

Each flow loads its data path with its header overhead and its ACK path with its ACKs
(``moesim.network.paths``): on a ring step the reverse ACK stream shares the link with the next data
stream, which is what sets the reference's step time. Rates are recomputed whenever a flow starts or
drains. A flow completes one fixed latency (``FlowPath.latency_s``) after its last byte leaves.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from moesim.network.base import BACKENDS, Capabilities, Flow, NetworkBackend
from moesim.network.diagnostics import DiagnosticsSpec
from moesim.network.params import NetworkParams
from moesim.network.paths import PathModel
from moesim.network.waterfill import waterfill
from moesim.topology.model import Topology


@BACKENDS.register(
    "flow", "Flow-level max-min fair sharing with header and ACK overheads; blind to congestion control",
    "Bertsekas & Gallager, Data Networks, 6.5 (max-min fairness); docs/reference-semantics.md A.1",
)
class FlowBackend(NetworkBackend):
    """Max-min fair flow-level network. Active flows live in flat arrays (one row per flow, link ids
    and coefficients padded to a common width) so a reallocation is one numba call."""

    capabilities = Capabilities(fast_forward_in_flight=True, sections=("transport",))

    def __init__(self, topology: Topology, params: NetworkParams, diagnostics: DiagnosticsSpec | None = None) -> None:
        super().__init__(topology, params)
        self._paths = PathModel(topology, params)
        self._cap = self._paths.bw_Bps
        self._now = 0.0
        self._t_ref = 0.0  # remaining bytes are exact at this time (rates have not changed since)
        self._n = 0  # active flows occupy rows [0, n) of the arrays below (capacity grows by doubling)
        self._ids = np.zeros(16, dtype=np.int64)
        self._rem = np.zeros(16)
        self._rate = np.zeros(16)
        self._lat = np.zeros(16)
        self._links = np.zeros((16, 1), dtype=np.int64)
        self._coefs = np.zeros((16, 1))
        self._hops = np.zeros(16, dtype=np.int64)
        self._nfwd = np.zeros(16, dtype=np.int64)  # the first nfwd links of a row carry data, the rest ACKs
        self._dirty = False
        self._drain_s = math.inf
        # started since the last reallocation: (id, size, latency, link row, coefficient row, data hops)
        self._pending: list[tuple[int, float, float, np.ndarray, np.ndarray, int]] = []
        self._done: list[tuple[float, int, int]] = []  # (completion time, seq, flow id)
        self._seq = 0
        self.link_bytes = np.zeros(len(topology.links))

    @property
    def active_flows(self) -> int:
        return self._n + len(self._pending) + len(self._done)

    def start_flow(self, flow: Flow, now_s: float) -> None:
        self._now = max(self._now, now_s)
        fwd, rev, dc, ac, lat, row, coef_row = self._paths.describe(flow)
        self.link_bytes[row] += flow.size_bytes * coef_row
        if flow.size_bytes <= 0:
            self._push_done(now_s + lat, flow.flow_id)
            return
        self._pending.append((flow.flow_id, float(flow.size_bytes), lat, row, coef_row, len(fwd)))
        self._dirty = True

    def _push_done(self, t: float, flow_id: int) -> None:
        heapq.heappush(self._done, (t, self._seq, flow_id))
        self._seq += 1

    def _sync(self, t: float) -> None:
        """Bring remaining bytes to time ``t`` (rates are constant since ``_t_ref``)."""
        n = self._n
        if t > self._t_ref and n:
            self._rem[:n] -= self._rate[:n] * (t - self._t_ref)
        self._t_ref = max(self._t_ref, t)

    def _merge_pending(self) -> None:
        pend, self._pending = self._pending, []
        n, k = self._n, len(pend)
        width = max(self._links.shape[1], max(len(p[3]) for p in pend))
        if n + k > len(self._ids) or width > self._links.shape[1]:
            cap = max(2 * (n + k), len(self._ids))
            for name in ("_ids", "_rem", "_rate", "_lat", "_hops", "_nfwd"):
                old = getattr(self, name)
                new = np.zeros(cap, dtype=old.dtype)
                new[:n] = old[:n]
                setattr(self, name, new)
            for name in ("_links", "_coefs"):
                old = getattr(self, name)
                new = np.zeros((cap, width), dtype=old.dtype)
                new[:n, : old.shape[1]] = old[:n]
                setattr(self, name, new)
        for i, (fid, size, lat, row, coef_row, nfwd) in enumerate(pend, start=n):
            self._ids[i], self._rem[i], self._lat[i], self._hops[i], self._nfwd[i] = fid, size, lat, len(row), nfwd
            self._links[i, : len(row)] = row
            self._links[i, len(row):] = 0
            self._coefs[i, : len(row)] = coef_row
            self._coefs[i, len(row):] = 0.0
        self._n = n + k

    def _reallocate(self) -> None:
        """Bring bytes to now, add the flows started since, share the links anew."""
        if not self._dirty:
            return
        self._dirty = False
        self._sync(self._now)
        if self._pending:
            self._merge_pending()
        n = self._n
        if n:
            self._rate[:n] = waterfill(self._links[:n], self._coefs[:n], self._hops[:n], self._nfwd[:n], self._cap)
            self._drain_s = self._t_ref + float(np.min(self._rem[:n] / self._rate[:n]))
        else:
            self._drain_s = math.inf

    def next_completion_s(self, horizon_s: float | None = None) -> float:
        self._reallocate()
        t = self._drain_s
        if self._done:
            t = min(t, self._done[0][0])
        return t

    def advance_to(self, t_s: float) -> list[int]:
        self._reallocate()
        while self._drain_s <= t_s:
            td, n = self._drain_s, self._n
            self._sync(td)
            rem, rate = self._rem[:n], self._rate[:n]
            drained = rem / rate <= 1e-15 * max(td, 1e-9) + 1e-3 / rate
            for i in np.flatnonzero(drained):
                self._push_done(td + float(self._lat[i]), int(self._ids[i]))
            keep = np.flatnonzero(~drained)
            m = len(keep)
            for arr in (self._ids, self._rem, self._rate, self._lat, self._hops, self._nfwd, self._links, self._coefs):
                arr[:m] = arr[keep]
            self._n = m
            self._now = max(self._now, td)
            self._dirty = True
            self._reallocate()
        self._now = max(self._now, t_s)
        out = []
        while self._done and self._done[0][0] <= t_s:
            out.append(heapq.heappop(self._done)[2])
        return out

    def flow_state(self, now_s: float) -> dict[int, tuple[tuple[float, ...], tuple[float, ...]]]:
        """Active flows: (latency,), (bytes left now, rate); finished but unreported: (time to report,)."""
        self._reallocate()
        n = self._n
        rem_now = self._rem[:n] - self._rate[:n] * (now_s - self._t_ref)
        state: dict[int, tuple[tuple[float, ...], tuple[float, ...]]] = {
            fid: ((lat,), (rem, rate))
            for fid, lat, rem, rate in zip(self._ids[:n].tolist(), self._lat[:n].tolist(), rem_now.tolist(),
                                           self._rate[:n].tolist(), strict=True)
        }
        state.update((fid, ((t - now_s,), ())) for t, _, fid in self._done)
        return state

    def shift_time(self, delta_s: float) -> None:
        self._t_ref += delta_s
        self._now += delta_s
        self._drain_s += delta_s
        self._done = [(t + delta_s, seq, fid) for t, seq, fid in self._done]  # a uniform shift keeps heap order

    def diagnostics(self) -> dict[str, object]:
        return {"link_bytes": self.link_bytes.copy()}
