"""Fluid backend ("fluid"): the flow model plus queues, windows, ECN, PFC and DCQCN/HPCC rate control.

Between flow events the state is integrated with a fixed step (``FLUID_STEP_S``) while anything is
dynamic (a backlog, or a congestion-controlled flow whose rate moves) and in one jump to the next
drain otherwise. Per step (``fluid_kernel.fluid_step``): each flow offers min(CC rate, window/RTT
with queueing delay); the network delivers the max-min fair allocation under those offers; the part
of the offer above the delivered rate at a bottleneck downstream of the sender's own port builds that
port's backlog (an unsaturated port drains); the backlog sets the ECN marking probability
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
        self._width = 1
        self._cols: dict[str, np.ndarray] = {}
        self._reset_cols()
        self._fresh = False  # rates valid for the current flow set and state
        self._done: list[tuple[float, int, int]] = []
        self._seq = 0
        self.link_bytes = np.zeros(n_links)
        self.steps = 0
        self._bdp: dict[tuple[int, ...], tuple[float, float]] = {}

    # ------------------------------------------------------------------ flow table
    def _reset_cols(self) -> None:
        z = np.zeros
        self._cols = {
            "ids": z(0, dtype=np.int64), "links": z((0, self._width), dtype=np.int64), "coefs": z((0, self._width)),
            "hops": z(0, dtype=np.int64), "nfwd": z(0, dtype=np.int64), "first": z(0, dtype=np.int64),
            "cc_on": z(0, dtype=np.bool_), "rem": z(0), "acked": z(0), "win": z(0), "rtt0": z(0), "dcoef": z(0),
            "line": z(0), "lat": z(0), "st": z((0, MAX_SLOTS)), "hop": z((0, MAX_HOP_RECORDS, HOP_FIELDS)),
            "credit": z(0), "rates": z(0), "bn": z(0, dtype=np.int64), "offered": z(0), "send": z(0),
        }

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

    def _add(self, flow: Flow) -> None:
        fwd, rev, dc, ac, lat, row, coef_row = self._paths.describe(flow)
        cc_on = bool(flow.cc) and self._mode != MODE_NONE
        win, rtt0 = self._window(fwd)
        line_bps = self.topology.links[fwd[0]].bandwidth_bps
        st = np.zeros(MAX_SLOTS)
        hop = np.zeros((MAX_HOP_RECORDS, HOP_FIELDS))
        (self.cc if cc_on else algorithm_for_mode(0)).init(st, hop, self._ccp if cc_on else np.zeros(1), line_bps)
        width = len(row)
        c = self._cols
        if width > self._width:
            pad = width - self._width
            c["links"] = np.pad(c["links"], ((0, 0), (0, pad)))
            c["coefs"] = np.pad(c["coefs"], ((0, 0), (0, pad)))
            self._width = width
        lrow = np.zeros((1, self._width), dtype=np.int64)
        crow = np.zeros((1, self._width))
        lrow[0, :width] = row
        crow[0, :width] = coef_row
        add = {
            "ids": [flow.flow_id], "links": lrow, "coefs": crow, "hops": [width], "nfwd": [len(fwd)],
            "first": [fwd[0]], "cc_on": [cc_on], "rem": [float(flow.size_bytes)], "acked": [0.0], "win": [win],
            "rtt0": [rtt0], "dcoef": [dc], "line": [line_bps / 8.0 / dc], "lat": [lat], "st": st[None, :],
            "hop": hop[None, :, :], "credit": [0.0], "rates": [0.0], "bn": [-1], "offered": [0.0], "send": [0.0],
        }
        for k, v in add.items():
            c[k] = np.concatenate([c[k], np.asarray(v, dtype=c[k].dtype)])

    def _drop(self, keep: np.ndarray) -> None:
        for k in self._cols:
            self._cols[k] = self._cols[k][keep]

    # ------------------------------------------------------------------ integration
    def _kernel_args(self) -> tuple:
        """The arguments ``fluid_kernel`` functions take after the time arguments."""
        c, s, p = self._cols, self._static, self.params
        return (
            self._mode, bool(p.enable_qcn), bool(p.has_win), bool(p.var_win), float(p.packet_payload_bytes),
            c["links"], c["coefs"], c["hops"], c["nfwd"], c["first"], c["cc_on"], c["rem"], c["acked"], c["win"],
            c["rtt0"], c["dcoef"], c["line"], c["st"], c["hop"], self._ccp, c["credit"], c["rates"], c["bn"],
            c["offered"], c["send"], s.cap, self._q, s.q_pfc, self._tx, s.kmin, s.kmax, float(p.pmax),
            s.switch_egress, self._counters,
        )

    def _refresh(self) -> None:
        """Rates for the current flow set and state, before any time passes."""
        if not self._fresh and len(self._cols["ids"]):
            fluid_step(0.0, self._t, *self._kernel_args())
            self._fresh = True
            self.steps += 1

    def _dynamic(self) -> bool:
        c = self._cols
        return is_dynamic(self._mode, self._q, c["send"], c["rates"], c["cc_on"], c["st"])

    def _next_drain_dt(self) -> float:
        c = self._cols
        return next_drain_dt(c["rem"], c["send"]) if len(c["ids"]) else math.inf

    def _collect_drained(self) -> None:
        c = self._cols
        drained = c["rem"] <= 1e-3
        if not np.any(drained):
            return
        s = self._static
        for i in np.flatnonzero(drained):
            fwd = c["links"][i, : c["nfwd"][i]]
            qdelay = float(np.sum(self._q[fwd] / s.cap[fwd]))
            self._push_done(self._t + float(c["lat"][i]) + qdelay, int(c["ids"][i]))
        self._drop(~drained)
        self._fresh = False

    def _push_done(self, t: float, flow_id: int) -> None:
        heapq.heappush(self._done, (t, self._seq, flow_id))
        self._seq += 1

    def _run_to(self, t_s: float) -> None:
        while self._t < t_s:
            if not len(self._cols["ids"]):
                if np.any(self._q > 0.0):  # drain backlogs of departed flows
                    self._q[:] = np.maximum(self._q - self._static.cap * (t_s - self._t), 0.0)
                self._t = t_s
                return
            self._t, steps, drained = fluid_run(self._t, t_s, self._fresh, FLUID_STEP_S, *self._kernel_args())
            self._fresh = True
            self.steps += steps
            if drained:
                self._collect_drained()

    # ------------------------------------------------------------------ NetworkBackend
    @property
    def active_flows(self) -> int:
        return len(self._cols["ids"]) + len(self._done)

    def start_flow(self, flow: Flow, now_s: float) -> None:
        self._run_to(now_s)
        fwd, rev, dc, ac, lat, row, coef_row = self._paths.describe(flow)
        self.link_bytes[row] += flow.size_bytes * coef_row
        if flow.size_bytes <= 0:
            self._push_done(now_s + lat, flow.flow_id)
            return
        self._add(flow)
        self._fresh = False

    def next_completion_s(self, horizon_s: float | None = None) -> float:
        self._refresh()
        t = self._t + self._next_drain_dt()
        if len(self._cols["ids"]) and self._dynamic():
            t = min(t, self._t + HORIZON_STEPS * FLUID_STEP_S)
        if self._done:
            t = min(t, self._done[0][0])
        return max(t, self._t) if self._done or len(self._cols["ids"]) else math.inf

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
