"""Packets, egress FIFO queues and store-and-forward links (docs/reference-semantics.md A.1, "NIC egress").

A port serialises one packet at a time for ``round(bytes·8/bps)`` ns (ns-3 rounds the transmit time
to the nearest ns, so a 1036 B packet at 400 Gb/s takes 21 ns); the packet reaches the far node
``tx + propagation delay`` after it starts (whole-packet store and forward, no processing delay).
With ``nic_model="ns3"`` every packet schedules the port's "transmit complete" event when it starts, as
ns-3 does, and the port counts as busy until that event has run: events at the same ns that were
scheduled before it still find the port busy, so the next packet is chosen only after them. With
``nic_model="fast"`` (the default) a port is busy until ``busy_until`` and schedules the event only
while it has more to send, which saves an event per packet and differs only in the order of events
at one ns.
"""

from __future__ import annotations

import numpy as np

from moesim.network.jit import helper, inline_helper
from moesim.network.packet.events import ev_push_arrive, ev_push_txdone
from moesim.network.packet.layout import G_PK_FREE, G_PK_USED, NIL


@helper
def pk_alloc(S):
    p = S.g[G_PK_FREE]
    S.g[G_PK_FREE] = S.pk[p].nxt
    S.g[G_PK_USED] += 1
    S.pk[p].nxt = NIL
    S.pk[p].nhop = 0
    S.pk[p].ecn = False
    return p


@helper
def pk_free(S, p):
    S.pk[p].nxt = S.g[G_PK_FREE]
    S.g[G_PK_FREE] = p
    S.g[G_PK_USED] -= 1


@helper
def tx_ns(ns_per_byte, wire):
    """Serialisation time in integer ns, rounded to nearest (ns-3 ``CalculateBytesTxTime``)."""
    return np.int64(np.floor(wire * ns_per_byte + 0.5))


@helper
def q_push(S, link, qi, p):
    port = S.port[link]
    S.pk[p].nxt = NIL
    if qi == 0:
        if port.q0_tail == NIL:
            port.q0_head = p
        else:
            S.pk[port.q0_tail].nxt = p
        port.q0_tail = p
        port.q0_bytes += S.pk[p].wire
    else:
        if port.q1_tail == NIL:
            port.q1_head = p
        else:
            S.pk[port.q1_tail].nxt = p
        port.q1_tail = p
        port.q1_bytes += S.pk[p].wire


@helper
def q_pop(S, link, qi):
    port = S.port[link]
    if qi == 0:
        p = port.q0_head
        port.q0_head = S.pk[p].nxt
        if port.q0_head == NIL:
            port.q0_tail = NIL
        port.q0_bytes -= S.pk[p].wire
    else:
        p = port.q1_head
        port.q1_head = S.pk[p].nxt
        if port.q1_head == NIL:
            port.q1_tail = NIL
        port.q1_bytes -= S.pk[p].wire
    S.pk[p].nxt = NIL
    return p


@helper
def start_tx(S, link, p, now):
    """Put packet ``p`` on the wire of ``link`` at ``now``; it arrives after tx + propagation."""
    wire = S.pk[p].wire
    tx = tx_ns(S.link[link].ns_per_byte, wire)
    port = S.port[link]
    port.tx_bytes += wire
    if S.ns3 is not None:
        port.txdone_pending = True
        ev_push_txdone(S, now + tx, link)
    else:
        port.busy_until = now + tx
    S.pk[p].in_link = link
    ev_push_arrive(S, now + tx + S.link[link].delay_ns, p)


@helper
def ensure_txdone(S, link):
    """``nic_model="fast"``: make sure the port looks for its next packet when the current one is
    serialised (ns-3's model schedules this event for every packet in ``start_tx``)."""
    port = S.port[link]
    if S.ns3 is None and not port.txdone_pending:
        port.txdone_pending = True
        ev_push_txdone(S, port.busy_until, link)


@inline_helper
def port_busy(S, link, now, more):
    """Whether the port is still serialising; with ``nic_model="fast"`` a busy port that has ``more`` to
    send makes sure its transmit-complete event is scheduled."""
    port = S.port[link]
    if S.ns3 is not None:
        return port.txdone_pending
    if port.busy_until <= now:
        return False
    if more:
        ensure_txdone(S, link)
    return True
