"""Numba kernels of the fluid backend (docs/network-fluid.md): capped water-filling and one fluid step.

The congestion-control reactions are the packet backend's own state machines (``moesim.network.cc``),
called through the dispatch generated from the registry (``cc``: the algorithm's id) on fluid signals
instead of packets, chosen by the algorithm's capabilities: one that reacts to CNPs (``uses_cnp``,
DCQCN) receives a CNP-flagged ACK one feedback delay (base RTT plus its path's queueing) after its
accumulated expected number of ECN-marked packets crosses one, and its timers fire at their armed
times; one that reads INT (``uses_int``, HPCC) receives one ACK per step whose INT records are the
fluid link counters (cumulative wire bytes, queue backlog, line rate); one that reads RTT samples
(``uses_rtt``, TIMELY) keeps one sample in flight, which leaves with its path's RTT then (base RTT plus
queueing) and comes back that much later as an ACK of the bytes sent when it left. Each gets its
signal as an ``AckSignal``.

Windows: a rate (window / RTT) with max-min sharing of the delivered rates, or, with ``win_bytes``
(``fluid_window=bytes``), bytes in flight: each flow keeps its bytes sent, delivered
(``acked``: through its bottleneck) and acknowledged (``acked_rt``: ACKs come back a round trip after
delivery, queueing on the way as the ACK path's ports show when they reach them), and its own backlog
(sent − delivered) at its queueing port, which serves its flows' bytes in proportion to their share of
its backlog (FIFO in the fluid limit).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from moesim.network.cc.base import MAX_RATE, RATE, AckSignal
from moesim.network.cc.dispatch import (
    N_TIMERS,
    USES_CNP,
    USES_INT,
    USES_RTT,
    cc_next_rate_change,
    cc_on_ack,
    cc_on_timer,
    cc_timer_time,
)
from moesim.network.jit import entry, helper, inline_helper
from moesim.network.waterfill import waterfill_into

QUIET_REL = 1e-3
"""An INT-driven (HPCC) rate that moves less than this (relative) in a step counts as settled."""
STATIC, DYNAMIC, INT_ONLY = 0, 1, 2
WINDOW_STEP_S = 1e-6
"""Window as bytes in flight: what the window lets out over this time (one step), with the ACKs back by
then, is its offer."""
BACKLOG_EPS = 1e-3
"""Window as bytes in flight: a flow's own backlog below this many bytes counts as empty."""
CNP_MERGE_S = 1e-6
"""A CNP due within this of one already in flight merges with it (DCQCN's alpha interval)."""


class FluidState(NamedTuple):
    """What the kernels read and write besides time and row count, as the packet backend bundles its
    ``State``: configuration scalars, then whole flow-table columns (rows [0, n) are live), per-link
    arrays and scratch. ``FluidBackend`` builds it and rebuilds it when the table reallocates a column."""

    cc: int                      # the CC algorithm's id (``moesim.network.cc.dispatch``)
    qcn: bool                    # switches mark ECN
    has_win: bool
    var_win: bool
    payload: float               # packet payload bytes (ECN marks are counted per packet)
    random_marks: bool           # fluid_marks=random
    ack_queues: bool             # a round trip crosses the ACK path's queues too
    win_bytes: bool              # fluid_window=bytes
    drain_step_s: float          # fluid_drain_step_s (0: every drain exact)
    links: np.ndarray            # per flow: its route's link ids, padded
    coefs: np.ndarray            # per flow and hop: wire bytes per payload byte
    hops: np.ndarray             # per flow: links of its route (ACK path included)
    nfwd: np.ndarray             # per flow: links of its data path
    first_queued: np.ndarray     # per flow: its own port
    cc_on: np.ndarray
    rem: np.ndarray              # bytes left to send
    acked: np.ndarray            # bytes delivered
    win: np.ndarray              # window bytes (0: none)
    rtt0: np.ndarray             # base RTT s
    dcoef: np.ndarray            # wire bytes per payload byte on the data path
    line_Bps: np.ndarray         # line rate in payload bytes/s
    st: np.ndarray               # per-flow CC state
    hop_tab: np.ndarray          # per-flow per-hop CC state (HPCC)
    ccp: np.ndarray              # the CC algorithm's parameters
    mark: np.ndarray             # ECN-mark state (``fluid_step``)
    pend: np.ndarray             # CNPs in flight: due times
    npend: np.ndarray
    rates: np.ndarray            # delivered rate
    bottleneck: np.ndarray       # link that limits the flow, or -1
    offered: np.ndarray
    send: np.ndarray             # rate onto its own port
    sent: np.ndarray             # bytes sent (fluid_window=bytes)
    acked_rt: np.ndarray         # bytes acknowledged (fluid_window=bytes)
    rtt_flight: np.ndarray       # an RTT-reading algorithm's sample in flight: its RTT s,
    rtt_seq: np.ndarray          # the sequence its ACK acknowledges,
    rtt_due: np.ndarray          # when it is back (-1: none yet)
    qport: np.ndarray            # port holding its backlog (fluid_window=bytes)
    ackq: np.ndarray             # ring of ACKs in flight (fluid_window=bytes)
    ackp: np.ndarray
    cap: np.ndarray              # per link: capacity bytes/s
    q: np.ndarray                # per link: backlog bytes
    q_pfc: np.ndarray            # per link: PFC threshold bytes
    tx_bytes: np.ndarray         # per link: bytes sent (INT)
    kmin: np.ndarray             # per link: ECN thresholds bytes
    kmax: np.ndarray
    pmax: float
    switch_egress: np.ndarray    # per link: a switch port (queues, ECN, INT)
    counters: np.ndarray         # [pause events, CNPs, HPCC updates]
    ack_wait: np.ndarray         # scratch from here on (the kernels allocate nothing)
    rr: np.ndarray
    dcap: np.ndarray
    own: np.ndarray
    own_bn: np.ndarray
    frozen: np.ndarray
    lws: np.ndarray
    lbws: np.ndarray
    ints: np.ndarray
    drain_at: np.ndarray         # per flow: when it drained in the last step


