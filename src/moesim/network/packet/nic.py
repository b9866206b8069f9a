"""Host NIC: the sender (RP) and receiver (NP) of the RDMA model (docs/reference-semantics.md A.1).

Egress: the ACK queue has strict priority (blocked by a data-class PAUSE unless ACK_HIGH_PRIO), then
round-robin over the port's QPs from the one after the last served, taking the first that is not
paused, has bytes left, is not window-bound and whose pacing deadline has passed; with none
eligible the port wakes at the earliest pacing deadline. A data packet carries up to
PACKET_PAYLOAD_SIZE bytes; the next deadline is ``now + wire·8/rate``. Receiver: per-packet ACKs
(cumulative, CNP flag = the packet's ECN mark, INT copied), NACK on a gap (rate-limited), drop of
duplicates. Sender: cumulative ACK, go-back-N on NACK, then the flow's congestion control, given the
ACK as an ``AckSignal`` (its RTT sample: now minus the send time its data packet carried).
"""

from __future__ import annotations

import numpy as np

from moesim.network.cc.base import FLAG_RATE_SHIFT, MAX_RATE, RATE, AckSignal
from moesim.network.cc.dispatch import NO_CC, cc_init, cc_on_ack
from moesim.network.jit import helper, inline_helper
from moesim.network.packet.ccdispatch import arm_timers
from moesim.network.packet.events import ev_push
from moesim.network.packet.layout import (
    C_ACK_HIGH_PRIO,
    C_ACK_INTERVAL,
    C_BACK_TO_ZERO,
    C_CC,
    C_CHUNK,
    C_MTU,
    C_NACK_NS,
    C_RATE_BOUND,
    C_USES_ECN,
    C_VAR_WIN,
    EV_WAKE,
    G_ACTIVE,
    G_CNPS,
    G_CNPS_IGNORED,
    G_DATA_PKTS,
    G_DELIVERED,
    G_LAST_PROGRESS,
    NIL,
    PK_ACK,
    PK_DATA,
    PK_NACK,
    QP_ACTIVE,
    T_INF,
)
from moesim.network.packet.links import ensure_txdone, pk_alloc, pk_free, port_busy, q_pop, q_push, start_tx
from moesim.network.packet.qps import qp_complete, qp_packet_gone, rr_insert, rr_remove


@helper
def pacing_ns(wire, rate):
    return np.int64(np.floor(wire * 8e9 / rate + 0.5))


@helper
def update_win(S, q):
    """Recompute the QP's window in bytes (``win_eff``) after its rate may have changed: the base window,
    scaled by rate / max rate under VAR_WIN (at least 1 B). Kept in the QP, not recomputed per scan."""
    qp = S.qp[q]
    w = qp.win
    if S.cfg[C_VAR_WIN] != 0 and w != 0:
        st = S.qp_cc[q]
        w = np.int64(np.floor(qp.win * st[RATE] / st[MAX_RATE]))
        if w < 1:
            w = 1
    qp.win_eff = w


@helper
def win_bound(S, q):
    qp = S.qp[q]
    return qp.win != 0 and qp.snd_nxt - qp.snd_una >= qp.win_eff


@inline_helper
def qp_start(S, q, now):
    qp = S.qp[q]
    qp.state = QP_ACTIVE
    qp.next_avail = now
    cc = S.cfg[C_CC] if qp.cc_on else NO_CC
    cc_init(cc, S.qp_cc[q], S.qp_hop[q], S.ccp, S.link[qp.port].rate_bps)
    update_win(S, q)
    S.g[G_ACTIVE] += 1
    S.g[G_LAST_PROGRESS] = now
    rr_insert(S, qp.port, q)
    if qp.size <= 0:
        qp_complete(S, q, now)
    return qp.port


@inline_helper
def _send_data(S, link, q, now):
    qp = S.qp[q]
    payload = min(S.cfg[C_MTU], qp.size - qp.snd_nxt)
    p = pk_alloc(S)
    pk = S.pk[p]
    pk.kind = PK_DATA
    pk.qp = q
    pk.seq = qp.snd_nxt
    pk.payload = payload
    pk.wire = payload + qp.data_hdr
    pk.hop = 0
    pk.route = qp.fwd
    pk.ts = now
    qp.snd_nxt += payload
    qp.inflight += 1
    st = S.qp_cc[q]
    rate = st[RATE] if S.cfg[C_RATE_BOUND] != 0 else st[MAX_RATE]
    qp.next_avail = now + pacing_ns(pk.wire, rate)
    qp.last_pkt = pk.wire
    S.g[G_DATA_PKTS] += 1
    start_tx(S, link, p, now)


