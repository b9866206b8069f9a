"""The kernel's congestion-control timers: an event for every timer an algorithm (re)armed.

The algorithms are called through the dispatch functions generated from the registry
(``moesim.network.cc.dispatch``), by the id in ``cfg[C_CC]``; flows exempt from CC use ``NO_CC``.
"""

from __future__ import annotations

import numpy as np

from moesim.network.cc.dispatch import cc_timer_time
from moesim.network.jit import helper
from moesim.network.packet.events import ev_push
from moesim.network.packet.layout import EV_TIMER

MAX_TIMERS = 8


@helper
def arm_timers(S, cc, q, flags):
    """Schedule a timer event for every timer the last call (re)armed."""
    if flags & 0xFF == 0:
        return
    st = S.qp_cc[q]
    for tid in range(MAX_TIMERS):
        if flags & (1 << tid):
            t = cc_timer_time(cc, st, tid)
            if t >= 0.0:
                ev_push(S, np.int64(t), EV_TIMER, q, tid)
