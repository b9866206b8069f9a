"""Fluid backend ("fluid"): the flow model plus queues, windows, ECN, PFC and DCQCN/HPCC rate control.

Between flow events the state is integrated with a fixed step (``FLUID_STEP_S``) while anything is
dynamic (a backlog, or a congestion-controlled flow whose rate moves) and in one jump to the next
drain otherwise. Per step (``fluid_kernel.fluid_step``): each flow offers min(CC rate, window/RTT
with queueing delay); its NIC serves its flows round-robin (max-min on its own port under the offers);
the network delivers the max-min fair allocation under those sending rates; the part sent above the
delivered rate at a bottleneck downstream of the sender's own port builds that port's backlog (an
unsaturated port drains); the backlog sets the ECN marking probability
(KMIN/KMAX/PMAX, RED-like) and the INT records; a backlog at the PFC dynamic threshold is held there
(a PAUSE event). The CC state machines are those of the packet backend (``moesim.network.cc``).
A flow completes one fixed latency (as in ``flow``) plus its path's queueing delay after it drains.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from moesim.network.base import BACKENDS, Flow, NetworkBackend
from moesim.network.cc import algorithm_for_mode
from moesim.network.cc.base import HOP_FIELDS, MAX_SLOTS
from moesim.network.flow import _PathModel
from moesim.network.fluid_kernel import (
    MODE_DCQCN,
    MODE_HPCC,
    MODE_NONE,
    fluid_run,
    fluid_step,
    is_dynamic,
    next_drain_dt,
)
from moesim.network.params import NetworkParams
from moesim.topology.model import NodeKind, Topology

FLUID_STEP_S = 1e-6
"""Integration step while the state is dynamic (about one base RTT of the study topologies)."""
HORIZON_STEPS = 32
"""While dynamic, ``next_completion_s`` looks at most this many steps ahead."""
MAX_HOP_RECORDS = 8
PFC_ALPHA_SHIFT = 3
"""The packet MMU's dynamic threshold is (free buffer) >> 3 per ingress (docs/network-packet.md)."""


class _Static:
    """Per-link constants: capacity, whether the port is a switch egress (queues, ECN, INT), thresholds."""

    def __init__(self, topology: Topology, params: NetworkParams) -> None:
        kinds = {n.name: n.kind for n in topology.nodes}
        n_in: dict[str, int] = {}
        for link in topology.links:
            n_in[link.dst] = n_in.get(link.dst, 0) + 1
        self.cap = np.array([link.bandwidth_bps / 8.0 for link in topology.links])
        self.switch_egress = np.array([kinds[link.src] != NodeKind.GPU for link in topology.links])
        self.kmin = np.array([params.kmin_bytes(link.bandwidth_bps) for link in topology.links])
        self.kmax = np.array([params.kmax_bytes(link.bandwidth_bps) for link in topology.links])
        # k congested ingress ports each pausing at Th = (B - used) / 8 hold used = B·k/(8 + k) in total
        a = float(1 << PFC_ALPHA_SHIFT)
        self.q_pfc = np.array([params.buffer_bytes * n_in.get(link.src, 1) / (a + n_in.get(link.src, 1))
                               for link in topology.links])


_COLUMNS: dict[str, tuple[tuple[int, ...], type]] = {
    "ids": ((), np.int64), "links": ((0,), np.int64), "coefs": ((0,), np.float64), "hops": ((), np.int64),
    "nfwd": ((), np.int64), "first": ((), np.int64), "cc_on": ((), np.bool_), "rem": ((), np.float64),
    "acked": ((), np.float64), "win": ((), np.float64), "rtt0": ((), np.float64), "dcoef": ((), np.float64),
    "line": ((), np.float64), "lat": ((), np.float64), "st": ((MAX_SLOTS,), np.float64),
    "hop": ((MAX_HOP_RECORDS, HOP_FIELDS), np.float64), "credit": ((), np.float64), "rates": ((), np.float64),
    "bn": ((), np.int64), "offered": ((), np.float64), "send": ((), np.float64),
}
"""Per-flow columns: shape after the row axis (``(0,)`` = as wide as the longest route) and dtype."""