@helper
def _fire_timers(cc, st, p, now_ns):
    """Fire every CC timer due at or before now (earliest first; ties in timer order)."""
    for _ in range(1000000):
        best, tid = np.inf, -1
        for k in range(N_TIMERS[cc]):
            t = cc_timer_time(cc, st, k)
            if 0.0 <= t <= now_ns and t < best:
                best, tid = t, k
        if tid < 0:
            return
        cc_on_timer(cc, st, p, best, tid)


@entry
def exp_draw(seed, k):
    """The k-th Exp(1) draw of stream ``seed`` (splitmix64 of seed and k): a pure function, so a flow's
    marks depend only on its own key and the expected marks it has accumulated, never on the step grid."""
    z = np.uint64(seed) + np.uint64(k + 1) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return -np.log((float(z >> np.uint64(11)) + 0.5) * 2.0 ** -53)


@helper
def _queue_delay_s(f, nhops, links, q, cap, first):
    """Flow f's queueing delay over its hops ``first`` to ``nhops[f]``, their backlogs over their ports'
    rates (``nfwd``: the data path; ``hops``: the round trip, ACKs queueing behind the reverse traffic)."""
    d = 0.0
    for h in range(first, nhops[f]):
        d += q[links[f, h]] / cap[links[f, h]]
    return d


@helper
def _coef_at(f, k, links, coefs, nfwd):
    """Flow f's wire bytes per payload byte at port k of its data path (0 if it does not cross it)."""
    for j in range(nfwd[f]):
        if links[f, j] == k:
            return coefs[f, j]
    return 0.0


@helper
def _window_bytes(f, var_win, cc_on, win, st):
    """Flow f's window: the per-pair BDP, scaled by its CC rate over its line rate under VAR_WIN (0: none)."""
    if win[f] > 0 and var_win and cc_on[f]:
        return max(np.floor(win[f] * st[f, RATE] / st[f, MAX_RATE]), 1.0)
    return win[f]


@helper
def _any_zero(x):
    for v in x:
        if v == 0.0:
            return True
    return False


@helper
def _fifo_caps(n, links, coefs, nfwd, sent, acked, qport, rr, cap, q, held, out):
    """Window as bytes in flight: what each flow may be delivered in a step (into ``out``; ``held``:
    scratch per link). A flow with its own backlog at its queueing port gets that port's rate in
    proportion to its share of the port's bytes (FIFO service in the fluid limit), otherwise what it
    sends now."""
    held[:] = 0.0
    for f in range(n):
        if qport[f] >= 0:
            held[qport[f]] += _coef_at(f, qport[f], links, coefs, nfwd) * max(sent[f] - acked[f], 0.0)
    for f in range(n):
        out[f] = rr[f]
    for f in range(n):
        p, b = qport[f], sent[f] - acked[f]
        if p >= 0 and held[p] > 0.0 and b > BACKLOG_EPS:
            out[f] = cap[p] * b / max(held[p], q[p])


