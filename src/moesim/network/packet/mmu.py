"""Switch memory management: shared buffer, PFC thresholds, ECN marking, INT stamping (A.2).

One shared buffer per switch (BUFFER_SIZE); per ingress port a 4096 B reserve and a headroom of
``rate·delay/8·3`` B; the dynamic threshold ``Th = (buffer − Σheadroom − Σreserve − shared_used) >>
a_shift`` (α = 1/8, halved per factor-two the port is faster than the NICs). Only the data class
(queue 1 here, the reference's class 3; ACKs share it) is accounted; PFC frames are not. A PAUSE goes
upstream when an ingress port uses headroom or reaches the threshold; a RESUME when it is back
``3072`` B under it with no headroom used. ECN marks at dequeue on the queue left behind: always
above KMAX, with probability ``PMAX·(q−KMIN)/(KMAX−KMIN)`` between KMIN and KMAX. Deviation: a
threshold that would be negative is 0 (the reference's unsigned arithmetic wraps to "never pause").
"""

from __future__ import annotations

import numpy as np

from moesim.network.jit import helper
from moesim.network.packet.layout import C_BUFFER, C_RESERVE, C_RESUME_OFFSET, G_RNG_DRAWS


@helper
def threshold(S, v, in_link):
    n = S.node[v]
    free = S.cfg[C_BUFFER] - n.total_hdrm - n.total_rsrv - n.shared_used
    if free <= 0:
        return np.int64(0)
    return free >> S.link[in_link].a_shift


@helper
def shared_used(S, in_link):
    over = S.port[in_link].ing_bytes - S.cfg[C_RESERVE]
    return over if over > 0 else np.int64(0)


@helper
def admit(S, v, in_link, size):
    """Admission of a data-class packet of ``size`` bytes arriving on ``in_link`` (False: drop)."""
    ing = S.port[in_link]
    if size + ing.hdrm_bytes > S.link[in_link].headroom and size + shared_used(S, in_link) > threshold(S, v, in_link):
        return False
    return True


@helper
def on_enqueue(S, v, in_link, size):
    """Charge the packet to reserve, shared pool or headroom; True if the ingress must now pause."""
    ing = S.port[in_link]
    reserve = S.cfg[C_RESERVE]
    n = ing.ing_bytes + size
    th = threshold(S, v, in_link)
    if n <= reserve:
        ing.ing_bytes += size
    elif n - reserve > th:
        ing.hdrm_bytes += size
    else:
        ing.ing_bytes += size
        S.node[v].shared_used += min(size, n - reserve)
    if ing.ing_paused:
        return False
    return ing.hdrm_bytes > 0 or shared_used(S, in_link) >= threshold(S, v, in_link)


@helper
def on_dequeue(S, v, in_link, size):
    """Release the packet's buffer; True if the ingress may now resume."""
    ing = S.port[in_link]
    from_hdrm = min(ing.hdrm_bytes, size)
    from_shared = min(size - from_hdrm, shared_used(S, in_link))
    ing.hdrm_bytes -= from_hdrm
    ing.ing_bytes -= size - from_hdrm
    S.node[v].shared_used -= from_shared
    if not ing.ing_paused or ing.hdrm_bytes != 0:
        return False
    su = shared_used(S, in_link)
    return su == 0 or su + S.cfg[C_RESUME_OFFSET] <= threshold(S, v, in_link)


@helper
def uniform(S):
    """xorshift64* in [0, 1): the seeded, deterministic RNG of ECN marking (draws are counted)."""
    S.g[G_RNG_DRAWS] += 1
    x = S.rng[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    S.rng[0] = x
    return float((x * np.uint64(2685821657736338717)) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@helper
def ecn_mark(S, out, qlen):
    lk = S.link[out]
    if qlen > lk.kmax:
        return True
    if qlen > lk.kmin:
        return uniform(S) < lk.pmax * (qlen - lk.kmin) / (lk.kmax - lk.kmin)
    return False


@helper
def int_stamp(S, p, out, now):
    """Append this egress hop (time, port tx bytes before the packet, queue left, rate) to the INT stack."""
    h = S.pk[p].nhop
    if h >= S.pk_int.shape[1]:
        return
    port = S.port[out]
    rec = S.pk_int[p, h]
    rec[0] = now
    rec[1] = port.tx_bytes
    rec[2] = port.q0_bytes + port.q1_bytes
    rec[3] = np.int64(S.link[out].rate_bps)
    S.pk[p].nhop = h + 1
