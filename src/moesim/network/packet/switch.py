"""Switch forwarding and egress scheduling (A.2). Every non-GPU node is a switch.

Arrival: route lookup (the packet carries its hop index along the flow's route), MMU admission and
accounting on the ingress port, possibly a PAUSE upstream, enqueue at the egress port. Egress: PFC
frames first (strict priority, never paused), then the data class unless paused; at dequeue the MMU
releases the buffer (possibly a RESUME upstream), ECN marks and, for a CC algorithm that reads INT
records (HPCC), the hop is stamped.
"""

from __future__ import annotations

from moesim.network.jit import helper, inline_helper
from moesim.network.packet.events import ev_push
from moesim.network.packet.layout import (
    C_ENABLE_QCN,
    C_USES_INT,
    EV_KICK,
    G_ACK_DROPS,
    G_DROPS,
    G_ECN_MARKS,
    NIL,
    PFC_FRAME_BYTES,
    PK_DATA,
    PK_PAUSE,
    PK_RESUME,
)
from moesim.network.packet.links import ensure_txdone, pk_alloc, pk_free, port_busy, q_pop, q_push, start_tx
from moesim.network.packet.mmu import admit, ecn_mark, int_stamp, on_dequeue, on_enqueue
from moesim.network.packet.qps import qp_packet_gone


@helper
def send_pfc(S, in_link, kind, now):
    """Queue a PAUSE/RESUME for the data class on the port facing ``in_link``'s upstream node."""
    out = S.link[in_link].rev
    p = pk_alloc(S)
    S.pk[p].kind = kind
    S.pk[p].qp = NIL
    S.pk[p].wire = PFC_FRAME_BYTES
    S.pk[p].payload = 0
    q_push(S, out, 0, p)
    S.port[in_link].ing_paused = kind == PK_PAUSE
    # transmitted from a separate event at the same ns (keeps the call graph acyclic)
    ev_push(S, now, EV_KICK, out, 0)


@inline_helper
def switch_receive(S, link, p, now):
    """A data packet, ACK or NACK arrives at switch ``link.dst``."""
    v = S.link[link].dst
    pk = S.pk[p]
    q = pk.qp
    h = pk.hop + 1
    pk.hop = h
    out = S.rt[pk.route, h]
    size = pk.wire
    if not admit(S, v, link, size):
        S.g[G_DROPS] += 1
        if pk.kind != PK_DATA:
            S.g[G_ACK_DROPS] += 1
        pk_free(S, p)
        qp_packet_gone(S, q)
        return NIL
    pause = on_enqueue(S, v, link, size)
    pk.in_link = link
    if pause:
        send_pfc(S, link, PK_PAUSE, now)
    q_push(S, out, 1, p)
    return out


@inline_helper
def switch_transmit(S, link, now):
    """Start the next packet on an idle switch port."""
    port = S.port[link]
    if port_busy(S, link, now, port.q0_head != NIL or (port.q1_head != NIL and not port.paused)):
        return
    if port.q0_head != NIL:
        p = q_pop(S, link, 0)
        start_tx(S, link, p, now)
    elif port.q1_head != NIL and not port.paused:
        p = q_pop(S, link, 1)
        pk = S.pk[p]
        in_link = pk.in_link
        v = S.link[link].src
        if on_dequeue(S, v, in_link, pk.wire):
            send_pfc(S, in_link, PK_RESUME, now)
        if pk.kind == PK_DATA:
            if S.cfg[C_ENABLE_QCN] != 0 and ecn_mark(S, link, port.q1_bytes):
                if not pk.ecn:
                    S.g[G_ECN_MARKS] += 1
                pk.ecn = True
            if S.cfg[C_USES_INT] != 0 and S.qp[pk.qp].cc_on:
                int_stamp(S, p, link, now)
        start_tx(S, link, p, now)
    else:
        return
    if port.q0_head != NIL or (port.q1_head != NIL and not port.paused):
        ensure_txdone(S, link)
