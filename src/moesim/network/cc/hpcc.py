"""HPCC (CC_MODE 3), as in the NS-3 RDMA stack (docs/reference-semantics.md A.1.2).

Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019. Per ACK, every hop's
utilisation is estimated from the INT record the data packet collected and the previous record of
the same hop: ``u_i = txRate/B_i + min(qlen, qlen_prev)·R_nic/(B_i·W)``. The largest (single-rate
mode) is folded into an EWMA over the base RTT and the rate moves towards the target utilisation η:
``R = Rc/(U/η) + R_AI`` (or ``Rc + R_AI`` while fewer than MI_THRESH additive stages have run). A
"full" update (once per RTT: the ACK passes the sequence sent at the previous full update) commits
``Rc``; in between, fast-react updates only set the sending rate. Rate changes go through
``ChangeRate`` (FLAG_RATE_SHIFT) and the window follows the rate (VAR_WIN).

Deviations from the reference, by design: any number of hops (the reference stops updating beyond
5 INT slots); the hop line rate is the port's actual rate (the reference's 3-bit code maps unknown
rates to 25 Gb/s); counters do not wrap. The reference's quantisation is kept: byte counters in
units of 128·INT_MULTI B and queue lengths in units of 80·INT_MULTI B.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from moesim.network.cc.base import CC_ALGORITHMS, FLAG_RATE_SHIFT, MAX_RATE, RATE, CcAlgorithm, compiled
from moesim.schema import param

if TYPE_CHECKING:
    from moesim.network.params import NetworkParams

# state slots (RATE = m_rate, MAX_RATE = R_nic)
CUR_RATE, U, INC_STAGE, LAST_UPDATE_SEQ = range(2, 6)
# per-hop table columns
H_TIME, H_BYTES, H_QLEN, H_U, H_RATE, H_STAGE = range(6)
# INT record columns
I_TIME, I_BYTES, I_QLEN, I_RATE = range(4)
# parameter vector
P_ETA, P_MI_THRESH, P_RAI, P_MIN_RATE, P_FAST_REACT, P_MULTI_RATE, P_SAMPLE_FEEDBACK, P_INT_MULTI = range(8)

PARAM_NAMES = (
    "u_target", "mi_thresh", "rate_ai_bps", "min_rate_bps", "fast_react", "multi_rate", "sample_feedback",
    "int_multi",
)


@dataclass(frozen=True)
class HpccParams:
    """HPCC's own keys (U_TARGET, MI_THRESH, FAST_REACT, MULTI_RATE, SAMPLE_FEEDBACK, INT_MULTI); it
    also reads RATE_AI and MIN_RATE from ``RateParams``."""

    u_target: float = param(0.95, low=0, high=1, low_open=True)
    mi_thresh: int = 0
    fast_react: bool = True
    multi_rate: bool = False
    sample_feedback: bool = False
    int_multi: int = param(1, low=1, high=2**16)


def pack_params(params: NetworkParams) -> np.ndarray:
    h = params.cc_params(HpccParams)
    return np.array([
        h.u_target, float(h.mi_thresh), params.rate.rate_ai_bps, params.rate.min_rate_bps,
        float(h.fast_react), float(h.multi_rate), float(h.sample_feedback), float(h.int_multi),
    ])


@compiled
def init(st, hops, p, line_rate):
    st[:] = 0.0
    st[RATE] = line_rate
    st[MAX_RATE] = line_rate
    st[CUR_RATE] = line_rate
    st[U] = 1.0
    for i in range(hops.shape[0]):
        hops[i, :] = 0.0
        hops[i, H_U] = 1.0
        hops[i, H_RATE] = line_rate


@compiled
def _rule(p, cur_rate, u, stage, max_rate):
    """The rate rule: multiplicative towards η (or additive below MI_THRESH stages), clamped."""
    k = u / p[P_ETA]
    if k >= 1.0 or stage >= p[P_MI_THRESH]:
        new_rate = cur_rate / k + p[P_RAI] if k > 0.0 else max_rate
        new_stage = 0.0
    else:
        new_rate = cur_rate + p[P_RAI]
        new_stage = stage + 1.0
    return min(max(new_rate, p[P_MIN_RATE]), max_rate), new_stage


@compiled
def _update(st, hops, p, ack, fast):
    ints, nhop, win = ack.ints, ack.nhop, ack.win_bytes
    max_rate = st[MAX_RATE]
    ub = 128.0 * p[P_INT_MULTI]
    uq = 80.0 * p[P_INT_MULTI]
    t_base = float(ack.base_rtt_ns)
    multi = p[P_MULTI_RATE] != 0.0
    u_max = 0.0
    dt = 0.0
    updated_any = False
    new_rate = max_rate
    for i in range(nhop):
        qlen = np.floor(ints[i, I_QLEN] / uq) * uq
        if p[P_SAMPLE_FEEDBACK] != 0.0 and fast and qlen == 0.0:
            hop_rate_i = hops[i, H_RATE]
            new_rate = min(new_rate, hop_rate_i)
            continue
        tau = float(ints[i, I_TIME]) - hops[i, H_TIME]
        line = float(ints[i, I_RATE])
        qprev = np.floor(hops[i, H_QLEN] / uq) * uq
        if tau > 0.0:
            dbytes = (np.floor(ints[i, I_BYTES] / ub) - np.floor(hops[i, H_BYTES] / ub)) * ub
            tx_rate = dbytes * 8.0 / (tau * 1e-9)
            u = tx_rate / line + min(qlen, qprev) * max_rate / (line * float(win))
            updated_any = True
            if not multi:
                if u > u_max:
                    u_max = u
                    dt = tau
            else:
                tau_c = min(tau, t_base)
                hops[i, H_U] = (hops[i, H_U] * (t_base - tau_c) + u * tau_c) / t_base
                r_i, s_i = _rule(p, hops[i, H_RATE], hops[i, H_U], hops[i, H_STAGE], max_rate)
                new_rate = min(new_rate, r_i)
                if not fast:
                    hops[i, H_RATE] = r_i
                    hops[i, H_STAGE] = s_i
        elif multi:
            new_rate = min(new_rate, hops[i, H_RATE])
        hops[i, H_TIME] = ints[i, I_TIME]
        hops[i, H_BYTES] = ints[i, I_BYTES]
        hops[i, H_QLEN] = ints[i, I_QLEN]
    if not updated_any:
        return 0
    if not multi:
        if dt > t_base:
            dt = t_base
        st[U] = (st[U] * (t_base - dt) + u_max * dt) / t_base
        new_rate, new_stage = _rule(p, st[CUR_RATE], st[U], st[INC_STAGE], max_rate)
        if not fast:
            st[CUR_RATE] = new_rate
            st[INC_STAGE] = new_stage
    elif not fast:
        st[CUR_RATE] = new_rate
    st[RATE] = new_rate
    return FLAG_RATE_SHIFT


@compiled
def on_ack(st, hops, p, ack):
    """Full update once per RTT, fast react in between; the first ACK only stores the INT records."""
    ints = ack.ints
    if st[LAST_UPDATE_SEQ] == 0.0:
        for i in range(ack.nhop):
            hops[i, H_TIME] = ints[i, I_TIME]
            hops[i, H_BYTES] = ints[i, I_BYTES]
            hops[i, H_QLEN] = ints[i, I_QLEN]
        st[LAST_UPDATE_SEQ] = float(ack.snd_nxt)
        return 0
    if float(ack.ack_seq) > st[LAST_UPDATE_SEQ]:
        flags = _update(st, hops, p, ack, False)
        st[LAST_UPDATE_SEQ] = max(st[LAST_UPDATE_SEQ], float(ack.snd_nxt))
        return flags
    if p[P_FAST_REACT] != 0.0:
        return _update(st, hops, p, ack, True)
    return 0


@compiled
def on_timer(st, p, now, timer_id):
    return 0


@compiled
def timer_time(st, timer_id):
    return -1.0


ALGORITHM = CcAlgorithm(
    name="hpcc", mode=3,
    slots={"rate": RATE, "max_rate": MAX_RATE, "cur_rate": CUR_RATE, "u": U, "inc_stage": INC_STAGE,
           "last_update_seq": LAST_UPDATE_SEQ},
    timers=(), pack_params=pack_params, init=init, on_ack=on_ack, on_timer=on_timer, timer_time=timer_time,
    uses_int=True, params_type=HpccParams, param_names=PARAM_NAMES, hop_time_columns=(H_TIME,),
)
CC_ALGORITHMS.register(
    "hpcc", "HPCC: INT-based per-hop utilisation, multiplicative update towards eta plus additive increase",
    "Li et al., SIGCOMM 2019; docs/reference-semantics.md A.1.2 (CC_MODE 3)",
)(ALGORITHM)
