"""The packet-level RDMA backend ("packet"): NS-3 RDMA semantics, compiled event loop.

Protocol with the event loop: ``advance_to(t)`` simulates until ``t`` or until a batch of flows
completes (all at one ns), whichever comes first, and returns the completed ids; ``now_s`` is where
it stopped. ``next_completion_s(horizon_s)`` simulates ahead to the next completion batch, never past
the caller's next own event (the engine always gives it, ``math.inf`` when it has none); without a
horizon it keeps a copy of the state and rolls back if a flow is then started before that batch.
Flows started at time t start after the network's own events at t, whichever path led there, so
results never depend on the protocol. Starting a flow before the simulated time otherwise is a
``MoesimError``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from moesim.errors import MoesimError
from moesim.network.base import BACKENDS, Capabilities, Flow, NetworkBackend
from moesim.network.cc import algorithm_for_mode
from moesim.network.diagnostics import SCHEMAS, DiagnosticsSpec, RowLog
from moesim.network.packet import build
from moesim.network.packet.kernel import push_event, run
from moesim.network.packet.layout import (
    C_ACK_HIGH_PRIO,
    C_STALL_NS,
    EV_SAMPLE,
    G_ACK_DROPS,
    G_ACTIVE,
    G_CNPS,
    G_CNPS_IGNORED,
    G_CUR,
    G_DATA_PKTS,
    G_DELIVERED,
    G_DROPS,
    G_ECN_MARKS,
    G_EV_USED,
    G_EVENTS,
    G_LAST_PROGRESS,
    G_NCOMP,
    G_NOW,
    G_NPFC,
    G_NQLEN,
    G_NSTART,
    G_OVF_N,
    G_PAUSES,
    G_PFC_ON,
    G_PK_USED,
    G_QP_FREE,
    G_RNG_DRAWS,
    G_SAMPLE_ON,
    QP_ACTIVE,
    QP_DTYPE,
    QP_FREE,
    QP_PENDING,
    RUN_COMPLETION,
    RUN_DEADLOCK,
    RUN_DRAIN,
    RUN_GROW,
    RUN_IDLE,
    RUN_REACHED,
    RUN_STALL,
    T_INF,
    State,
)
from moesim.network.params import NetworkParams
from moesim.topology.model import Topology

DEFAULT_STALL_S = 0.05
LOG_ROWS = 65536


def _ns(t_s: float) -> int:
    return int(T_INF) if math.isinf(t_s) else int(round(t_s * 1e9))


@BACKENDS.register(
    "packet", "Packet-level RDMA network: NIC pacing, BDP windows, ACKs, shared-buffer switches, PFC, ECN, INT, CC",
    "docs/reference-semantics.md part A (the NS-3 RDMA model of ASTRA-sim / HPCC)",
)
class PacketBackend(NetworkBackend):
    """Packet-level simulation of the RDMA fabric; one queue pair per flow."""

    capabilities = Capabilities(congestion_control=True, diagnostic_tables=True, fast_forward_in_flight=True,
                                sections=("transport", "switch", "packet"), packet_level=True)

    def __init__(self, topology: Topology, params: NetworkParams, diagnostics: DiagnosticsSpec | None = None,
                 seed: int | None = None, stall_s: float = DEFAULT_STALL_S) -> None:
        super().__init__(topology, params)
        self.cc = algorithm_for_mode(params.cc_mode)
        self.spec = diagnostics or DiagnosticsSpec()
        self.fabric = build.Fabric(topology, params)
        sample = None
        if self.spec.qlen:
            t0, t1 = (_ns(x) for x in self.spec.qlen_window_s)
            sample = (max(1, _ns(self.spec.qlen_interval_s)), t1, self.spec.qlen_min_bytes)
        self.S: State = build.new_state(self.fabric, params, self.cc, stall_ns=_ns(stall_s),
                                        seed=params.packet.ecn_seed if seed is None else seed,
                                        sample=sample, log_rows=LOG_ROWS)
        self.S.g[G_PFC_ON] = int(self.spec.pfc)
        self.S.g[G_SAMPLE_ON] = int(self.spec.qlen)
        if sample is not None:
            push_event(self.S, np.int64(t0), EV_SAMPLE, 0, np.int64(0))
        self._global = self.fabric.max_rtt_bdp() if params.transport.global_t else None
        self._int_bytes = params.transport.int_header_bytes if self.cc.uses_int else 0
        self._slot_flow: dict[int, tuple[Flow, build.Path, int]] = {}
        self._sport: dict[tuple[int, int], int] = {}
        self._pending: _Batch | None = None
        self._snapshot: _Snapshot | None = None
        self._now_ns = 0
        self._shift_slack_ns = 0
        self._logs = {name: RowLog(self.spec.max_rows) for name in ("fct", "pfc", "qlen")}
        self.wallclock_s = 0.0
        self.completed = 0
        self.rollbacks = 0

    # ---------------------------------------------------------------- the NetworkBackend interface
    @property
    def now_s(self) -> float:
        """Time reached by ``advance_to`` (s): the completion time after an early return."""
        return self._now_ns * 1e-9

    @property
    def random_draws(self) -> int:
        """ECN-marking draws, counted only when the CC algorithm reacts to marks (``uses_ecn``)."""
        return int(self.S.g[G_RNG_DRAWS]) if self.cc.uses_ecn else 0

    @property
    def active_flows(self) -> int:
        """Flows started and not yet reported complete."""
        return self._running + (len(self._pending.slots) if self._pending is not None else 0)

    @property
    def _running(self) -> int:
        return int(self.S.g[G_ACTIVE] + self.S.g[G_NSTART])

    def start_flow(self, flow: Flow, now_s: float) -> None:
        t = _ns(now_s)
        if self.S.g[G_NOW] - self._shift_slack_ns <= t < self.S.g[G_NOW] and self._snapshot is None:
            t = int(self.S.g[G_NOW])  # rounding after a time shift, not an earlier start
        if t < self.S.g[G_NOW]:
            if self._snapshot is None or t < self._snapshot.now_ns:
                raise MoesimError(
                    f"packet backend: flow {flow.flow_id} started at {t} ns, before the simulated time "
                    f"{int(self.S.g[G_NOW])} ns (advance_to the start time first)")
            self._rollback()
            # replay up to t so that the new flow starts after the network's own events at t, as it
            # does when the caller advances first (no look-ahead): results never depend on the path
            self._pending = self._run(t)
        self._snapshot = None
        self._now_ns = max(self._now_ns, t)
        path = self.fabric.path(flow.src_gpu, flow.dst_gpu, flow.flow_id)
        S = self.S
        if self.fabric.rt is not S.rt:
            S = S._replace(rt=self.fabric.rt)
        if self._int_bytes and len(path.links) > S.pk_int.shape[1]:
            S = build.grow_int_hops(S, len(path.links))
        if S.g[G_QP_FREE] == 0:
            S = build.grow_qps(S)
        self.S = S
        top = int(S.g[G_QP_FREE]) - 1
        q = int(S.qp_free[top])
        S.g[G_QP_FREE] = top
        p = self.params
        cc_on = bool(flow.cc)
        int_bytes = self._int_bytes if cc_on else 0
        rtt, bdp = self._global if self._global is not None else (path.rtt_ns, path.bdp_bytes)
        S.qp[q] = _qp_record(
            state=QP_PENDING, cc_on=cc_on, port=path.links[0], fwd=path.fwd_row, rev=path.rev_row,
            size=max(0, int(flow.size_bytes)), win=bdp if p.transport.has_win else 0, bdp=bdp, base_rtt=rtt,
            data_hdr=p.transport.data_header_bytes + int_bytes, ack_wire=build.ack_wire_bytes(p, int_bytes),
            start_ns=t, done_ns=-1, rx_last_nack=-1,
        )
        pair = (flow.src_gpu, flow.dst_gpu)
        sport = self._sport.get(pair, 10000)
        self._sport[pair] = sport + 1
        self._slot_flow[q] = (flow, path, sport)
        n = int(S.g[G_NSTART])
        S.starts[n] = q
        S.g[G_NSTART] = n + 1

    def next_completion_s(self, horizon_s: float | None = None) -> float:
        """Time of the next completion batch, simulating ahead to find it.

        With a ``horizon_s`` (the caller's next own event) the kernel never passes it and ``math.inf``
        means "none up to the horizon". Without one, the state before the look-ahead is kept (a copy
        of every state array) so that a flow started earlier than the batch can still be simulated
        exactly (rollback).
        """
        if self._pending is None:
            if self._running == 0:
                return math.inf
            horizon = int(T_INF) if horizon_s is None else _ns(horizon_s)
            if horizon_s is None and self._snapshot is None:
                self._snapshot = self._take_snapshot()
            self._pending = self._run(horizon)
            if self._pending is None:
                return math.inf
        return self._pending.time_ns * 1e-9

    def advance_to(self, t_s: float) -> list[int]:
        t = _ns(t_s)
        if self._pending is None:
            if self._running == 0 and t < T_INF:
                if t > self.S.g[G_NOW]:
                    self._run(t)
            elif self._running:
                self._pending = self._run(t)
        if self._pending is not None and self._pending.time_ns <= t:
            batch, self._pending = self._pending, None
            self._snapshot = None
            self._now_ns = max(self._now_ns, batch.time_ns)
            return self._deliver(batch)
        if t < T_INF:
            self._now_ns = max(self._now_ns, t)
        return []

    # ---------------------------------------------------------------- layer fast-forward
    flow_state_is_complete = False  # queued packets, pauses and timers are not in flow_state

    def flow_state(self, now_s: float) -> dict[int, tuple[tuple[float, ...], tuple[float, ...]]]:
        """Per flow not yet reported: (age,), (bytes acknowledged, sending rate) — a summary; the
        engine uses it to take approximate layer periods while flows are in flight."""
        S = self.S
        return {flow.flow_id: ((now_s - float(S.qp[q]["start_ns"]) * 1e-9,), (float(S.qp[q]["snd_una"]),
                                                                          float(S.qp_cc[q, 0])))
                for q, (flow, _, _) in self._slot_flow.items()}

    def shift_time(self, delta_s: float) -> None:
        """Move the whole packet state ``delta_s`` later (to the nearest ns): every packet, queue, timer
        and CC state then evolves exactly as it would have from the earlier time. The caller's shifted
        times may then round to 1 ns before the backend's clock; such a start is taken as now."""
        if self._snapshot is not None:  # a look-ahead kept a way back: take it, the shifted run replays
            self._rollback()
        d = _ns(delta_s)
        if d <= 0:
            return
        self._shift_slack_ns = 1
        S = self.S
        for k in (G_NOW, G_CUR, G_LAST_PROGRESS):
            S.g[k] += d
        S.ev["time"] += d  # free events too: harmless, they are rewritten when reused
        S.ovf["time"][:int(S.g[G_OVF_N])] += d  # a uniform shift keeps the heap order
        S.wheel[:] = np.roll(S.wheel, d % S.wheel.shape[0], axis=0)  # bucket of time t is t mod W
        S.port["busy_until"] += d
        S.port["wake_ns"] += d
        used = S.qp["state"] != QP_FREE
        for name in ("next_avail", "start_ns", "rx_nack_timer"):
            S.qp[name][used] += d
        S.qp["done_ns"][used & (S.qp["done_ns"] >= 0)] += d
        S.pk_int[:, :, 0] += d
        S.pk["ts"] += d  # free packets too, as events
        st, hops = S.qp_cc[used], S.qp_hop[used]
        self.cc.shift_time(st, hops, d)
        S.qp_cc[used], S.qp_hop[used] = st, hops
        self._now_ns += d
        if self._pending is not None:
            self._pending.time_ns += d

    # ---------------------------------------------------------------- driving the kernel
    def _run(self, t_stop: int) -> _Batch | None:
        """Run the kernel to ``t_stop`` or the next completion batch (returned, not yet delivered)."""
        t0 = time.perf_counter()
        try:
            while True:
                status = run(self.S, np.int64(t_stop), True)
                if status == RUN_GROW:
                    self._grow()
                elif status == RUN_DRAIN:
                    self._drain_logs()
                elif status == RUN_COMPLETION:
                    return self._collect()
                elif status in (RUN_REACHED, RUN_IDLE):
                    return None
                elif status in (RUN_DEADLOCK, RUN_STALL):
                    raise MoesimError(self._stuck_message(status))
                else:  # pragma: no cover - defensive
                    raise MoesimError(f"packet backend: unexpected kernel status {status}")
        finally:
            self.wallclock_s += time.perf_counter() - t0

    def _take_snapshot(self) -> _Snapshot:
        self._drain_logs()  # the log arrays then need no copy: the kernel only appends to them
        arrays = {name: getattr(self.S, name).copy() for name in MUTABLE}
        marks = {name: log.mark() for name, log in self._logs.items()}
        return _Snapshot(int(self.S.g[G_NOW]), arrays, marks)

    def _rollback(self) -> None:
        snap = self._snapshot
        assert snap is not None
        self.S = self.S._replace(**snap.arrays)
        for name, mark in snap.marks.items():
            self._logs[name].rollback(mark)
        self._pending = None
        self._snapshot = None
        self.rollbacks += 1

    def _grow(self) -> None:
        S = self.S
        if S.pk.shape[0] - S.g[G_PK_USED] < 64:
            S = build.grow_packets(S)
        if S.ev.shape[0] - S.g[G_EV_USED] < 64 or S.ovf.shape[0] - S.g[G_OVF_N] < 64:
            S = build.grow_events(S)
        self.S = S

    def _drain_logs(self) -> None:
        S = self.S
        n = int(S.g[G_NPFC])
        if n:
            rows = S.pfc_log[:n]
            links = rows["link"]
            kinds = self.fabric.node["is_host"][rows["node"]]
            if not self._logs["pfc"].add({
                "time_ns": rows["time_ns"], "node": rows["node"], "node_type": np.where(kinds, 0, 1),
                "if_index": self.fabric.link["if_index"][links], "link": links, "type": rows["type"],
            }):
                S.g[G_PFC_ON] = 0
            S.g[G_NPFC] = 0
        n = int(S.g[G_NQLEN])
        if n:
            rows = S.qlen_log[:n]
            links = rows["link"]
            if not self._logs["qlen"].add({
                "time_ns": rows["time_ns"], "node": self.fabric.link["src"][links],
                "if_index": self.fabric.link["if_index"][links], "link": links, "bytes": rows["bytes"],
            }):
                S.g[G_SAMPLE_ON] = 0
            S.g[G_NQLEN] = 0

    def _collect(self) -> _Batch:
        S = self.S
        n = int(S.g[G_NCOMP])
        slots = S.comp[:n].tolist()
        S.g[G_NCOMP] = 0
        rows: list[tuple[int, ...]] = []
        if self.spec.fct:
            mtu = self.params.transport.packet_payload_bytes
            for q in slots:
                flow, path, sport = self._slot_flow[q]
                rec = S.qp[q]
                size = int(rec["size"])
                total = size + math.ceil(size / mtu) * build.STANDALONE_HEADER_BYTES
                alone = path.rtt_ns + int(total * 8e9 / path.bw_bps)
                rows.append((flow.flow_id, flow.src_gpu, flow.dst_gpu, sport, 100, size, int(rec["start_ns"]),
                             int(rec["done_ns"] - rec["start_ns"]), alone))
        return _Batch(int(S.g[G_NOW]), slots, rows)

    def _deliver(self, batch: _Batch) -> list[int]:
        ids = [self._slot_flow.pop(q)[0].flow_id for q in batch.slots]
        if batch.fct_rows:
            cols = list(zip(*batch.fct_rows, strict=True))
            self._logs["fct"].add({f.name: np.array(c) for f, c in zip(FCT_FIELDS, cols, strict=True)})
        self.completed += len(ids)
        return ids

    def _stuck_message(self, status: int) -> str:
        S = self.S
        active = int(S.g[G_ACTIVE])
        drops, acks = int(S.g[G_DROPS]), int(S.g[G_ACK_DROPS])
        why = ("no event left" if status == RUN_DEADLOCK
               else f"no delivery progress for {S.cfg[C_STALL_NS] * 1e-9 * 1e3:g} ms")
        remedy = ("ACKs of paused NICs (ack_high_prio) overflowed PFC headroom; set ack_high_prio=false"
                  if acks == drops and S.cfg[C_ACK_HIGH_PRIO] else
                  "enable the window (has_win) or enlarge buffer_bytes/headroom_factor")
        cause = (f"{drops} packets ({acks} of them ACKs/NACKs) were dropped at full switch buffers and the "
                 f"reference model has no retransmission timeout; {remedy}"
                 if drops else "PFC deadlock or permanently paused ports")
        return (f"packet network cannot complete: {active} flows stuck at t={int(S.g[G_NOW])} ns ({why}); {cause}")

    # ---------------------------------------------------------------- results
    def stats(self) -> dict[str, Any]:
        """Counters of the run so far: packets, events, drops (``ack_drops`` of them ACKs/NACKs), pauses,
        ECN-marked data packets, CNP-flagged ACKs whose sender's CC acted on them (``cnps``) or that no CC
        reads (``cnps_ignored``: no CC, HPCC, flows without CC; docs/network-packet.md), wall-clock."""
        g = self.S.g
        return {
            "data_packets": int(g[G_DATA_PKTS]), "events": int(g[G_EVENTS]), "drops": int(g[G_DROPS]),
            "ack_drops": int(g[G_ACK_DROPS]), "pauses": int(g[G_PAUSES]), "ecn_marks": int(g[G_ECN_MARKS]),
            "cnps": int(g[G_CNPS]), "cnps_ignored": int(g[G_CNPS_IGNORED]),
            "delivered_bytes": int(g[G_DELIVERED]), "completed_flows": self.completed,
            "wallclock_s": self.wallclock_s,
            "packets_per_s": int(g[G_DATA_PKTS]) / self.wallclock_s if self.wallclock_s > 0 else 0.0,
        }

    def flow_progress(self) -> dict[int, tuple[int, float]]:
        """Active flows: id → (bytes acknowledged, current sending rate in b/s)."""
        S = self.S
        return {flow.flow_id: (int(S.qp[q]["snd_una"]), float(S.qp_cc[q, 0]))
                for q, (flow, _, _) in self._slot_flow.items() if S.qp[q]["state"] == QP_ACTIVE}

    def parameters(self) -> dict[str, Any]:
        """The exact parameter values of this run (recorded with every result)."""
        p = self.params
        return {
            "backend": "packet", "network": p.as_dict(), "cc_algorithm": self.cc.name,
            "cc_parameters": self.cc.used_params(p),
            "cc_policy": "intra-server flows without CC" if not p.transport.intra_server_cc else "all flows with CC",
        }

    def tables(self) -> dict[str, pa.Table]:
        """The requested diagnostics as Arrow tables (see ``moesim.network.diagnostics``)."""
        self._drain_logs()
        out: dict[str, pa.Table] = {}
        for name in ("fct", "pfc", "qlen"):
            if getattr(self.spec, name):
                out[name] = self._logs[name].table(SCHEMAS[name])
        if self.spec.port_bytes:
            lk = self.topology.links
            out["port_bytes"] = pa.table({
                "link": pa.array([link.id for link in lk], pa.int32()),
                "src": [link.src for link in lk], "dst": [link.dst for link in lk],
                "bytes": pa.array(self.S.port["tx_bytes"][[link.id for link in lk]], pa.int64()),
            }, schema=SCHEMAS["port_bytes"])
        return out

    def diagnostics(self) -> dict[str, Any]:
        """Bytes sent per link (wire bytes incl. ACKs and PFC frames), parameters, counters and the
        requested tables (``moesim.network.diagnostics.write_diagnostics`` writes them out)."""
        return {"link_bytes": self.S.port["tx_bytes"].copy(), "parameters": self.parameters(),
                "stats": self.stats(), **self.tables()}


FCT_FIELDS = SCHEMAS["fct"]
MUTABLE = ("port", "node", "pk", "pk_int", "qp", "qp_cc", "qp_hop", "qp_free", "ev", "wheel", "ovf", "g", "rng")
"""State arrays the kernel rewrites (copied for a look-ahead that may be rolled back; it only appends to
the logs and the completion list, and only reads the start list)."""

_QP_INDEX = {name: i for i, name in enumerate(QP_DTYPE.names or ())}


def _qp_record(**values: object) -> tuple[object, ...]:
    """A QP_DTYPE row: the given fields, zero elsewhere."""
    row: list[object] = [0] * len(_QP_INDEX)
    for name, value in values.items():
        row[_QP_INDEX[name]] = value
    return tuple(row)


@dataclass
class _Batch:
    """Flows completed at one ns, not yet handed to the caller."""

    time_ns: int
    slots: list[int]
    fct_rows: list[tuple[int, ...]]


@dataclass
class _Snapshot:
    now_ns: int
    arrays: dict[str, np.ndarray]
    marks: dict[str, tuple[int, int, bool]]
