"""Flow-level backend: concurrent flows share links max-min fairly (progressive filling).

A flow of S payload bytes occupies every link of its route with (payload + headers)/payload wire bytes
per payload byte, and every link of the reverse route with ACK bytes per payload byte (the reference
ACKs every 1000 B packet with a 48 B ACK, REFERENCE_SEMANTICS.md A.1): on a ring step the reverse
ACK stream shares the link with the next data stream, which is what sets the reference's step time.
Rates are recomputed whenever a flow starts or drains. A flow completes (its sender holds the final
ACK) one fixed latency after its last byte leaves: forward and reverse propagation plus the
store-and-forward of the last packet and of its ACK on every further hop.
"""

from __future__ import annotations

import heapq
import math

import numpy as np
from numba import njit

from moesim.network.base import BACKENDS, Flow, NetworkBackend
from moesim.network.jit import helper
from moesim.network.params import NetworkParams
from moesim.topology.model import Topology


@njit(cache=True)
def waterfill_capped(links, coefs, hops, nfwd, cap, demand_cap, rates, bottleneck):
    """Weighted progressive filling where flow f never exceeds ``demand_cap[f]`` (its CC/window rate).

    A flow's first ``nfwd[f]`` hops carry its data, the rest its ACKs. ACK bytes take link capacity but
    never freeze a flow: the NIC sends ACKs first and a switch's FIFO serves them as they arrive
    (REFERENCE_SEMANTICS.md A.1, A.2), so a data stream is not held to the fair share of a link that
    only carries its ACKs (measured at packet level: docs/network.md).
    Writes rates and, per flow, the link that froze it (-1 when its own cap did)."""
    n, n_links = links.shape[0], cap.shape[0]
    waterfill_into(links, coefs, hops, nfwd, cap, demand_cap, rates, bottleneck, np.empty(n, dtype=np.bool_),
                   np.empty((3, n_links)), np.empty(n_links, dtype=np.bool_))


@helper
def waterfill_into(links, coefs, hops, nfwd, cap, demand_cap, rates, bottleneck, frozen, work, carries_data):
    """``waterfill_capped`` in caller-provided scratch (no allocation, for kernels compiled without
    reference counting): ``frozen`` (≥ n flows), ``work`` (3 × links) and ``carries_data`` (links)."""
    n, n_links = links.shape[0], cap.shape[0]
    frozen[:n] = False
    used, demand, level = work[0], work[1], work[2]
    used[:] = 0.0
    left = n
    while left > 0:
        demand[:] = 0.0
        carries_data[:] = False
        for f in range(n):
            if not frozen[f]:
                for h in range(hops[f]):
                    demand[links[f, h]] += coefs[f, h]
                for h in range(nfwd[f]):
                    carries_data[links[f, h]] = True
        x = np.inf
        for k in range(n_links):
            level[k] = max(cap[k] - used[k], 0.0) / demand[k] if carries_data[k] else np.inf
            if level[k] < x:
                x = level[k]
        # Every flow capped clearly below the lowest link level is frozen at its cap in one pass:
        # freezing a flow below a link's level only raises that level, so the order does not matter.
        # (One pass per distinct cap made this O(n²) when CC gives every flow its own rate.)
        below = 0
        for f in range(n):
            if not frozen[f] and demand_cap[f] * (1.0 + 1e-12) < x:
                frozen[f] = True
                rates[f] = demand_cap[f]
                bottleneck[f] = -1
                below += 1
                for h in range(hops[f]):
                    used[links[f, h]] += coefs[f, h] * rates[f]
        if below > 0:
            left -= below
            continue
        for f in range(n):
            if not frozen[f] and demand_cap[f] < x:
                x = demand_cap[f]
        threshold = x * (1.0 + 1e-12)
        for f in range(n):
            if frozen[f]:
                continue
            hit = -2
            for h in range(nfwd[f]):
                if level[links[f, h]] <= threshold:
                    hit = links[f, h]
                    break
            if hit == -2 and demand_cap[f] <= threshold:
                hit = -1
            if hit != -2:
                frozen[f] = True
                rates[f] = min(x, demand_cap[f])
                bottleneck[f] = hit
                left -= 1
                for h in range(hops[f]):
                    used[links[f, h]] += coefs[f, h] * rates[f]


def _waterfill(links: np.ndarray, coefs: np.ndarray, hops: np.ndarray, nfwd: np.ndarray,
               cap: np.ndarray) -> np.ndarray:
    """Uncapped progressive filling over padded per-flow link rows (the flow backend's allocation)."""
    n = links.shape[0]
    rates = np.zeros(n)
    waterfill_capped(links, coefs, hops, nfwd, cap, np.full(n, np.inf), rates, np.zeros(n, dtype=np.int64))
    return rates


