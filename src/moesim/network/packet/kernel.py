"""The compiled event loop of the packet simulator.

``run(S, t_stop, stop_on_completion)`` processes events in (time, insertion) order until the next
event lies beyond ``t_stop`` (RUN_REACHED), or, after a batch of flow completions at one ns, before
time moves on (RUN_COMPLETION), so the caller can start dependent flows. On return the wheel's cursor
never lies beyond the simulated time, so the caller may schedule anything from then on. It returns early when a
pool is nearly full (RUN_GROW: the caller enlarges the arrays and calls again) or a diagnostics log
is (RUN_DRAIN), and it detects runs that cannot finish: active flows with no event left
(RUN_DEADLOCK) or no delivery progress for ``stall`` ns (RUN_STALL, e.g. a lost last packet: the
reference has no retransmission timeout).
"""

from __future__ import annotations

from moesim.network.cc.dispatch import cc_on_timer
from moesim.network.jit import entry, inline_helper
from moesim.network.packet.ccdispatch import arm_timers
from moesim.network.packet.events import EMPTY, PK_TAG, PORT_TAG, ev_free, ev_next_time, ev_pop, ev_push
from moesim.network.packet.layout import (
    C_CC,
    C_SAMPLE_MIN_BYTES,
    C_SAMPLE_NS,
    C_SAMPLE_T1,
    C_STALL_NS,
    EV_ARRIVE,
    EV_KICK,
    EV_SAMPLE,
    EV_START,
    EV_TIMER,
    EV_TXDONE,
    EV_WAKE,
    G_ACTIVE,
    G_CUR,
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
    G_SAMPLE_ON,
    NIL,
    PK_DATA,
    PK_PAUSE,
    PK_RESUME,
    QP_ACTIVE,
    RUN_COMPLETION,
    RUN_DEADLOCK,
    RUN_DRAIN,
    RUN_GROW,
    RUN_IDLE,
    RUN_REACHED,
    RUN_STALL,
)
from moesim.network.packet.links import pk_free
from moesim.network.packet.nic import nic_transmit, qp_start, rx_ack, rx_data, update_win
from moesim.network.packet.switch import switch_receive, switch_transmit

MIN_FREE_PKTS = 8
MIN_FREE_EVENTS = 16


@inline_helper
def transmit(S, link, now):
    if S.link[link].src_host:
        nic_transmit(S, link, now)
    else:
        switch_transmit(S, link, now)


@inline_helper
def pfc_receive(S, link, p, now):
    """A PAUSE/RESUME reaches ``link.dst``: (un)pause its data class towards the sender (A.2)."""
    target = S.link[link].rev
    pause = S.pk[p].kind == PK_PAUSE
    pk_free(S, p)
    S.port[target].paused = pause
    if pause:
        S.g[G_PAUSES] += 1
    if S.g[G_PFC_ON] != 0:
        n = S.g[G_NPFC]
        rec = S.pfc_log[n]
        rec.time_ns = now
        rec.node = S.link[link].dst
        rec.link = target
        rec.type = 1 if pause else 0
        S.g[G_NPFC] = n + 1
    return NIL if pause else target


@inline_helper
def sample_queues(S, now):
    """Log every switch egress port whose queue holds at least the configured bytes."""
    if S.g[G_SAMPLE_ON] == 0:
        return
    min_bytes = S.cfg[C_SAMPLE_MIN_BYTES]
    for link in range(S.link.shape[0]):
        if S.link[link].src_host:
            continue
        b = S.port[link].q0_bytes + S.port[link].q1_bytes
        if b >= min_bytes:
            n = S.g[G_NQLEN]
            S.qlen_log[n].time_ns = now
            S.qlen_log[n].link = link
            S.qlen_log[n].bytes = b
            S.g[G_NQLEN] = n + 1
    nxt = now + S.cfg[C_SAMPLE_NS]
    if nxt <= S.cfg[C_SAMPLE_T1]:
        ev_push(S, nxt, EV_SAMPLE, 0, 0)