@helper
def _rr_at(S, port, idx):
    """The QP at position ``idx`` of the port's list (0 = the oldest)."""
    q = port.qp_head
    for _ in range(idx):
        q = S.qp[q].rr_next
    return q


@helper
def _rr_compact(S, link, first):
    """Drop every finished QP from position ``first`` on (the reference compacts its QP vector so)."""
    port = S.port[link]
    q = _rr_at(S, port, first)
    n = port.n_qp
    for _ in range(first, n):
        nxt = S.qp[q].rr_next
        if S.qp[q].state != QP_ACTIVE:
            rr_remove(S, link, q)
        q = nxt


@helper
def update_next_avail(S, link, t, now):
    """A QP's next send time moved to ``t``: a pending wake-up of the port that is later moves to
    ``max(t, now)`` (the reference's ``UpdateNextAvail``)."""
    port = S.port[link]
    if port.wake_pending and t < port.wake_ns:
        port.wake_id += 1
        port.wake_ns = max(t, now)
        ev_push(S, port.wake_ns, EV_WAKE, link, port.wake_id)


@inline_helper
def _wake_at(S, link, t, now):
    """Schedule the port's pacing wake-up at ``t`` unless one is pending or ``t`` is not to come."""
    port = S.port[link]
    if not port.wake_pending and now < t < T_INF:
        port.wake_pending = True
        port.wake_id += 1
        port.wake_ns = t
        ev_push(S, t, EV_WAKE, link, port.wake_id)


@inline_helper
def _send_next_fast(S, link, now):
    """``nic_model="fast"``: round-robin from the QP after the last served over the port's active QPs
    (finished ones leave the list at once); with none eligible, wake at the earliest pacing deadline
    of a QP with bytes left."""
    port = S.port[link]
    n = port.n_qp
    if not port.paused:
        q = port.qp_head if port.rr_last == NIL else S.qp[port.rr_last].rr_next
        for _ in range(n):
            qp = S.qp[q]
            if qp.snd_nxt < qp.size and qp.next_avail <= now and not win_bound(S, q):
                port.rr_last = q
                _send_data(S, link, q, now)
                ensure_txdone(S, link)
                return
            q = qp.rr_next
    t = T_INF
    q = port.qp_head
    for _ in range(n):
        qp = S.qp[q]
        if qp.snd_nxt < qp.size and qp.next_avail < t:
            t = qp.next_avail
        q = qp.rr_next
    _wake_at(S, link, t, now)


@helper
def _send_next_ns3(S, link, now):
    """``nic_model="ns3"``: round-robin by position over the port's list (the reference's QP vector,
    finished QPs included until a scan compacts them); with none eligible, wake at the earliest next
    send time of any listed QP if that lies in the future."""
    port = S.port[link]
    n = port.n_qp
    start = (port.rr_last + 1) % n
    # the QP served last still sits at position rr_last unless a scan without a pick compacted the list
    q = S.qp[port.rr_last_q].rr_next if port.rr_valid else _rr_at(S, port, start)
    res = -1
    res_q = NIL
    first_done = n
    for k in range(n):
        idx = (start + k) % n
        qp = S.qp[q]
        if not port.paused and qp.snd_nxt < qp.size and not win_bound(S, q):
            if qp.next_avail <= now:
                res = idx
                res_q = q
                break
        elif qp.state != QP_ACTIVE and idx < first_done:
            first_done = idx
        q = qp.rr_next
    if first_done < n:
        _rr_compact(S, link, first_done)
        port.rr_valid = False
        if res > first_done:
            # positions after the first finished QP close up over the dropped ones before res
            pos = 0
            q = port.qp_head
            while q != res_q:
                q = S.qp[q].rr_next
                pos += 1
            res = pos
    if res >= 0:
        port.rr_last = res
        port.rr_last_q = res_q
        port.rr_valid = True
        _send_data(S, link, res_q, now)
        return
    t = T_INF
    q = port.qp_head
    for _ in range(port.n_qp):
        qp = S.qp[q]
        if qp.next_avail < t:
            t = qp.next_avail
        q = qp.rr_next
    _wake_at(S, link, t, now)


@inline_helper
def nic_transmit(S, link, now):
    """DequeueAndTransmit of a host port: the ACK queue, else the next eligible QP in round-robin order,
    else a pacing wake-up (``nic_model`` picks moesim's or ns-3's bookkeeping of the QP list)."""
    port = S.port[link]
    if port_busy(S, link, now, port.q1_head != NIL or port.n_qp > 0):
        return
    if port.q1_head != NIL and (not port.paused or S.cfg[C_ACK_HIGH_PRIO] != 0):
        p = q_pop(S, link, 1)
        start_tx(S, link, p, now)
        if port.q1_head != NIL or port.n_qp > 0:
            ensure_txdone(S, link)
        return
    if port.n_qp == 0:
        return
    if S.ns3 is not None:
        _send_next_ns3(S, link, now)
    else:
        _send_next_fast(S, link, now)