@helper
def _ack_push(f, t_queue, acked_b, ackq, ackp):
    """Window as bytes in flight: the ACKs of flow f's first ``acked_b`` delivered bytes reach the queues
    of the ACK path at ``t_queue`` (a record not yet resolved). ackp[f] = (first record, records,
    resolved records); a full ring drops its oldest record."""
    size = ackq.shape[1]
    h, k, r = ackp[f, 0], ackp[f, 1], ackp[f, 2]
    if k == size:
        h = (h + 1) % size
        k -= 1
        r = max(r - 1, 0)
    i = (h + k) % size
    ackq[f, i, 0] = t_queue
    ackq[f, i, 1] = acked_b
    ackp[f, 0], ackp[f, 1], ackp[f, 2] = h, k + 1, r


@helper
def _ack_resolve(f, now_s, wait_s, ackq, ackp):
    """ACK records that have reached the ACK path's queues by now return ``wait_s`` (those queues' delay
    now plus the rest of the way) later (FIFO); return times are kept non-decreasing."""
    size = ackq.shape[1]
    h, k, r = ackp[f, 0], ackp[f, 1], ackp[f, 2]
    while r < k and ackq[f, (h + r) % size, 0] <= now_s:
        i = (h + r) % size
        ackq[f, i, 0] += wait_s
        if r > 0:
            ackq[f, i, 0] = max(ackq[f, i, 0], ackq[f, (h + r - 1) % size, 0])
        r += 1
    ackp[f, 2] = r


@helper
def _acked_by(f, t, wait_s, ackq, ackp, pop):
    """Bytes of flow f acknowledged by time t, linear between its return records (a record not yet
    resolved is taken to return ``wait_s`` after it reaches the queues). ``pop`` drops the records t
    has passed."""
    size = ackq.shape[1]
    h, k, r = ackp[f, 0], ackp[f, 1], ackp[f, 2]
    if k == 0:
        return 0.0
    t0, b0 = ackq[f, h, 0] + (0.0 if r > 0 else wait_s), ackq[f, h, 1]
    t1 = t0
    while k > 1:
        j = (h + 1) % size
        t1 = max(ackq[f, j, 0] + (0.0 if r > 1 else wait_s), t0)
        if t1 > t:
            break
        h, k, r, t0, b0 = j, k - 1, max(r - 1, 0), t1, ackq[f, j, 1]
    if pop:
        ackp[f, 0], ackp[f, 1], ackp[f, 2] = h, k, r
    if k == 1 or t <= t0:
        return b0
    return b0 + (ackq[f, (h + 1) % size, 1] - b0) * (t - t0) / (t1 - t0)


@helper
def cnp_arrives(pend, npend, f, t_end, due):
    """Flow f's CNPs in flight are pend[:npend[f]] (arrival times): deliver those due by ``t_end``, then
    add one due at ``due`` (if ≥ 0) unless one already arrives within CNP_MERGE_S of it (DCQCN reacts to
    at most one CNP per alpha interval). True if a CNP arrived."""
    arrived = False
    k = npend[f]
    i = 0
    near = False
    while i < k:
        if pend[i] <= t_end:
            arrived = True
            k -= 1
            pend[i] = pend[k]
        else:
            near = near or abs(pend[i] - due) < CNP_MERGE_S
            i += 1
    if due >= 0.0 and not near and k < pend.shape[0]:
        pend[k] = due
        k += 1
    npend[f] = k
    return arrived


@helper
def _rtt_probe(S, f, t_end, rtt_s):
    """Flow f's RTT samples, one in flight at a time, as a packet and its ACK: one leaves at ``t_end``
    with the path's RTT then (``rtt_s``) and the bytes sent so far plus one, and is back that much later.
    Returns (a sample is back, its RTT, its sequence)."""
    back = 0.0 <= S.rtt_due[f] <= t_end
    rtt, seq = S.rtt_flight[f], S.rtt_seq[f]
    if back or S.rtt_due[f] < 0.0:
        S.rtt_flight[f] = rtt_s
        S.rtt_seq[f] = S.sent[f] + 1.0
        S.rtt_due[f] = t_end + rtt_s
    return back, rtt, seq


