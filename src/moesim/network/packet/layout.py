"""Flat-array layout of the packet simulator's state (record dtypes, constants, the state tuple).

Everything the compiled kernel touches lives in numpy arrays grouped per entity (links, ports,
nodes, packets, queue pairs, events); pools (packets, events, QPs) use free lists and grow by
reallocation from Python, so no per-packet Python object ever exists. The whole state travels as one
namedtuple ``State``; numba passes it by reference at no cost.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

NIL = -1
T_INF = np.int64(1) << np.int64(62)
"""'Never' in integer ns."""

# packet kinds
PK_DATA, PK_ACK, PK_NACK, PK_PAUSE, PK_RESUME = 0, 1, 2, 3, 4
PFC_FRAME_BYTES = 31
"""PauseHeader + IPv4 + PPP (A.2, "PFC frames")."""

# event kinds
EV_ARRIVE, EV_TXDONE, EV_WAKE, EV_START, EV_TIMER, EV_SAMPLE, EV_KICK = range(7)

# QP states
QP_FREE, QP_PENDING, QP_ACTIVE, QP_DONE = 0, 1, 2, 3

# kernel return codes
RUN_REACHED, RUN_COMPLETION, RUN_GROW, RUN_DRAIN, RUN_IDLE, RUN_DEADLOCK, RUN_STALL = range(7)

LINK_DTYPE = np.dtype([
    ("src", np.int32), ("dst", np.int32), ("rev", np.int32), ("if_index", np.int32),
    ("src_host", np.bool_), ("dst_host", np.bool_),
    ("delay_ns", np.int64), ("rate_bps", np.float64), ("ns_per_byte", np.float64),
    ("kmin", np.float64), ("kmax", np.float64), ("pmax", np.float64),
    ("headroom", np.int64), ("a_shift", np.int64),
], align=True)
"""A directed link = the egress port at its source node (static)."""

PORT_DTYPE = np.dtype([
    ("busy_until", np.int64), ("tx_bytes", np.int64),
    ("q0_head", np.int32), ("q0_tail", np.int32), ("q1_head", np.int32), ("q1_tail", np.int32),
    ("q0_bytes", np.int64), ("q1_bytes", np.int64),
    ("txdone_pending", np.bool_), ("wake_pending", np.bool_), ("paused", np.bool_), ("ing_paused", np.bool_),
    ("rr_last", np.int32), ("rr_last_q", np.int32), ("rr_valid", np.bool_), ("qp_head", np.int32), ("n_qp", np.int32),
    ("ing_bytes", np.int64), ("hdrm_bytes", np.int64), ("wake_ns", np.int64), ("wake_id", np.int64),
    ("ev_nxt", np.int32),
], align=True)
"""Dynamic state of an egress port (q0: PFC frames, strict priority; q1: the data class, or a NIC's ACK
queue) and, for a link into a switch, the MMU's ingress counters of that switch port; ``ev_nxt``: the
bucket link of its pending transmit-complete event (events.py)."""

NODE_DTYPE = np.dtype([
    ("is_host", np.bool_), ("shared_used", np.int64), ("total_hdrm", np.int64), ("total_rsrv", np.int64),
], align=True)

PKT_DTYPE = np.dtype([
    ("kind", np.int32), ("ecn", np.bool_), ("qp", np.int32), ("seq", np.int64), ("payload", np.int32),
    ("wire", np.int32), ("hop", np.int32), ("in_link", np.int32), ("nxt", np.int32), ("nhop", np.int32),
    ("ts", np.int64), ("route", np.int32),
], align=True)
"""A packet in flight or queued; ``hop`` indexes its route, ``nxt`` links FIFO queues, the free list and,
while it is on a wire, the event bucket of its arrival, whose link is ``in_link`` (events.py);
``ts``: when its data packet started transmission at the sender (its ACK echoes it: the RTT sample);
``route``: the row of ``rt`` it follows (its QP's forward route, or the reverse one for an ACK/NACK), so
that a switch hop does not read the QP. 64 bytes in all."""

QP_DTYPE = np.dtype([
    ("state", np.int32), ("cc_on", np.bool_), ("port", np.int32), ("fwd", np.int32), ("rev", np.int32),
    ("size", np.int64), ("snd_nxt", np.int64), ("snd_una", np.int64), ("next_avail", np.int64),
    ("win", np.int64), ("bdp", np.int64), ("base_rtt", np.int64), ("last_pkt", np.int32), ("data_hdr", np.int32),
    ("ack_wire", np.int32), ("rr_next", np.int32), ("rr_prev", np.int32), ("inflight", np.int32),
    ("start_ns", np.int64), ("done_ns", np.int64), ("in_rr", np.bool_),
    ("rx_expected", np.int64), ("rx_nack_timer", np.int64), ("rx_last_nack", np.int64),
    ("win_eff", np.int64),
], align=True)
"""One queue pair (= one message): sender state, and the receiver's state for it; ``win_eff``: the window
in bytes at its current rate (nic.update_win)."""

EV_DTYPE = np.dtype([("time", np.int64), ("b", np.int64), ("kind", np.int32), ("a", np.int32),
                     ("nxt", np.int32)], align=True)
OVF_DTYPE = np.dtype([("time", np.int64), ("seq", np.int64), ("ev", np.int32)], align=True)

PFC_LOG_DTYPE = np.dtype([("time_ns", np.int64), ("node", np.int32), ("link", np.int32), ("type", np.int32)])
QLEN_LOG_DTYPE = np.dtype([("time_ns", np.int64), ("link", np.int32), ("bytes", np.int64)])

# g: int64 scalars of the kernel
(G_NOW, G_SEQ, G_CUR, G_WHEEL_N, G_OVF_N, G_EV_FREE, G_EV_USED, G_PK_FREE, G_PK_USED, G_QP_FREE,
 G_ACTIVE, G_NCOMP, G_NSTART, G_NPFC, G_NQLEN, G_DROPS, G_LAST_PROGRESS, G_DATA_PKTS, G_EVENTS,
 G_SAMPLE_ON, G_PFC_ON, G_PAUSES, G_DELIVERED, G_LOG_LOST, G_ECN_MARKS, G_CNPS, G_RNG_DRAWS, G_ACK_DROPS,
 G_CNPS_IGNORED) = range(29)
N_G = 29

# cfg: int64 configuration (C_CC: the CC algorithm's id in moesim.network.cc.dispatch; C_USES_INT: it
# reads INT records, so switches stamp its packets; C_USES_ECN: it reacts to the CNP flag of ACKs)
(C_CC, C_MTU, C_HAS_WIN, C_VAR_WIN, C_RATE_BOUND, C_ACK_HIGH_PRIO, C_ENABLE_QCN, C_BUFFER,
 C_RESERVE, C_RESUME_OFFSET, C_NACK_NS, C_CHUNK, C_ACK_INTERVAL, C_BACK_TO_ZERO, C_WHEEL,
 C_STALL_NS, C_SAMPLE_NS, C_SAMPLE_T1, C_SAMPLE_MIN_BYTES, C_INT_HOPS, C_USES_INT, C_USES_ECN) = range(22)
N_CFG = 22


class State(NamedTuple):
    """The kernel state. Static arrays first, then pools, event queue, CC state, logs."""

    cfg: np.ndarray        # int64 [N_CFG]
    ccp: np.ndarray        # float64: the active CC algorithm's parameter vector
    link: np.ndarray       # LINK_DTYPE [L]
    node: np.ndarray       # NODE_DTYPE [N]
    rt: np.ndarray         # int32 [R, H]: route → link ids
    port: np.ndarray       # PORT_DTYPE [L]
    pk: np.ndarray         # PKT_DTYPE [P]
    pk_int: np.ndarray     # int64 [P, H_int, 4]: INT records (time, tx bytes, qlen, rate)
    qp: np.ndarray         # QP_DTYPE [Q]
    qp_cc: np.ndarray      # float64 [Q, MAX_SLOTS]: per-flow CC state
    qp_hop: np.ndarray     # float64 [Q, H_int, HOP_FIELDS]: per-hop CC state (HPCC)
    qp_free: np.ndarray    # int32 [Q]: stack of free QP slots (top = g[G_QP_FREE])
    ev: np.ndarray         # EV_DTYPE [E]: event pool
    wheel: np.ndarray      # int32 [W, 2]: per-ns bucket (head, tail) of the timing wheel
    ovf: np.ndarray        # OVF_DTYPE [E2]: binary heap of events beyond the wheel
    g: np.ndarray          # int64 [N_G]
    rng: np.ndarray        # uint64 [1]: xorshift state (ECN marking)
    starts: np.ndarray     # int32: QP slots whose start events are to be scheduled
    comp: np.ndarray       # int32: QP slots completed in this call
    pfc_log: np.ndarray    # PFC_LOG_DTYPE
    qlen_log: np.ndarray   # QLEN_LOG_DTYPE
    ns3: np.ndarray | None  # nic_model "ns3": an empty marker array; "fast": None. A type, not a value, so
    #                         numba compiles each model on its own and drops the other's branches