@inline_helper
def rx_data(S, link, p, now):
    """A data packet reaches its destination host: ACK, NACK or discard (ReceiverCheckSeq)."""
    pk = S.pk[p]
    q = pk.qp
    qp = S.qp[q]
    expected = qp.rx_expected
    kind = -1
    if pk.seq == expected:
        expected += pk.payload
        qp.rx_expected = expected
        S.g[G_DELIVERED] += pk.payload
        S.g[G_LAST_PROGRESS] = now
        if expected >= S.cfg[C_ACK_INTERVAL] or expected % S.cfg[C_CHUNK] == 0:
            kind = PK_ACK
    elif pk.seq > expected:
        if now >= qp.rx_nack_timer or qp.rx_last_nack != expected:
            qp.rx_nack_timer = now + S.cfg[C_NACK_NS]
            qp.rx_last_nack = expected
            if S.cfg[C_BACK_TO_ZERO] != 0:
                qp.rx_expected = expected // S.cfg[C_CHUNK] * S.cfg[C_CHUNK]
            kind = PK_NACK
    if kind < 0:
        pk_free(S, p)
        qp_packet_gone(S, q)
        return NIL
    # the data packet turns into its ACK/NACK: INT records and the ECN mark (→ CNP flag) carry over
    pk.kind = kind
    pk.seq = qp.rx_expected
    pk.payload = 0
    pk.wire = qp.ack_wire
    pk.hop = 0
    pk.route = qp.rev
    out = S.rt[qp.rev, 0]
    q_push(S, out, 1, p)
    return out


@inline_helper
def rx_ack(S, link, p, now):
    """An ACK/NACK reaches the sender: advance snd_una, complete, go back N, run CC, transmit."""
    pk = S.pk[p]
    q = pk.qp
    qp = S.qp[q]
    if qp.state != QP_ACTIVE:
        pk_free(S, p)
        qp_packet_gone(S, q)
        return NIL
    seq = pk.seq
    if S.cfg[C_BACK_TO_ZERO] != 0:
        seq = seq // S.cfg[C_CHUNK] * S.cfg[C_CHUNK]
    if seq > qp.snd_una:
        qp.snd_una = seq
        S.g[G_LAST_PROGRESS] = now
    port_link = qp.port
    done = qp.snd_una >= qp.size
    ns3 = S.ns3 is not None
    if done and not ns3:
        pk_free(S, p)
        qp.inflight -= 1
        qp_complete(S, q, now)
        return port_link
    if not done and pk.kind == PK_NACK:
        qp.snd_nxt = qp.snd_una
    if pk.ecn and not done:
        # the CNP flag echoes a mark; only an algorithm that reads it acts on it (A.1.3: no CC ignores it)
        if qp.cc_on and S.cfg[C_USES_ECN] != 0:
            S.g[G_CNPS] += 1
        else:
            S.g[G_CNPS_IGNORED] += 1
    if qp.cc_on:
        # with nic_model "ns3", CC runs on the final ACK too (the reference completes the QP first): its
        # rate change can still move the port's pending wake-up
        cc = S.cfg[C_CC]
        st = S.qp_cc[q]
        old_rate = st[RATE]
        ack = AckSignal(now_ns=now, ack_seq=pk.seq, snd_nxt=qp.snd_nxt, cnp=pk.ecn, ints=S.pk_int[p],
                        nhop=np.int64(pk.nhop), rtt_ns=now - pk.ts, win_bytes=qp.bdp, base_rtt_ns=qp.base_rtt)
        flags = cc_on_ack(cc, st, S.qp_hop[q], S.ccp, ack)
        update_win(S, q)
        if flags & FLAG_RATE_SHIFT:  # ChangeRate: shift the next send time, then UpdateNextAvail
            qp.next_avail += pacing_ns(qp.last_pkt, st[RATE]) - pacing_ns(qp.last_pkt, old_rate)
            if ns3:
                update_next_avail(S, port_link, qp.next_avail, now)
        if not done:
            arm_timers(S, cc, q, flags)
    pk_free(S, p)
    if done:
        qp.inflight -= 1
        qp_complete(S, q, now)
    else:
        qp_packet_gone(S, q)
    return port_link