@inline_helper
def _cc_feedback(S, f, got, t_end, now_ns, rtt_hops, overloaded):
    """The congestion-control reactions of flow ``f`` at the end of a step that delivered ``got`` bytes:
    its timers, then a CNP (an algorithm that reads CNPs: expected or drawn ECN marks at the switch
    egresses of its path, fed back a round trip later) or an ACK carrying INT records of those
    egresses (one that reads INT), or its RTT sample when one is back (one that reads RTT samples).
    Returns whether its rate moved (an INT-driven one: by more than ``QUIET_REL``, relative)."""
    cc, st, ccp, hop_tab, ints = S.cc, S.st, S.ccp, S.hop_tab, S.ints
    links, nfwd, q, cap = S.links, S.nfwd, S.q, S.cap
    r0 = st[f, RATE]
    _fire_timers(cc, st[f], ccp, now_ns)
    if USES_CNP[cc]:
        if S.qcn:
            pm = 0.0
            for h in range(nfwd[f]):
                k = links[f, h]
                if not S.switch_egress[k]:
                    continue
                pk = 1.0 if overloaded[k] else 0.0
                if q[k] > S.kmin[k]:
                    pk = 1.0
                    if q[k] < S.kmax[k]:
                        pk = S.pmax * (q[k] - S.kmin[k]) / (S.kmax[k] - S.kmin[k])
                if pk > 0.0:
                    pm = 1.0 - (1.0 - pm) * (1.0 - pk)
            if S.random_marks:  # mark[f]: expected marks to go before the next, stream key, marks so far
                S.mark[f, 0] -= pm * got / S.payload
            else:  # mark[f, 0]: expected marks accumulated since the last mark
                S.mark[f, 0] += pm * got / S.payload
        due = -1.0
        marked = False
        if S.random_marks and S.mark[f, 0] <= 0.0:
            marked = True
            while S.mark[f, 0] <= 0.0:
                S.mark[f, 2] += 1.0
                S.mark[f, 0] += exp_draw(S.mark[f, 1], S.mark[f, 2])
        elif not S.random_marks and S.mark[f, 0] >= 1.0:
            marked = True
            S.mark[f, 0] -= np.floor(S.mark[f, 0])
        if marked:
            # a marked packet: its CNP comes back once the packet has crossed the queues ahead of
            # it (the backlog of the saturated ports it was marked at) and the ACK the way back
            due = t_end + S.rtt0[f] + _queue_delay_s(f, rtt_hops, links, q, cap, 0)
        if cnp_arrives(S.pend[f], S.npend, f, t_end, due):
            cnp = AckSignal(now_ns=np.int64(now_ns), ack_seq=np.int64(0), snd_nxt=np.int64(0), cnp=True, ints=ints,
                            nhop=np.int64(0), rtt_ns=np.int64(-1), win_bytes=np.int64(0), base_rtt_ns=np.int64(0))
            cc_on_ack(cc, st[f], hop_tab[f], ccp, cnp)
            S.counters[1] += 1
        return st[f, RATE] != r0
    elif USES_RTT[cc]:
        back, rtt_s, seq = _rtt_probe(S, f, t_end, S.rtt0[f] + _queue_delay_s(f, rtt_hops, links, q, cap, 0))
        if back:
            ack = AckSignal(now_ns=np.int64(now_ns), ack_seq=np.int64(seq), snd_nxt=np.int64(S.sent[f]), cnp=False,
                            ints=ints, nhop=np.int64(0), rtt_ns=np.int64(np.floor(rtt_s * 1e9 + 0.5)),
                            win_bytes=np.int64(S.win[f]), base_rtt_ns=np.int64(S.rtt0[f] * 1e9))
            cc_on_ack(cc, st[f], hop_tab[f], ccp, ack)
            S.counters[2] += 1
        return st[f, RATE] != r0
    elif USES_INT[cc]:
        m = 0
        for h in range(nfwd[f]):
            k = links[f, h]
            if S.switch_egress[k] and m < ints.shape[0]:
                ints[m, 0] = np.int64(now_ns)
                ints[m, 1] = np.int64(S.tx_bytes[k])
                ints[m, 2] = np.int64(q[k])
                ints[m, 3] = np.int64(cap[k] * 8.0)
                m += 1
        if m > 0:
            a_seq, s_nxt = S.acked_rt[f], S.sent[f] + 1.0
            if not S.win_bytes:
                a_seq = S.acked[f]
                in_flight = S.rates[f] * (S.rtt0[f] + _queue_delay_s(f, rtt_hops, links, q, cap, 0))
                s_nxt = S.acked[f] + in_flight + 1.0
            r0 = st[f, RATE]
            ack = AckSignal(now_ns=np.int64(now_ns), ack_seq=np.int64(a_seq), snd_nxt=np.int64(s_nxt), cnp=False,
                            ints=ints, nhop=np.int64(m), rtt_ns=np.int64(-1), win_bytes=np.int64(S.win[f]),
                            base_rtt_ns=np.int64(S.rtt0[f] * 1e9))
            cc_on_ack(cc, st[f], hop_tab[f], ccp, ack)
            S.counters[2] += 1
            return abs(st[f, RATE] - r0) > QUIET_REL * r0
    return False