class _FlowTable:
    """Flows in preallocated columns, one row per flow in start order (live, or retired by the kernel
    once drained until the next compaction); kernels see rows [0, n)."""

    def __init__(self) -> None:
        self.n = 0
        self.width = 1
        self._cols = {k: np.zeros((64, *(self.width if d == 0 else d for d in shape)), dtype=dtype)
                      for k, (shape, dtype) in _COLUMNS.items()}
        self._views: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if not self._views:
            self._views = {k: v[: self.n] for k, v in self._cols.items()}
        return self._views[name]

    def append(self, row: dict[str, object]) -> None:
        cols, width = self._cols, len(row["links"])
        if width > self.width:  # a longer route: widen the padded route columns
            for k in ("links", "coefs"):
                cols[k] = np.pad(cols[k], ((0, 0), (0, width - self.width)))
            self.width = width
        if self.n == len(cols["ids"]):
            for k, v in cols.items():
                cols[k] = np.concatenate([v, np.zeros_like(v)])
        for k, v in row.items():
            if k in ("links", "coefs"):
                cols[k][self.n, :width] = v
                cols[k][self.n, width:] = 0
            else:
                cols[k][self.n] = v
        self.n += 1
        self._views = {}

    def keep(self, mask: np.ndarray) -> None:
        """Keep the rows where ``mask`` (over rows [0, n)) is true, in order."""
        m = int(np.count_nonzero(mask))
        for v in self._cols.values():
            v[:m] = v[: self.n][mask]
        self.n = m
        self._views = {}


