"""Building the kernel state from a Topology and NetworkParams; growing its pools.

Static tables: nodes (GPUs are hosts, everything else a switch), links (= egress ports) with their
MMU constants (headroom ``rate·delay/8/1e9·3``, α shift), ECN thresholds from the per-rate maps, and
per-path constants as the reference's ``CalculateRoute`` computes them (A.1 "BDP/RTT tables"):
``rtt = 2·Σdelay + Σ⌊payload·8e9/bw⌋`` ns and ``bdp = rtt·min bw/1e9/8`` B.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.errors import MoesimError
from moesim.network.cc.base import HOP_FIELDS, INT_FIELDS, MAX_SLOTS, CcAlgorithm
from moesim.network.cc.dispatch import cc_id
from moesim.network.packet.layout import (
    C_ACK_HIGH_PRIO,
    C_ACK_INTERVAL,
    C_BACK_TO_ZERO,
    C_BUFFER,
    C_CC,
    C_CHUNK,
    C_ENABLE_QCN,
    C_HAS_WIN,
    C_INT_HOPS,
    C_MTU,
    C_NACK_NS,
    C_RATE_BOUND,
    C_RESERVE,
    C_RESUME_OFFSET,
    C_SAMPLE_MIN_BYTES,
    C_SAMPLE_NS,
    C_SAMPLE_T1,
    C_STALL_NS,
    C_USES_ECN,
    C_USES_INT,
    C_VAR_WIN,
    C_WHEEL,
    EV_DTYPE,
    G_EV_FREE,
    G_PK_FREE,
    G_QP_FREE,
    LINK_DTYPE,
    N_CFG,
    N_G,
    NIL,
    NODE_DTYPE,
    OVF_DTYPE,
    PFC_LOG_DTYPE,
    PKT_DTYPE,
    PORT_DTYPE,
    QLEN_LOG_DTYPE,
    QP_DTYPE,
    State,
)
from moesim.network.params import NetworkParams
from moesim.topology.model import NodeKind, Topology

RESERVE_BYTES = 4096
RESUME_OFFSET_BYTES = 3072
ALPHA_SHIFT = 3
ACK_PAD_BYTES = 14
"""ACKs are padded to a 60-byte L2 frame; INT bytes fill that padding first (48 B plain, 76 B with 42 B INT)."""
STANDALONE_HEADER_BYTES = 48
"""Header bytes per packet in the reference's standalone FCT (A.4)."""


def ack_wire_bytes(params: NetworkParams, int_bytes: int) -> int:
    return params.transport.ack_bytes + max(0, int_bytes - ACK_PAD_BYTES)


@dataclass(frozen=True)
class Path:
    """A host pair's route and the reference's per-pair constants."""

    links: tuple[int, ...]
    rev: tuple[int, ...]
    fwd_row: int
    rev_row: int
    rtt_ns: int
    bdp_bytes: int
    bw_bps: float