@helper
def fluid_step(dt, now_s, n, S):
    """Advance the fluid state of flows [0, n) of ``S`` (a ``FluidState``) by ``dt`` seconds from ``now_s``
    (rates held constant over the step). Returns whether a CC rate moved in this step (an HPCC rate: by
    more than ``QUIET_REL``, relative). Scratch: per flow what an ACK still has ahead of it (bytes in
    flight), the sending and the deliverable rates, the own port as a route and its bottleneck, and
    ``frozen``; per link ``lws`` (9 floats) and ``lbws`` (2 bools); ``ints`` (INT records of one flow)."""
    cc, qcn, has_win, var_win, ack_queues = S.cc, S.qcn, S.has_win, S.var_win, S.ack_queues
    win_bytes, links, coefs, hops, nfwd = S.win_bytes, S.links, S.coefs, S.hops, S.nfwd
    first_queued, cc_on, rem, acked, win, rtt0 = S.first_queued, S.cc_on, S.rem, S.acked, S.win, S.rtt0
    dcoef, line_Bps, st, rates, bottleneck = S.dcoef, S.line_Bps, S.st, S.rates, S.bottleneck
    offered, send, sent, acked_rt, qport, ackq = S.offered, S.send, S.sent, S.acked_rt, S.qport, S.ackq
    ackp, cap, q, q_pfc, tx_bytes, kmax = S.ackp, S.cap, S.q, S.q_pfc, S.tx_bytes, S.kmax
    switch_egress, counters, ack_wait, rr, dcap = S.switch_egress, S.counters, S.ack_wait, S.rr, S.dcap
    own, own_bn, frozen, lws, lbws, ints = S.own, S.own_bn, S.frozen, S.lws, S.lbws, S.ints
    n_links = cap.shape[0]
    load, excess, owned, frac, arrive, held = lws[0], lws[1], lws[2], lws[3], lws[4], lws[5]
    overloaded, carries_data = lbws[0], lbws[1]
    rtt_hops = hops if ack_queues else nfwd  # whether ACKs queue behind reverse traffic in a round trip
    # 1. offered rate: CC rate and window (as a rate over the RTT with queueing delay, or as bytes in flight)
    for f in range(n):
        o = line_Bps[f]
        if cc_on[f]:
            o = min(o, st[f, RATE] / 8.0 / dcoef[f])
        if win_bytes:  # ACKs reach the ACK path's queues half a round trip after the bytes are delivered
            half_rtt = 0.5 * rtt0[f]
            ack_wait[f] = half_rtt + _queue_delay_s(f, hops, links, q, cap, nfwd[f])
            _ack_resolve(f, now_s, ack_wait[f], ackq, ackp)
            if ackp[f, 1] == 0 or dt > 0.0:
                _ack_push(f, now_s + half_rtt, acked[f], ackq, ackp)
        if has_win and win[f] > 0:
            w = _window_bytes(f, var_win, cc_on, win, st)
            if win_bytes:  # what the window lets out over the next step, with the ACKs back by then
                acks = max(_acked_by(f, now_s + WINDOW_STEP_S, ack_wait[f], ackq, ackp, False), acked_rt[f])
                o = min(o, max(acks + w - sent[f], 0.0) / WINDOW_STEP_S)
            else:
                o = min(o, w / (rtt0[f] + _queue_delay_s(f, rtt_hops, links, q, cap, 0)))
        offered[f] = o
    # 2. what each sender puts on its own port: its NIC serves its flows round-robin, i.e. max-min on
    #    that port alone under the offers, whatever their downstream share
    for f in range(n):
        own[f] = min(hops[f], 1)
    waterfill_into(first_queued[:n].reshape(n, 1), coefs[:n, :1], own[:n], own[:n], cap, offered[:n], rr[:n],
                   own_bn[:n], frozen, lws[6:9], carries_data)
    # 3. what the network delivers: max-min under those sending rates
    if win_bytes:
        _fifo_caps(n, links, coefs, nfwd, sent, acked, qport, rr, cap, q, held, dcap)
    else:
        for f in range(n):
            dcap[f] = rr[f]
    waterfill_into(links[:n], coefs[:n], hops[:n], nfwd[:n], cap, dcap[:n], rates[:n], bottleneck[:n], frozen,
                   lws[6:9], carries_data)
    # 4. queues: a flow bottlenecked at a switch egress beyond its own port keeps sending its share of
    #    its own port; the surplus over the delivered rate builds that bottleneck's backlog. An
    #    unsaturated port drains its backlog.
    load[:] = 0.0
    excess[:] = 0.0
    owned[:] = 0.0
    for f in range(n):
        for j in range(hops[f]):
            load[links[f, j]] += coefs[f, j] * rates[f]
        send[f] = rates[f]
        b = bottleneck[f]
        if win_bytes:  # it queues at the last switch egress beyond its own port that held it back
            if b >= 0 and b != first_queued[f] and switch_egress[b]:
                qport[f] = b
                send[f] = rr[f]
            elif sent[f] - acked[f] > BACKLOG_EPS and qport[f] >= 0:
                send[f] = rr[f]
            p = qport[f]
            c = _coef_at(f, p, links, coefs, nfwd)
            if c > 0.0:
                excess[p] += c * (send[f] - rates[f])
                owned[p] += c * max(sent[f] - acked[f] + (send[f] - rates[f]) * dt, 0.0)
        elif b >= 0 and b != first_queued[f] and switch_egress[b] and rr[f] > rates[f]:
            send[f] = rr[f]
            excess[b] += _coef_at(f, b, links, coefs, nfwd) * (send[f] - rates[f])
    frac[:] = 1.0
    for k in range(n_links):
        tx_bytes[k] += load[k] * dt
        if not switch_egress[k]:
            continue
        if win_bytes:  # live flows' own backlogs, and what departed flows left, served in its turn
            rest = max(q[k] - owned[k] + excess[k] * dt, 0.0)
            turn = cap[k] * rest / q[k] if q[k] > 0.0 else 0.0
            qn = owned[k] + max(rest - max(turn, cap[k] - load[k]) * dt, 0.0)
        else:
            qn = q[k] + (excess[k] + load[k] - cap[k]) * dt if (q[k] > 0.0 or excess[k] > 0.0) else 0.0
        if qn < 0.0:
            qn = 0.0
        if qn > q_pfc[k] and excess[k] * dt > 0.0:
            # PFC: the port holds at the threshold; the surplus stays at the senders (lossless)
            if q[k] < q_pfc[k]:
                counters[0] += 1
            frac[k] = max(0.0, 1.0 - (qn - q_pfc[k]) / (excess[k] * dt))
            qn = q_pfc[k]
        q[k] = qn
    for f in range(n):
        b = qport[f] if win_bytes else bottleneck[f]
        if b >= 0 and frac[b] < 1.0:
            send[f] = rates[f] + frac[b] * (send[f] - rates[f])
    # a port whose ECN thresholds are 0 (ecn_unmapped_rate=zero) marks whenever its queue is not empty,
    # so at least while more arrives than it sends, even where the fluid lumps the backlog further on
    overloaded[:] = False
    if USES_CNP[cc] and qcn and _any_zero(kmax):
        arrive[:] = 0.0
        for f in range(n):
            for h in range(1, nfwd[f]):
                arrive[links[f, h]] += coefs[f, h] * send[f]
        for k in range(n_links):
            overloaded[k] = kmax[k] == 0.0 and arrive[k] > cap[k] * (1.0 + 1e-9)
    # 5. bytes and congestion-control reactions at the end of the step
    t_end = now_s + dt
    now_ns = np.floor(t_end * 1e9)
    ints[:] = 0
    moved = False
    for f in range(n):
        out = min(send[f] * dt, rem[f])
        if rem[f] - out <= 1e-3:
            S.drain_at[f] = min(now_s + rem[f] / send[f], t_end) if send[f] > 0.0 else t_end
        got = rates[f] * dt
        rem[f] -= out
        if win_bytes:  # never more delivered than sent; ACKs come back a round trip after delivery
            sent[f] += out
            got = min(got, sent[f] - acked[f])
            acked[f] += got
            acked_rt[f] = max(acked_rt[f], _acked_by(f, t_end, ack_wait[f], ackq, ackp, True))
        else:
            sent[f] += out
            acked[f] += got
        if cc_on[f] and _cc_feedback(S, f, got, t_end, now_ns, rtt_hops, overloaded):
            moved = True
    return moved


