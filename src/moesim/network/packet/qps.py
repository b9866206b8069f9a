"""Queue-pair lifecycle: the NIC's round-robin list, start, completion and slot recycling.

One QP per message (A.1 "QP creation"). A port's QPs form a list in creation order. A completed QP
leaves it at once (``nic_model="fast"``) or, as in the reference's vector, stays until a round-robin
scan passes it (``"ns3"``, ``nic._rr_compact``). Its slot is recycled once it has left the list and no
packet of it is left in the network (go-back-N can leave duplicates in flight after the final ACK).
"""

from __future__ import annotations

from moesim.network.jit import helper
from moesim.network.packet.layout import G_ACTIVE, G_NCOMP, G_QP_FREE, NIL, QP_DONE, QP_FREE


@helper
def rr_insert(S, link, q):
    """Append ``q`` to the port's circular QP list (at the tail, i.e. just before the head)."""
    port = S.port[link]
    if port.qp_head == NIL:
        port.qp_head = q
        S.qp[q].rr_next = q
        S.qp[q].rr_prev = q
    else:
        h = port.qp_head
        t = S.qp[h].rr_prev
        S.qp[q].rr_next = h
        S.qp[q].rr_prev = t
        S.qp[t].rr_next = q
        S.qp[h].rr_prev = q
    port.n_qp += 1
    S.qp[q].in_rr = True


@helper
def qp_release_if_idle(S, q):
    if S.qp[q].state == QP_DONE and S.qp[q].inflight == 0 and not S.qp[q].in_rr:
        S.qp[q].state = QP_FREE
        top = S.g[G_QP_FREE]
        S.qp_free[top] = q
        S.g[G_QP_FREE] = top + 1


@helper
def rr_remove(S, link, q):
    """Take ``q`` out of the port's list: at completion (``nic_model="fast"``, where ``rr_last`` names
    the QP served last) or when a scan compacts the list (``"ns3"``, where it is a position)."""
    port = S.port[link]
    fast = S.ns3 is None
    nxt = S.qp[q].rr_next
    prv = S.qp[q].rr_prev
    if nxt == q:
        port.qp_head = NIL
        if fast:
            port.rr_last = NIL
    else:
        S.qp[prv].rr_next = nxt
        S.qp[nxt].rr_prev = prv
        if port.qp_head == q:
            port.qp_head = nxt
        if fast and port.rr_last == q:
            port.rr_last = prv
    port.n_qp -= 1
    S.qp[q].in_rr = False
    qp_release_if_idle(S, q)


@helper
def qp_packet_gone(S, q):
    """A packet of ``q`` left the network (consumed or dropped)."""
    S.qp[q].inflight -= 1
    qp_release_if_idle(S, q)


@helper
def qp_complete(S, q, now):
    """The sender holds the final ACK: the message is complete (A.1 "ASTRA completion semantics")."""
    S.qp[q].state = QP_DONE
    S.qp[q].done_ns = now
    S.qp_cc[q, :] = -1.0  # disarms pending timers
    S.g[G_ACTIVE] -= 1
    n = S.g[G_NCOMP]
    S.comp[n] = q
    S.g[G_NCOMP] = n + 1
    if S.ns3 is None:
        rr_remove(S, S.qp[q].port, q)
    qp_release_if_idle(S, q)
