"""The kernel's event queue: a timing wheel of 1-ns buckets backed by a binary heap for far events.

Events within ``W`` ns of the cursor go to the wheel bucket of their time (a FIFO linked list through
the event pool); later ones wait in the heap, ordered by (time, insertion seq), and move to the
wheel as the cursor approaches them, before any event pushed directly for the same time. So events
run in (time, insertion order), the order of the ns-3 scheduler, at O(1) cost for the near events
that dominate a packet simulation.
"""

from __future__ import annotations

from moesim.network.jit import helper, inline_helper
from moesim.network.packet.layout import G_CUR, G_EV_FREE, G_EV_USED, G_OVF_N, G_SEQ, G_WHEEL_N, NIL

EMPTY = -2
BEYOND = -1


@helper
def _bucket_append(S, e, t):
    mask = S.wheel.shape[0] - 1
    b = t & mask
    tail = S.wheel[b, 1]
    if tail == NIL:
        S.wheel[b, 0] = e
    else:
        S.ev[tail].nxt = e
    S.wheel[b, 1] = e
    S.g[G_WHEEL_N] += 1


@helper
def _ovf_less(S, i, j):
    a = S.ovf[i]
    b = S.ovf[j]
    return a.time < b.time or (a.time == b.time and a.seq < b.seq)


@helper
def _ovf_swap(S, i, j):
    t, s, e = S.ovf[i].time, S.ovf[i].seq, S.ovf[i].ev
    S.ovf[i].time, S.ovf[i].seq, S.ovf[i].ev = S.ovf[j].time, S.ovf[j].seq, S.ovf[j].ev
    S.ovf[j].time, S.ovf[j].seq, S.ovf[j].ev = t, s, e


@helper
def _ovf_push(S, t, seq, e):
    n = S.g[G_OVF_N]
    S.ovf[n].time = t
    S.ovf[n].seq = seq
    S.ovf[n].ev = e
    S.g[G_OVF_N] = n + 1
    i = n
    while i > 0:
        parent = (i - 1) >> 1
        if _ovf_less(S, i, parent):
            _ovf_swap(S, i, parent)
            i = parent
        else:
            break


@helper
def _ovf_pop(S):
    e = S.ovf[0].ev
    n = S.g[G_OVF_N] - 1
    S.g[G_OVF_N] = n
    if n > 0:
        S.ovf[0].time, S.ovf[0].seq, S.ovf[0].ev = S.ovf[n].time, S.ovf[n].seq, S.ovf[n].ev
        i = 0
        while True:
            left = 2 * i + 1
            if left >= n:
                break
            c = left
            if left + 1 < n and _ovf_less(S, left + 1, left):
                c = left + 1
            if _ovf_less(S, c, i):
                _ovf_swap(S, c, i)
                i = c
            else:
                break
    return e


@helper
def _set_cursor(S, cur):
    """Move the cursor and pull heap events that now fall within the wheel's horizon."""
    S.g[G_CUR] = cur
    horizon = cur + S.wheel.shape[0]
    while S.g[G_OVF_N] > 0 and S.ovf[0].time < horizon:
        t = S.ovf[0].time
        e = _ovf_pop(S)
        _bucket_append(S, e, t)


@helper
def ev_push(S, t, kind, a, b):
    """Schedule an event at integer ns ``t`` (never before the cursor)."""
    g = S.g
    if t < g[G_CUR]:
        t = g[G_CUR]
    e = g[G_EV_FREE]
    g[G_EV_FREE] = S.ev[e].nxt
    g[G_EV_USED] += 1
    S.ev[e].time = t
    S.ev[e].kind = kind
    S.ev[e].a = a
    S.ev[e].b = b
    S.ev[e].nxt = NIL
    if t < g[G_CUR] + S.wheel.shape[0]:
        _bucket_append(S, e, t)
    else:
        _ovf_push(S, t, g[G_SEQ], e)
    g[G_SEQ] += 1


@inline_helper
def ev_next_time(S, limit):
    """Time of the next event if it is at or before ``limit``; BEYOND (cursor left ≤ limit) or EMPTY."""
    g = S.g
    mask = S.wheel.shape[0] - 1
    cur = g[G_CUR]
    if cur > limit:
        return BEYOND
    while True:
        if g[G_WHEEL_N] > 0:
            if S.wheel[cur & mask, 0] != NIL:
                return cur
            if cur >= limit:
                return BEYOND
            cur += 1
            _set_cursor(S, cur)
        else:
            if g[G_OVF_N] == 0:
                return EMPTY
            t = S.ovf[0].time
            if t > limit:
                if limit > cur:
                    _set_cursor(S, limit)
                return BEYOND
            cur = t
            _set_cursor(S, cur)


@inline_helper
def ev_pop(S):
    """Remove the head event of the cursor's bucket (call after ev_next_time returned a time)."""
    mask = S.wheel.shape[0] - 1
    b = S.g[G_CUR] & mask
    e = S.wheel[b, 0]
    nxt = S.ev[e].nxt
    S.wheel[b, 0] = nxt
    if nxt == NIL:
        S.wheel[b, 1] = NIL
    S.g[G_WHEEL_N] -= 1
    return e


@helper
def ev_free(S, e):
    S.ev[e].nxt = S.g[G_EV_FREE]
    S.g[G_EV_FREE] = e
    S.g[G_EV_USED] -= 1