@helper
def next_event_dt(n, t, step_s, cc, rem, send, cc_on, st, win_bytes, sent, acked, rates, drain_floor_s):
    """Time until the first of flows [0, n) has sent all its remaining bytes at the current sending rates
    (or, with ``win_bytes``, has its own backlog served), but at least ``drain_floor_s`` (``fluid_drain_step_s``;
    0: exact), or until a CC timer that changes a rate fires
    (``next_rate_change``: DCQCN's rate increase, or a decrease after a CNP; between those a DCQCN rate
    holds). Timers are reached in whole steps, as stepping would: the step grid stays anchored at the
    last flow event, so periodic layers stay periodic."""
    x = np.inf
    timer = np.inf
    for f in range(n):
        if send[f] > 0.0:
            x = min(x, rem[f] / max(send[f], 1e-300))
        if win_bytes and rates[f] > send[f] and sent[f] - acked[f] > 0.0:
            x = min(x, (sent[f] - acked[f]) / (rates[f] - send[f]))  # its backlog empties
        if cc_on[f]:
            t_ns = cc_next_rate_change(cc, st[f])
            if t_ns >= 0.0:
                timer = min(timer, max(np.ceil((t_ns * 1e-9 - t) / step_s), 1.0) * step_s)
    return min(max(x, drain_floor_s), timer)