@inline_helper
def _dispatch(S, e, now):
    if e >= PORT_TAG:
        kind = EV_TXDONE
        a = e - PORT_TAG
        b = 0
    elif e >= PK_TAG:
        kind = EV_ARRIVE
        a = e - PK_TAG
        b = S.pk[a].in_link
    else:
        ev = S.ev[e]
        kind = ev.kind
        a = ev.a
        b = ev.b
        ev_free(S, e)
    kick = NIL
    if kind == EV_ARRIVE:
        link = b
        pk_kind = S.pk[a].kind
        if pk_kind == PK_PAUSE or pk_kind == PK_RESUME:
            kick = pfc_receive(S, link, a, now)
        elif S.link[link].dst_host:
            if pk_kind == PK_DATA:
                kick = rx_data(S, link, a, now)
            else:
                kick = rx_ack(S, link, a, now)
        else:
            kick = switch_receive(S, link, a, now)
    elif kind == EV_TXDONE:
        S.port[a].txdone_pending = False
        kick = a
    elif kind == EV_KICK:
        kick = a
    elif kind == EV_WAKE:
        if S.port[a].wake_pending and S.port[a].wake_id == b:  # else moved earlier (update_next_avail)
            S.port[a].wake_pending = False
            kick = a
    elif kind == EV_START:
        kick = qp_start(S, a, now)
    elif kind == EV_TIMER:
        if S.qp[a].state == QP_ACTIVE and S.qp[a].cc_on:
            cc = S.cfg[C_CC]
            flags = cc_on_timer(cc, S.qp_cc[a], S.ccp, now, b)
            update_win(S, a)
            arm_timers(S, cc, a, flags)
    elif kind == EV_SAMPLE:
        sample_queues(S, now)
    if kick != NIL:
        transmit(S, kick, now)


@inline_helper
def schedule_starts(S):
    g = S.g
    for i in range(g[G_NSTART]):
        q = S.starts[i]
        ev_push(S, S.qp[q].start_ns, EV_START, q, 0)
    g[G_NSTART] = 0


@entry
def run(S, t_stop, stop_on_completion):
    g = S.g
    schedule_starts(S)
    g[G_NCOMP] = 0
    stall = S.cfg[C_STALL_NS]
    mask = S.wheel.shape[0] - 1
    # pool and log fill levels from which to return (the arrays do not change size within the call)
    pk_max = S.pk.shape[0] - MIN_FREE_PKTS
    ev_max = S.ev.shape[0] - MIN_FREE_EVENTS
    ovf_max = S.ovf.shape[0] - MIN_FREE_EVENTS
    pfc_max = S.pfc_log.shape[0] - 4
    qlen_max = S.qlen_log.shape[0] - S.link.shape[0]
    while True:
        if g[G_PK_USED] > pk_max or g[G_EV_USED] > ev_max or g[G_OVF_N] > ovf_max:
            return RUN_GROW
        if g[G_NPFC] > pfc_max or g[G_NQLEN] > qlen_max:
            return RUN_DRAIN
        if g[G_NCOMP] > 0 and stop_on_completion and S.wheel[g[G_CUR] & mask, 0] == NIL:
            # no other event at the completion's ns: return before time (and the cursor) moves on
            return RUN_COMPLETION
        t = ev_next_time(S, t_stop)
        if t == EMPTY:
            return RUN_DEADLOCK if g[G_ACTIVE] > 0 else RUN_IDLE
        if t < 0:
            g[G_NOW] = t_stop
            return RUN_REACHED
        if g[G_ACTIVE] > 0 and t - g[G_LAST_PROGRESS] > stall:
            return RUN_STALL
        e = ev_pop(S)
        g[G_NOW] = t
        g[G_EVENTS] += 1
        _dispatch(S, e, t)


@entry
def push_event(S, t, kind, a, b):
    """Schedule an event from Python (e.g. the first queue-length sample)."""
    ev_push(S, t, kind, a, b)