def max_min_rates(inc_flow: np.ndarray, inc_link: np.ndarray, inc_coef: np.ndarray, n_flows: int,
                  cap: np.ndarray) -> np.ndarray:
    """Weighted progressive filling: raise all unfrozen flows' rates together; when a link saturates,
    freeze the flows crossing it. Constraint per link l: Σ_f coef(f, l)·rate_f ≤ cap_l.

    The incidences are given as parallel arrays (flow index, link index, coefficient)."""
    hops = np.bincount(inc_flow, minlength=n_flows).astype(np.int64)
    width = max(int(hops.max()) if n_flows else 0, 1)
    links = np.zeros((n_flows, width), dtype=np.int64)
    coefs = np.zeros((n_flows, width))
    fill = np.zeros(n_flows, dtype=np.int64)
    for f, k, c in zip(inc_flow.tolist(), inc_link.tolist(), inc_coef.tolist(), strict=True):
        links[f, fill[f]] = k
        coefs[f, fill[f]] = c
        fill[f] += 1
    return _waterfill(links, coefs, hops, hops, cap.astype(np.float64))


_Described = tuple[tuple[int, ...], tuple[int, ...], float, float, float, np.ndarray, np.ndarray]


class _PathModel:
    """Per-(route, size) constants shared by the flow and analytical backends."""

    def __init__(self, topology: Topology, params: NetworkParams) -> None:
        self.topology = topology
        self.params = params
        self.bw_Bps = np.array([link.bandwidth_bps / 8.0 for link in topology.links])
        self.delay_s = np.array([link.delay_s for link in topology.links])

        self._cache: dict[tuple[int, int, tuple[int, ...], bool, int], _Described] = {}
        self._by_pair: dict[tuple[int, int, bool, int], _Described] = {}

    def describe(self, flow: Flow) -> _Described:
        """(forward links, reverse links, data coefficient, ACK coefficient, fixed latency in s, link
        row, coefficient row); cached per route, policy and last-packet size, and looked up by GPU pair
        where the pair has a single route (no ECMP choice by flow id to make)."""
        last = min(self.params.packet_payload_bytes, flow.size_bytes)
        pair = (flow.src_gpu, flow.dst_gpu, flow.cc, last)
        hit = self._by_pair.get(pair)
        if hit is not None:
            return hit
        fwd = self.topology.route(flow.src_gpu, flow.dst_gpu, flow.flow_id)
        key = (flow.src_gpu, flow.dst_gpu, fwd, flow.cc, last)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._describe(flow, fwd)
        if len(self.topology.routes(flow.src_gpu, flow.dst_gpu)) == 1:
            self._by_pair[pair] = hit
        return hit

    def _describe(self, flow: Flow, fwd: tuple[int, ...]) -> _Described:
        p = self.params
        rev = self.topology.reverse_route(fwd)
        int_bytes = p.int_bytes if flow.cc else 0
        payload = p.packet_payload_bytes
        data_coef = (payload + p.data_header_bytes + int_bytes) / payload
        ack_bytes = p.ack_bytes + max(0, int_bytes - 14)  # INT fills the ACK's padding first
        ack_coef = ack_bytes / payload
        last_pkt = min(payload, max(flow.size_bytes, 1)) + p.data_header_bytes + int_bytes
        lat = float(self.delay_s[list(fwd)].sum() + self.delay_s[list(rev)].sum())
        lat += sum(last_pkt / self.bw_Bps[i] for i in fwd[1:]) + sum(ack_bytes / self.bw_Bps[i] for i in rev)
        row = np.array(fwd + rev, dtype=np.int64)
        coef_row = np.array([data_coef] * len(fwd) + [ack_coef] * len(rev))
        return fwd, rev, data_coef, ack_coef, lat, row, coef_row


@BACKENDS.register(
    "flow", "Flow-level max-min fair sharing with header and ACK overheads; blind to congestion control",
    "Bertsekas & Gallager, Data Networks, 6.5 (max-min fairness); REFERENCE_SEMANTICS.md A.1",
)
class FlowBackend(NetworkBackend):
    """Max-min fair flow-level network. Active flows live in flat arrays (one row per flow, link ids
    and coefficients padded to a common width) so a reallocation is one numba call."""

    def __init__(self, topology: Topology, params: NetworkParams) -> None:
        super().__init__(topology, params)
        self._paths = _PathModel(topology, params)
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
            self._rate[:n] = _waterfill(self._links[:n], self._coefs[:n], self._hops[:n], self._nfwd[:n], self._cap)
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


@BACKENDS.register(
    "analytical", "No contention: each flow alone at its path's bottleneck rate (instant screening)",
    "closed form per transfer: latency + size·overhead/bottleneck bandwidth",
)
class AnalyticalBackend(NetworkBackend):
    """Every flow gets its bottleneck bandwidth as if alone on the network."""

    def __init__(self, topology: Topology, params: NetworkParams) -> None:
        super().__init__(topology, params)
        self._paths = _PathModel(topology, params)
        self._done: list[tuple[float, int, int]] = []
        self._seq = 0
        self.link_bytes = np.zeros(len(topology.links))

    @property
    def active_flows(self) -> int:
        return len(self._done)

    def start_flow(self, flow: Flow, now_s: float) -> None:
        fwd, rev, dc, ac, lat, row, coef_row = self._paths.describe(flow)
        self.link_bytes[row] += flow.size_bytes * coef_row
        bw = float(self._paths.bw_Bps[list(fwd)].min()) if fwd else math.inf
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