@helper
def is_dynamic(n, cc, var_win, q, send, rates, cc_on, st, npend, win_bytes, rem, sent, acked, acked_rt,
               win):
    """STATIC, DYNAMIC (a backlog, a flow sending above what it gets or, with bytes left, nothing at all, a
    DCQCN flow with CNPs in flight; with ``win_bytes`` also a flow's own backlog or a full window)
    or INT_ONLY (nothing moves but the rates of flows under INT feedback, HPCC; a flow reading RTT samples
    keeps it DYNAMIC). A DCQCN rate otherwise changes only when a rate-changing timer fires:
    ``next_event_dt`` stops there."""
    for k in range(q.shape[0]):
        if q[k] > 0.0:
            return DYNAMIC
    for f in range(n):
        if send[f] > rates[f] * (1 + 1e-9) or (send[f] == 0.0 and 0.0 < rem[f] < np.inf):
            return DYNAMIC
        if win_bytes and (sent[f] - acked[f] > BACKLOG_EPS
                          or 0 < _window_bytes(f, var_win, cc_on, win, st) - 1.0 < sent[f] - acked_rt[f]):
            return DYNAMIC  # an own backlog being served, or a window waiting on ACKs
    kind = STATIC
    for f in range(n):
        if cc_on[f]:
            if USES_RTT[cc]:
                return DYNAMIC  # its samples are in flight
            if USES_INT[cc]:
                kind = INT_ONLY
            elif USES_CNP[cc] and npend[f] > 0:
                return DYNAMIC
    return kind


@helper
def _retire(f, hops, nfwd, cc_on, rem, win, line_Bps, rates, bottleneck, offered, send):
    """Leave a drained flow's row in place but inert: no links, no offer, no CC, never drains again."""
    rem[f] = np.inf
    hops[f] = 0
    nfwd[f] = 0
    cc_on[f] = False
    win[f] = 0.0
    line_Bps[f] = 0.0
    rates[f] = 0.0
    offered[f] = 0.0
    send[f] = 0.0
    bottleneck[f] = -1


@entry
def fluid_peek(fresh, t, n, step_s, S):
    """Rates for the current flow set (a zero-length step unless ``fresh``), then (time to the next
    drain or DCQCN timer at those rates, whether the state is dynamic)."""
    if not fresh:
        fluid_step(0.0, t, n, S)
    kind = is_dynamic(n, S.cc, S.var_win, S.q, S.send, S.rates, S.cc_on, S.st, S.npend, S.win_bytes, S.rem,
                      S.sent, S.acked, S.acked_rt, S.win)
    return next_event_dt(n, t, step_s, S.cc, S.rem, S.send, S.cc_on, S.st, S.win_bytes, S.sent, S.acked,
                         S.rates, 0.0), kind != STATIC


