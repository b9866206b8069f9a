"""The kernel's event queue: a timing wheel of 1-ns buckets backed by a binary heap for far events.

Events within ``W`` ns of the cursor go to the wheel bucket of their time (a FIFO linked list through
the event pool); later ones wait in the heap, ordered by (time, insertion seq), and move to the
wheel as the cursor approaches them, before any event pushed directly for the same time. So events
run in (time, insertion order), the order of the ns-3 scheduler, at O(1) cost for the near events
that dominate a packet simulation.

The two event kinds that make up nearly all of a run have no record of their own: a packet on a wire
has exactly one pending arrival and a port at most one pending "transmit complete", so their events
are the packet's and the port's records, named by tagged ids (``PK_TAG + packet``, ``PORT_TAG + link``)
whose bucket link is the packet's ``nxt`` (unused while it is on a wire) or the port's ``ev_nxt``.
That spares the pool's allocation and keeps the event where its handler reads anyway; the order of
events (bucket append order, heap sequence numbers) is the same as with pooled records.
"""

from __future__ import annotations

from moesim.network.jit import helper, inline_helper
from moesim.network.packet.layout import G_CUR, G_EV_FREE, G_EV_USED, G_OVF_N, G_SEQ, G_WHEEL_N, NIL

EMPTY = -2
BEYOND = -1
PK_TAG = 1 << 29
"""Event ids from PK_TAG on are packets' arrivals (id − PK_TAG = packet; the pool stays below it)."""
PORT_TAG = 1 << 30
"""Event ids from PORT_TAG on are ports' transmit-completes (id − PORT_TAG = link)."""


@helper
def _set_nxt(S, e, nxt):
    """Set the bucket link of event ``e`` (pooled, a packet's arrival or a port's transmit-complete)."""
    if e >= PORT_TAG:
        S.port[e - PORT_TAG].ev_nxt = nxt
    elif e >= PK_TAG:
        S.pk[e - PK_TAG].nxt = nxt
    else:
        S.ev[e].nxt = nxt


@helper
def _get_nxt(S, e):
    if e >= PORT_TAG:
        return S.port[e - PORT_TAG].ev_nxt
    if e >= PK_TAG:
        return S.pk[e - PK_TAG].nxt
    return S.ev[e].nxt


@helper
def _bucket_append(S, e, t):
    mask = S.wheel.shape[0] - 1
    b = t & mask
    tail = S.wheel[b, 1]
    if tail == NIL:
        S.wheel[b, 0] = e
    else:
        _set_nxt(S, tail, e)
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
def _enqueue(S, t, e):
    """Put event ``e`` (its bucket link already NIL) at integer ns ``t`` (never before the cursor)."""
    g = S.g
    if t < g[G_CUR]:
        t = g[G_CUR]
    if t < g[G_CUR] + S.wheel.shape[0]:
        _bucket_append(S, e, t)
    else:
        _ovf_push(S, t, g[G_SEQ], e)
    g[G_SEQ] += 1


@helper
def ev_push(S, t, kind, a, b):
    """Schedule a pooled event at integer ns ``t`` (never before the cursor)."""
    g = S.g
    e = g[G_EV_FREE]
    g[G_EV_FREE] = S.ev[e].nxt
    g[G_EV_USED] += 1
    S.ev[e].time = t
    S.ev[e].kind = kind
    S.ev[e].a = a
    S.ev[e].b = b
    S.ev[e].nxt = NIL
    _enqueue(S, t, e)


@helper
def ev_push_arrive(S, t, p):
    """Schedule packet ``p``'s arrival at the far end of the link it is on (``p.in_link``) at ``t``."""
    S.pk[p].nxt = NIL
    _enqueue(S, t, PK_TAG + p)


@helper
def ev_push_txdone(S, t, link):
    """Schedule the transmit-complete of port ``link`` at ``t`` (the port has at most one pending)."""
    S.port[link].ev_nxt = NIL
    _enqueue(S, t, PORT_TAG + link)


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
            # skip empty buckets, then pull the heap once: the wheel holds nothing at or beyond the old
            # cursor + W, so every bucket passed is empty for its time, and the heap's events enter their
            # buckets in the order the step-by-step pull would give (no push happens in between)
            cur += 1
            while cur < limit and S.wheel[cur & mask, 0] == NIL:
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
    nxt = _get_nxt(S, e)
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
