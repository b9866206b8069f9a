"""DCTCP, rate-based (CC_MODE 8), as in the NS-3 RDMA stack (docs/reference-semantics.md A.1.3).

Alizadeh et al., "Data Center TCP (DCTCP)", SIGCOMM 2010, as the HPCC authors' ns-3 code runs it on
RDMA: the rate takes the place of the congestion window and the CNP flag of an ACK is the ECN echo.
Every ACK counts its echo; when an ACK passes the sequence sent at the previous update (once per
window), alpha becomes ``(1 − g)·alpha + g·min(1, echoes / batch)`` with ``batch`` the packets then in
flight plus one (the first such ACK only starts the count). An echo outside CWR cuts the rate to
``max(MIN_RATE, R·(1 − alpha/2))`` and enters CWR until an ACK passes the sequence sent at the cut;
outside CWR each new window adds DCTCP_RATE_AI, up to the line rate. Rate changes take effect from
the next packet; no INT, no timers.

DCTCP_RATE_AI is the reference's default (1000 Mb/s), not a parameter here. Unlike DCQCN's CNPs, the
echoes count per window of ACKs, which the fluid backend does not model: DCTCP runs on ``packet``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from moesim.network.cc.base import CC_ALGORITHMS, MAX_RATE, RATE, CcAlgorithm, compiled

if TYPE_CHECKING:
    from moesim.network.params import NetworkParams

# state slots (RATE = m_rate, MAX_RATE = line rate)
ALPHA, ECN_COUNT, BATCH, LAST_UPDATE_SEQ, CWR, HIGH_SEQ = range(2, 8)
# parameter vector
P_G, P_MIN_RATE, P_RATE_AI, P_MTU = range(4)

RATE_AI_BPS = 1000e6
"""DCTCP_RATE_AI: the additive increase per window outside CWR (the reference's default)."""
PARAM_NAMES = ("ewma_gain", "min_rate_bps", "packet_payload_bytes")


def pack_params(params: NetworkParams) -> np.ndarray:
    return np.array([params.rate.ewma_gain, params.rate.min_rate_bps, RATE_AI_BPS,
                     float(params.transport.packet_payload_bytes)])


@compiled
def init(st, hops, p, line_rate):
    st[:] = 0.0
    st[RATE] = line_rate
    st[MAX_RATE] = line_rate
    st[ALPHA] = 1.0


@compiled
def on_ack(st, hops, p, ack):
    """Count the echo, update alpha once per window, leave CWR, cut on an echo, else grow per window."""
    ack_seq, snd_nxt, cnp = ack.ack_seq, ack.snd_nxt, ack.cnp
    if cnp:
        st[ECN_COUNT] += 1.0
    new_batch = float(ack_seq) > st[LAST_UPDATE_SEQ]
    if new_batch:
        if st[LAST_UPDATE_SEQ] == 0.0:  # the first window: only start counting
            st[BATCH] = np.floor(float(snd_nxt) / p[P_MTU]) + 1.0
        else:
            g = p[P_G]
            st[ALPHA] = (1.0 - g) * st[ALPHA] + g * min(1.0, st[ECN_COUNT] / st[BATCH])
            st[ECN_COUNT] = 0.0
            st[BATCH] = np.floor(max(float(snd_nxt - ack_seq), 0.0) / p[P_MTU]) + 1.0
        st[LAST_UPDATE_SEQ] = float(snd_nxt)
    if st[CWR] != 0.0 and float(ack_seq) > st[HIGH_SEQ]:
        st[CWR] = 0.0
    if cnp and st[CWR] == 0.0:
        st[RATE] = max(p[P_MIN_RATE], st[RATE] * (1.0 - st[ALPHA] / 2.0))
        st[CWR] = 1.0
        st[HIGH_SEQ] = float(snd_nxt)
    elif st[CWR] == 0.0 and new_batch:
        st[RATE] = min(st[MAX_RATE], st[RATE] + p[P_RATE_AI])
    return 0


ALGORITHM = CcAlgorithm(
    name="dctcp", mode=8,
    slots={"rate": RATE, "max_rate": MAX_RATE, "alpha": ALPHA, "ecn_count": ECN_COUNT, "batch": BATCH,
           "last_update_seq": LAST_UPDATE_SEQ, "cwr": CWR, "high_seq": HIGH_SEQ},
    pack_params=pack_params, init=init, on_ack=on_ack, uses_ecn=True, param_names=PARAM_NAMES,
)
CC_ALGORITHMS.register(
    "dctcp", "DCTCP, rate-based: per-window ECN fraction (alpha), multiplicative cut, additive increase",
    "Alizadeh et al., SIGCOMM 2010; docs/reference-semantics.md A.1.3 (CC_MODE 8)",
)(ALGORITHM)