@entry
def fluid_run(t, t_s, fresh, live, n, step_s, max_step_s, max_steps, stop_at_completion, ids, lat,
              done_ids, done_t, S):
    """Integrate flows [0, n) from ``t`` towards ``t_s``: steps of ``step_s`` while dynamic, doubling up to
    ``max_step_s`` while only settled HPCC rates keep it dynamic, else one jump to the next drain or
    DCQCN timer. A flow drains when its last byte is sent; it completes ``lat`` plus its path's queueing
    delay later and its row is retired. Stops at ``t_s`` (or at the earliest completion of a flow
    drained on the way if ``stop_at_completion``), when no live flow is left, or after ``max_steps``.

    Returns (time reached, steps taken, rates still fresh, live flows, flows that drained); the ids and
    completion times of the flows that drained are in ``done_ids`` and ``done_t`` (≥ n rows)."""
    cc, var_win, win_bytes, rem, send, cc_on, st = S.cc, S.var_win, S.win_bytes, S.rem, S.send, S.cc_on, S.st
    sent, acked, acked_rt, rates, q, npend, win = S.sent, S.acked, S.acked_rt, S.rates, S.q, S.npend, S.win
    steps = 0
    n_done = 0
    step = step_s
    moved = True
    while t < t_s and live > 0 and steps < max_steps:
        if fresh:
            dt = min(t_s - t,
                     next_event_dt(n, t, step_s, cc, rem, send, cc_on, st, win_bytes, sent, acked, rates,
                                   S.drain_step_s))
            kind = is_dynamic(n, cc, var_win, q, send, rates, cc_on, st, npend, win_bytes, rem, sent, acked,
                              acked_rt, win)
            step = min(2.0 * step, max_step_s) if kind == INT_ONLY and not moved else step_s
            if kind != STATIC:
                dt = min(dt, step)
            dt = max(dt, 0.0)
        else:
            dt = 0.0  # rates for a changed flow set, before any time passes
            step = step_s
        moved = fluid_step(dt, t, n, S)
        fresh = not (moved and USES_CNP[cc])  # a timer or CNP changed a rate: new rates first
        t = t_s if dt >= t_s - t else t + dt
        steps += 1
        for f in range(n):
            if rem[f] <= 1e-3:
                done_ids[n_done] = ids[f]
                drained = S.drain_at[f] if S.drain_step_s > 0.0 else t
                done_t[n_done] = drained + lat[f] + _queue_delay_s(f, S.nfwd, S.links, q, S.cap, 0)
                if stop_at_completion:
                    t_s = min(t_s, done_t[n_done])
                n_done += 1
                live -= 1
                fresh = False
                _retire(f, S.hops, S.nfwd, cc_on, rem, win, S.line_Bps, rates, S.bottleneck, S.offered, send)
    return t, steps, fresh, live, n_done



@helper
def _put_row(a, i, row):
    """a[i, :len(row)] = row for a 2-D ``a`` (element by element: the kernels run without numba's runtime)."""
    for k in range(row.shape[0]):
        a[i, k] = row[k]


@entry
def table_append(i, flow_id, size, ids_j, rem_j, f64, i64, links, coefs, first, cc_on, st, hop, mark, ackp,
                 r_f64, r_i64, r_links, r_coefs, r_first, r_cc_on, r_st, r_hop, mark0, mark1, mark2):
    """Write row ``i`` of the flow table (``fluid.FlowTable``): its route's templates (scalar rows ``r_f64``
    and ``r_i64``, link and coefficient row, own port, CC switch, CC state and per-hop table), then its id
    (int column ``ids_j``), bytes to send (float column ``rem_j``) and ECN-mark state; one call per flow
    instead of a dozen array assignments from Python."""
    _put_row(f64, i, r_f64)
    _put_row(i64, i, r_i64)
    i64[i, ids_j] = flow_id
    f64[i, rem_j] = size
    _put_row(links, i, r_links)
    _put_row(coefs, i, r_coefs)
    first[i] = r_first
    cc_on[i] = r_cc_on
    _put_row(st, i, r_st)
    for h in range(r_hop.shape[0]):
        for k in range(r_hop.shape[1]):
            hop[i, h, k] = r_hop[h, k]
    mark[i, 0] = mark0
    mark[i, 1] = mark1
    mark[i, 2] = mark2
    for k in range(ackp.shape[1]):
        ackp[i, k] = 0


@entry
def table_compact(n, rem, f64, i64, links, coefs, first, cc_on, st, hop, mark, pend, ackq, ackp, frozen):
    """Keep the rows of [0, n) whose ``rem`` is finite (live flows), in order, at the top of every column;
    returns how many. ``rem`` is a column of ``f64``: a row's value is read before any row above it moves."""
    m = 0
    for f in range(n):
        if rem[f] < np.inf:
            if m != f:
                first[m] = first[f]
                cc_on[m] = cc_on[f]
                frozen[m] = frozen[f]
                for a2 in (f64, coefs, st, mark, pend):
                    for k in range(a2.shape[1]):
                        a2[m, k] = a2[f, k]
                for b2 in (i64, links, ackp):
                    for k in range(b2.shape[1]):
                        b2[m, k] = b2[f, k]
                for a3 in (hop, ackq):
                    for h in range(a3.shape[1]):
                        for k in range(a3.shape[2]):
                            a3[m, h, k] = a3[f, h, k]
            m += 1
    return m
