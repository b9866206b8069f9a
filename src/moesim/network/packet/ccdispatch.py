"""Dispatch from the kernel to the congestion-control state machines of ``moesim.network.cc``.

The kernel is compiled, so the algorithm is chosen by its reference CC_MODE here (one branch per
algorithm); the algorithms themselves stay pure functions over a flow's state vector.
"""

from __future__ import annotations

import numpy as np

from moesim.network.cc import dcqcn, hpcc, none
from moesim.network.jit import helper
from moesim.network.packet.events import ev_push
from moesim.network.packet.layout import EV_TIMER

MODE_DCQCN = 1
MODE_HPCC = 3
MAX_TIMERS = 8


@helper
def cc_init(mode, st, hops, p, line_rate):
    if mode == MODE_DCQCN:
        dcqcn.init(st, hops, p, line_rate)
    elif mode == MODE_HPCC:
        hpcc.init(st, hops, p, line_rate)
    else:
        none.init(st, hops, p, line_rate)


@helper
def cc_on_ack(mode, st, hops, p, now, ack_seq, snd_nxt, cnp, ints, nhop, win, base_rtt):
    if mode == MODE_DCQCN:
        return dcqcn.on_ack(st, hops, p, now, ack_seq, snd_nxt, cnp, ints, nhop, win, base_rtt)
    if mode == MODE_HPCC:
        return hpcc.on_ack(st, hops, p, now, ack_seq, snd_nxt, cnp, ints, nhop, win, base_rtt)
    return 0


@helper
def cc_on_timer(mode, st, p, now, timer_id):
    if mode == MODE_DCQCN:
        return dcqcn.on_timer(st, p, now, timer_id)
    return 0


@helper
def cc_timer_time(mode, st, timer_id):
    if mode == MODE_DCQCN:
        return dcqcn.timer_time(st, timer_id)
    return -1.0


@helper
def arm_timers(S, mode, q, flags):
    """Schedule a timer event for every timer the last call (re)armed."""
    if flags & 0xFF == 0:
        return
    st = S.qp_cc[q]
    for tid in range(MAX_TIMERS):
        if flags & (1 << tid):
            t = cc_timer_time(mode, st, tid)
            if t >= 0.0:
                ev_push(S, np.int64(t), EV_TIMER, q, tid)