class Fabric:
    """Static tables of a topology for the kernel, plus the route table it grows on demand."""

    def __init__(self, topology: Topology, params: NetworkParams) -> None:
        self.topology = topology
        self.params = params
        self.node_id = {n.name: i for i, n in enumerate(topology.nodes)}
        self.gpu_node = np.array([self.node_id[g.name] for g in topology.gpus], dtype=np.int32)
        self.node = np.zeros(len(topology.nodes), dtype=NODE_DTYPE)
        self.node["is_host"] = [n.kind == NodeKind.GPU for n in topology.nodes]
        self.link = self._links()
        self.max_delay_ns = int(self.link["delay_ns"].max()) if len(self.link) else 0
        self.rt = np.full((16, 4), NIL, dtype=np.int32)
        self.n_routes = 0
        self._rows: dict[tuple[int, ...], int] = {}
        self._paths: dict[tuple[int, int, tuple[int, ...]], Path] = {}
        self._max_pair: tuple[int, int] | None = None

    def _links(self) -> np.ndarray:
        topo, p = self.topology, self.params
        lk = np.zeros(len(topo.links), dtype=LINK_DTYPE)
        by_pair = {(link.src, link.dst): link.id for link in topo.links}
        out_count: dict[str, int] = {}
        hosts = self.node["is_host"]
        nic_rate = None
        if topo.gpus:
            first = [link for link in topo.links if link.src == topo.gpus[0].name]
            nic_rate = first[0].bandwidth_bps if first else None
        for link in topo.links:
            rev = by_pair.get((link.dst, link.src))
            if rev is None:
                raise MoesimError(f"topology {topo.name}: link {link.src}->{link.dst} has no reverse direction "
                                  "(the packet backend needs full-duplex cables for ACKs and PFC)")
            if link.bandwidth_bps <= 0:
                raise MoesimError(f"topology {topo.name}: link {link.src}->{link.dst}: bandwidth must be > 0")
            rec = lk[link.id]
            rec["src"], rec["dst"], rec["rev"] = self.node_id[link.src], self.node_id[link.dst], rev
            out_count[link.src] = out_count.get(link.src, 0) + 1
            rec["if_index"] = out_count[link.src]
            rec["src_host"], rec["dst_host"] = hosts[rec["src"]], hosts[rec["dst"]]
            delay_ns = int(round(link.delay_s * 1e9))
            rate = float(link.bandwidth_bps)
            rec["delay_ns"], rec["rate_bps"], rec["ns_per_byte"] = delay_ns, rate, 8e9 / rate
            if not rec["src_host"]:
                rec["kmin"], rec["kmax"] = p.switch.kmin_bytes(rate), p.switch.kmax_bytes(rate)
            rec["pmax"] = p.switch.pmax
            rec["headroom"] = int((int(rate) * delay_ns // 8) / 1e9 * p.switch.headroom_factor)
            shift, r = ALPHA_SHIFT, rate
            while nic_rate is not None and r > nic_rate and shift > 0:
                r /= 2
                shift -= 1
            rec["a_shift"] = shift
        for v in range(len(self.node)):
            if self.node[v]["is_host"]:
                continue
            ins = lk["dst"] == v
            self.node[v]["total_hdrm"] = int(lk["headroom"][ins].sum())
            self.node[v]["total_rsrv"] = int(ins.sum()) * RESERVE_BYTES
        return lk

    @property
    def max_route_len(self) -> int:
        return self.rt.shape[1]

    def _row(self, links: tuple[int, ...]) -> int:
        row = self._rows.get(links)
        if row is not None:
            return row
        if self.n_routes == self.rt.shape[0] or len(links) > self.rt.shape[1]:
            rows = max(self.rt.shape[0] * (2 if self.n_routes == self.rt.shape[0] else 1), 16)
            cols = max(self.rt.shape[1], len(links))
            rt = np.full((rows, cols), NIL, dtype=np.int32)
            rt[: self.rt.shape[0], : self.rt.shape[1]] = self.rt
            self.rt = rt
        row = self.n_routes
        self.rt[row, : len(links)] = links
        self.n_routes += 1
        self._rows[links] = row
        return row

    def _constants(self, links: tuple[int, ...]) -> tuple[int, int, float]:
        mtu = self.params.transport.packet_payload_bytes
        delay = int(sum(int(self.link[i]["delay_ns"]) for i in links))
        tx = int(sum(int(mtu * 8e9 / self.link[i]["rate_bps"]) for i in links))
        bw = float(min(self.link[i]["rate_bps"] for i in links))
        rtt = 2 * delay + tx
        return rtt, int(rtt * bw / 1e9 / 8), bw

    def path(self, src_gpu: int, dst_gpu: int, flow_id: int) -> Path:
        links = tuple(self.topology.route(src_gpu, dst_gpu, flow_id))
        key = (src_gpu, dst_gpu, links)
        cached = self._paths.get(key)
        if cached is not None:
            return cached
        if not links:
            raise MoesimError(f"packet backend: flow {flow_id} from GPU {src_gpu} to itself (no network path)")
        rev = tuple(self.topology.reverse_route(links))
        rtt, bdp, bw = self._constants(links)
        path = Path(links, rev, self._row(links), self._row(rev), rtt, bdp, bw)
        self._paths[key] = path
        return path

    def max_rtt_bdp(self) -> tuple[int, int]:
        """maxRtt and maxBdp over all host pairs (GLOBAL_T = 1)."""
        best_rtt, best_bdp = 0, 0
        n = self.topology.num_gpus
        for s in range(n):
            for d in range(n):
                if s != d:
                    rtt, bdp, _ = self._constants(tuple(self.topology.route(s, d, 0)))
                    best_rtt, best_bdp = max(best_rtt, rtt), max(best_bdp, bdp)
        return best_rtt, best_bdp


def config_vector(params: NetworkParams, cc: CcAlgorithm, wheel: int, stall_ns: int, int_hops: int,
                  sample: tuple[int, int, int] | None) -> np.ndarray:
    cfg = np.zeros(N_CFG, dtype=np.int64)
    cfg[C_CC] = cc_id(cc)
    cfg[C_USES_INT] = int(cc.uses_int)
    cfg[C_USES_ECN] = int(cc.uses_ecn)
    cfg[C_MTU] = params.transport.packet_payload_bytes
    cfg[C_HAS_WIN] = int(params.transport.has_win)
    cfg[C_VAR_WIN] = int(params.transport.var_win)
    cfg[C_RATE_BOUND] = int(params.transport.rate_bound)
    cfg[C_ACK_HIGH_PRIO] = int(params.transport.ack_high_prio)
    cfg[C_ENABLE_QCN] = int(params.switch.enable_qcn)
    cfg[C_BUFFER] = params.switch.buffer_bytes
    cfg[C_RESERVE] = RESERVE_BYTES
    cfg[C_RESUME_OFFSET] = RESUME_OFFSET_BYTES
    cfg[C_NACK_NS] = int(round(params.transport.nack_interval_s * 1e9))
    cfg[C_CHUNK] = params.transport.l2_chunk_bytes
    cfg[C_ACK_INTERVAL] = params.transport.l2_ack_interval
    cfg[C_BACK_TO_ZERO] = int(params.transport.l2_back_to_zero)
    cfg[C_WHEEL] = wheel
    cfg[C_STALL_NS] = stall_ns
    cfg[C_INT_HOPS] = int_hops
    if sample is not None:
        cfg[C_SAMPLE_NS], cfg[C_SAMPLE_T1], cfg[C_SAMPLE_MIN_BYTES] = sample
    return cfg


def _chain(arr: np.ndarray, start: int, free_head: int) -> int:
    """Link slots ``start..`` of a pool into a free list ending at ``free_head``; return the new head."""
    n = arr.shape[0]
    if start >= n:
        return free_head
    arr["nxt"][start:n - 1] = np.arange(start + 1, n, dtype=np.int32)
    arr["nxt"][n - 1] = free_head
    return start


def new_state(fabric: Fabric, params: NetworkParams, cc: CcAlgorithm, *, stall_ns: int, seed: int,
              sample: tuple[int, int, int] | None, log_rows: int) -> State:
    wheel = 8192
    while wheel < 4 * fabric.max_delay_ns:
        wheel *= 2
    int_hops = max(fabric.max_route_len, 1) if cc.uses_int else 1
    n_pk, n_ev, n_qp = 4096, 8192, 256
    g = np.zeros(N_G, dtype=np.int64)
    pk = np.zeros(n_pk, dtype=PKT_DTYPE)
    g[G_PK_FREE] = _chain(pk, 0, NIL)
    ev = np.zeros(n_ev, dtype=EV_DTYPE)
    g[G_EV_FREE] = _chain(ev, 0, NIL)
    qp_free = np.arange(n_qp - 1, -1, -1, dtype=np.int32)
    g[G_QP_FREE] = n_qp
    port = np.zeros(len(fabric.link), dtype=PORT_DTYPE)
    for f in ("q0_head", "q0_tail", "q1_head", "q1_tail", "qp_head"):
        port[f] = NIL
    if params.packet.nic_model != "ns3":
        port["rr_last"] = NIL  # the QP served last (fast); ns3 keeps a position, starting at 0
    return State(
        cfg=config_vector(params, cc, wheel, stall_ns, int_hops, sample),
        ccp=cc.pack_params(params).astype(np.float64),
        link=fabric.link, node=fabric.node.copy(), rt=fabric.rt, port=port,
        pk=pk, pk_int=np.zeros((n_pk, int_hops, INT_FIELDS), dtype=np.int64),
        qp=np.zeros(n_qp, dtype=QP_DTYPE), qp_cc=np.zeros((n_qp, MAX_SLOTS)),
        qp_hop=np.zeros((n_qp, int_hops, HOP_FIELDS)), qp_free=qp_free,
        ev=ev, wheel=np.full((wheel, 2), NIL, dtype=np.int32), ovf=np.zeros(1024, dtype=OVF_DTYPE),
        g=g, rng=np.array([(seed * 0x9E3779B97F4A7C15) % 2**64 | 1], dtype=np.uint64),
        starts=np.zeros(n_qp, dtype=np.int32), comp=np.zeros(n_qp, dtype=np.int32),
        pfc_log=np.zeros(log_rows, dtype=PFC_LOG_DTYPE), qlen_log=np.zeros(max(log_rows, 4 * len(fabric.link)),
                                                                          dtype=QLEN_LOG_DTYPE),
        ns3=np.zeros(0, dtype=np.int8) if params.packet.nic_model == "ns3" else None,
    )


def grow_packets(S: State) -> State:
    n = S.pk.shape[0]
    pk = np.zeros(2 * n, dtype=PKT_DTYPE)
    pk[:n] = S.pk
    S.g[G_PK_FREE] = _chain(pk, n, int(S.g[G_PK_FREE]))
    pk_int = np.zeros((2 * n,) + S.pk_int.shape[1:], dtype=np.int64)
    pk_int[:n] = S.pk_int
    return S._replace(pk=pk, pk_int=pk_int)


def grow_events(S: State) -> State:
    n = S.ev.shape[0]
    ev = np.zeros(2 * n, dtype=EV_DTYPE)
    ev[:n] = S.ev
    S.g[G_EV_FREE] = _chain(ev, n, int(S.g[G_EV_FREE]))
    ovf = S.ovf
    if ovf.shape[0] < n:
        ovf = np.zeros(2 * n, dtype=OVF_DTYPE)
        ovf[: S.ovf.shape[0]] = S.ovf
    return S._replace(ev=ev, ovf=ovf)


def grow_qps(S: State) -> State:
    n = S.qp.shape[0]
    qp = np.zeros(2 * n, dtype=QP_DTYPE)
    qp[:n] = S.qp
    qp_cc = np.zeros((2 * n, MAX_SLOTS))
    qp_cc[:n] = S.qp_cc
    qp_hop = np.zeros((2 * n,) + S.qp_hop.shape[1:])
    qp_hop[:n] = S.qp_hop
    top = int(S.g[G_QP_FREE])
    qp_free = np.zeros(2 * n, dtype=np.int32)
    qp_free[:top] = S.qp_free[:top]
    qp_free[top: top + n] = np.arange(2 * n - 1, n - 1, -1, dtype=np.int32)
    S.g[G_QP_FREE] = top + n
    starts = np.zeros(2 * n, dtype=np.int32)
    starts[: S.starts.shape[0]] = S.starts
    return S._replace(qp=qp, qp_cc=qp_cc, qp_hop=qp_hop, qp_free=qp_free, starts=starts,
                      comp=np.zeros(2 * n, dtype=np.int32))


def grow_int_hops(S: State, hops: int) -> State:
    """Widen the INT tables when a longer route appears (HPCC)."""
    old = S.pk_int.shape[1]
    if hops <= old:
        return S
    pk_int = np.zeros((S.pk_int.shape[0], hops, INT_FIELDS), dtype=np.int64)
    pk_int[:, :old] = S.pk_int
    qp_hop = np.zeros((S.qp_hop.shape[0], hops, HOP_FIELDS))
    qp_hop[:, :old] = S.qp_hop
    S.cfg[C_INT_HOPS] = hops
    return S._replace(pk_int=pk_int, qp_hop=qp_hop)