@BACKENDS.register(
    "fluid", "Fluid network: max-min sharing under CC/window offers, port backlogs, ECN, PFC, DCQCN/HPCC",
    "fluid models of RDMA CC (Zhu et al. CoNEXT 2016); the packet backend's CC state machines; docs/network-fluid.md",
)
class FluidBackend(NetworkBackend):
    """Congestion-aware fluid network; active flows live in flat arrays, one row per flow."""

    def __init__(self, topology: Topology, params: NetworkParams) -> None:
        super().__init__(topology, params)
        self._paths = _PathModel(topology, params)
        self._static = _Static(topology, params)
        self.cc = algorithm_for_mode(params.cc_mode)
        self._mode = {"dcqcn": MODE_DCQCN, "hpcc": MODE_HPCC}.get(self.cc.name, MODE_NONE)
        self._ccp = self.cc.pack_params(params)
        n_links = len(topology.links)
        self._q = np.zeros(n_links)
        self._tx = np.zeros(n_links)
        self._counters = np.zeros(3, dtype=np.int64)
        self._t = 0.0
        self._cols = _FlowTable()  # live flows and retired (drained) rows not yet compacted away
        self._live = 0
        self._args: tuple | None = None  # kernel arguments over the current flow table
        self._fresh = False  # rates valid for the current flow set and state
        self._done: list[tuple[float, int, int]] = []
        self._seq = 0
        self.link_bytes = np.zeros(n_links)
        self.steps = 0
        self._bdp: dict[tuple[int, ...], tuple[float, float]] = {}

    # ------------------------------------------------------------------ flow table
    def _window(self, fwd: tuple[int, ...]) -> tuple[float, float]:
        """The packet backend's per-pair window and base RTT: rtt = 2Σdelay + Σ⌊payload·8e9/bw⌋ ns,
        bdp = rtt·min bw/8 (build.py)."""
        hit = self._bdp.get(fwd)
        if hit is None:
            links = self.topology.links
            payload = self.params.packet_payload_bytes
            rtt_ns = sum(2 * int(round(links[i].delay_s * 1e9)) + math.floor(payload * 8e9 / links[i].bandwidth_bps)
                         for i in fwd)
            bw = min(links[i].bandwidth_bps for i in fwd)
            hit = self._bdp[fwd] = (float(int(rtt_ns * bw / 1e9 / 8)) if self.params.has_win else 0.0, rtt_ns * 1e-9)
        return hit

    def _add(self, flow: Flow, fwd: tuple[int, ...], dc: float, lat: float, row: np.ndarray,
             coef_row: np.ndarray) -> None:
        cc_on = bool(flow.cc) and self._mode != MODE_NONE
        win, rtt0 = self._window(fwd)
        line_bps = self.topology.links[fwd[0]].bandwidth_bps
        st = np.zeros(MAX_SLOTS)
        hop = np.zeros((MAX_HOP_RECORDS, HOP_FIELDS))
        (self.cc if cc_on else algorithm_for_mode(0)).init(st, hop, self._ccp if cc_on else np.zeros(1), line_bps)
        self._cols.append({
            "ids": flow.flow_id, "links": row, "coefs": coef_row, "hops": len(row), "nfwd": len(fwd),
            "first": fwd[0], "cc_on": cc_on, "rem": float(flow.size_bytes), "acked": 0.0, "win": win,
            "rtt0": rtt0, "dcoef": dc, "line": line_bps / 8.0 / dc, "lat": lat, "st": st, "hop": hop,
            "credit": 0.0, "rates": 0.0, "bn": -1, "offered": 0.0, "send": 0.0,
        })
        self._args = None

    # ------------------------------------------------------------------ integration
    def _kernel_args(self) -> tuple:
        """The arguments ``fluid_kernel`` functions take after the time arguments (views of the table)."""
        if self._args is not None:
            return self._args
        c, s, p = self._cols, self._static, self.params
        self._args = (
            self._mode, bool(p.enable_qcn), bool(p.has_win), bool(p.var_win), float(p.packet_payload_bytes),
            c["links"], c["coefs"], c["hops"], c["nfwd"], c["first"], c["cc_on"], c["rem"], c["acked"], c["win"],
            c["rtt0"], c["dcoef"], c["line"], c["st"], c["hop"], self._ccp, c["credit"], c["rates"], c["bn"],
            c["offered"], c["send"], s.cap, self._q, s.q_pfc, self._tx, s.kmin, s.kmax, float(p.pmax),
            s.switch_egress, self._counters,
        )
        return self._args

    def _refresh(self) -> None:
        """Rates for the current flow set and state, before any time passes."""
        if not self._fresh and self._live:
            fluid_step(0.0, self._t, *self._kernel_args())
            self._fresh = True
            self.steps += 1

    def _dynamic(self) -> bool:
        c = self._cols
        return is_dynamic(self._mode, self._q, c["send"], c["rates"], c["cc_on"], c["st"])

    def _next_drain_dt(self) -> float:
        c = self._cols
        return next_drain_dt(c["rem"], c["send"]) if self._live else math.inf

    def _push_done(self, t: float, flow_id: int) -> None:
        heapq.heappush(self._done, (t, self._seq, flow_id))
        self._seq += 1

    def _run_to(self, t_s: float) -> None:
        if self._t >= t_s:
            return
        if self._live:
            c = self._cols
            self._t, steps, self._fresh, self._live, ids, times = fluid_run(
                self._t, t_s, self._fresh, self._live, FLUID_STEP_S, c["ids"], c["lat"], *self._kernel_args())
            self.steps += steps
            for flow_id, t in zip(ids.tolist(), times.tolist(), strict=True):
                self._push_done(t, flow_id)
            if 2 * self._live < c.n:  # retired rows outnumber live ones: compact
                c.keep(c["rem"] < math.inf)
                self._args = None
        if not self._live and self._t < t_s:
            if np.any(self._q > 0.0):  # drain backlogs of departed flows
                self._q[:] = np.maximum(self._q - self._static.cap * (t_s - self._t), 0.0)
            self._t = t_s

    # ------------------------------------------------------------------ NetworkBackend
    @property
    def active_flows(self) -> int:
        return self._live + len(self._done)

    def start_flow(self, flow: Flow, now_s: float) -> None:
        self._run_to(now_s)
        fwd, rev, dc, ac, lat, row, coef_row = self._paths.describe(flow)
        self.link_bytes[row] += flow.size_bytes * coef_row
        if flow.size_bytes <= 0:
            self._push_done(now_s + lat, flow.flow_id)
            return
        self._add(flow, fwd, dc, lat, row, coef_row)
        self._live += 1
        self._fresh = False

    def next_completion_s(self, horizon_s: float | None = None) -> float:
        self._refresh()
        t = self._t + self._next_drain_dt()
        if self._live and self._dynamic():
            t = min(t, self._t + HORIZON_STEPS * FLUID_STEP_S)
        if self._done:
            t = min(t, self._done[0][0])
        return max(t, self._t) if self._done or self._live else math.inf

    def advance_to(self, t_s: float) -> list[int]:
        self._run_to(t_s)
        out = []
        while self._done and self._done[0][0] <= t_s:
            out.append(heapq.heappop(self._done)[2])
        return out

    def diagnostics(self) -> dict[str, object]:
        return {"link_bytes": self.link_bytes.copy(), "pause_events": int(self._counters[0]),
                "cnps": int(self._counters[1]), "int_updates": int(self._counters[2]), "steps": self.steps,
                "queue_bytes": self._q.copy()}
