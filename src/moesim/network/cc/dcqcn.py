"""DCQCN, Mellanox variant (CC_MODE 1), as in the NS-3 RDMA stack (docs/reference-semantics.md A.1.1).

Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015. The reference has
no byte counter: after a cut, the rate-increase timer alone drives fast recovery (stage <
FAST_RECOVERY_TIMES), additive increase (stage == FAST_RECOVERY_TIMES) and hyper increase (above).
CNPs are the CNP flag on ACKs; the first one sets alpha to 1 and starts the alpha (every
ALPHA_RESUME_INTERVAL) and rate-decrease (every RATE_DECREASE_INTERVAL, first one 1 ns late) timers.
Rate changes assign the rate directly (no pacing shift).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from moesim.network.cc.base import CC_ALGORITHMS, MAX_RATE, RATE, CcAlgorithm, compiled, ns
from moesim.schema import param

if TYPE_CHECKING:
    from moesim.network.params import NetworkParams

# state slots (RATE = Rc, MAX_RATE = line rate)
TARGET, ALPHA, ALPHA_CNP, DEC_CNP, FIRST_CNP, STAGE, T_ALPHA, T_DEC, T_INC = range(2, 11)
TIMER_ALPHA, TIMER_DEC, TIMER_INC = 0, 1, 2
# parameter vector
(P_ALPHA_NS, P_DEC_NS, P_RP_NS, P_FRT, P_G, P_CLAMP, P_RAI, P_RHAI, P_MIN_RATE,
 P_FIRST_FACTOR) = range(10)

PARAM_NAMES = (
    "alpha_resume_interval_s", "rate_decrease_interval_s", "rp_timer_s", "fast_recovery_times", "ewma_gain",
    "clamp_target_rate", "rate_ai_bps", "rate_hai_bps", "min_rate_bps", "rate_on_first_cnp",
)


@dataclass(frozen=True)
class DcqcnParams:
    """DCQCN's own timers and factors (the shared rate keys are ``RateParams``)."""

    alpha_resume_interval_s: float = param(1e-6, low=0, high=1, low_open=True)
    rate_decrease_interval_s: float = param(4e-6, low=0, high=1, low_open=True)
    clamp_target_rate: bool = False
    rp_timer_s: float = param(900e-6, low=0, high=1, low_open=True)
    fast_recovery_times: int = 1
    rate_on_first_cnp: float = param(1.0, low=0, high=1)


def pack_params(params: NetworkParams) -> np.ndarray:
    d, r = params.cc_params(DcqcnParams), params.rate
    return np.array([
        ns(d.alpha_resume_interval_s), ns(d.rate_decrease_interval_s), ns(d.rp_timer_s),
        float(d.fast_recovery_times), r.ewma_gain, float(d.clamp_target_rate),
        r.rate_ai_bps, r.rate_hai_bps, r.min_rate_bps, d.rate_on_first_cnp,
    ])


@compiled
def init(st, hops, p, line_rate):
    st[:] = 0.0
    st[RATE] = line_rate
    st[MAX_RATE] = line_rate
    st[TARGET] = line_rate
    st[ALPHA] = 1.0
    st[FIRST_CNP] = 1.0
    st[T_ALPHA] = -1.0
    st[T_DEC] = -1.0
    st[T_INC] = -1.0


@compiled
def on_ack(st, hops, p, ack):
    """A CNP-flagged ACK raises both 'CNP arrived' flags; the first CNP also starts the timers."""
    if not ack.cnp:
        return 0
    st[ALPHA_CNP] = 1.0
    st[DEC_CNP] = 1.0
    if st[FIRST_CNP] == 0.0:
        return 0
    st[ALPHA] = 1.0
    st[ALPHA_CNP] = 0.0
    st[T_ALPHA] = ack.now_ns + p[P_ALPHA_NS]
    st[T_DEC] = ack.now_ns + p[P_DEC_NS] + 1.0
    st[RATE] = p[P_FIRST_FACTOR] * st[RATE]
    st[TARGET] = st[RATE]
    st[FIRST_CNP] = 0.0
    return (1 << TIMER_ALPHA) | (1 << TIMER_DEC)


@compiled
def on_timer(st, p, now, timer_id):
    if timer_id == TIMER_ALPHA:
        if st[T_ALPHA] != now:
            return 0
        g = p[P_G]
        st[ALPHA] = (1.0 - g) * st[ALPHA] + (g if st[ALPHA_CNP] != 0.0 else 0.0)
        st[ALPHA_CNP] = 0.0
        st[T_ALPHA] = now + p[P_ALPHA_NS]
        return 1 << TIMER_ALPHA
    if timer_id == TIMER_DEC:
        if st[T_DEC] != now:
            return 0
        st[T_DEC] = now + p[P_DEC_NS]
        flags = 1 << TIMER_DEC
        if st[DEC_CNP] != 0.0:
            if p[P_CLAMP] != 0.0 or st[STAGE] != 0.0:
                st[TARGET] = st[RATE]
            st[RATE] = max(p[P_MIN_RATE], st[RATE] * (1.0 - st[ALPHA] / 2.0))
            st[STAGE] = 0.0
            st[DEC_CNP] = 0.0
            st[T_INC] = now + p[P_RP_NS]
            flags |= 1 << TIMER_INC
        return flags
    if timer_id == TIMER_INC:
        if st[T_INC] != now:
            return 0
        st[T_INC] = now + p[P_RP_NS]
        stage = st[STAGE]
        if stage == p[P_FRT]:
            st[TARGET] = min(st[TARGET] + p[P_RAI], st[MAX_RATE])
        elif stage > p[P_FRT]:
            st[TARGET] = min(st[TARGET] + p[P_RHAI], st[MAX_RATE])
        st[RATE] = (st[RATE] + st[TARGET]) / 2.0
        st[STAGE] = stage + 1.0
        return 1 << TIMER_INC
    return 0


@compiled
def timer_time(st, timer_id):
    if timer_id == TIMER_ALPHA:
        return st[T_ALPHA]
    if timer_id == TIMER_DEC:
        return st[T_DEC]
    if timer_id == TIMER_INC:
        return st[T_INC]
    return -1.0


@compiled
def next_rate_change(st):
    """The next timer that changes the rate: the increase timer, or the decrease timer once a CNP has
    arrived since its last run (the alpha timer never does)."""
    t = st[T_INC]
    if st[DEC_CNP] != 0.0 and st[T_DEC] >= 0.0 and (t < 0.0 or st[T_DEC] < t):
        t = st[T_DEC]
    return t


ALGORITHM = CcAlgorithm(
    name="dcqcn", mode=1,
    slots={"rate": RATE, "max_rate": MAX_RATE, "target_rate": TARGET, "alpha": ALPHA, "stage": STAGE},
    timers=("alpha", "decrease", "increase"),
    pack_params=pack_params, init=init, on_ack=on_ack, on_timer=on_timer, timer_time=timer_time,
    next_rate_change=next_rate_change, uses_ecn=True, uses_cnp=True,
    params_type=DcqcnParams, param_names=PARAM_NAMES, time_slots=(T_ALPHA, T_DEC, T_INC),
)
CC_ALGORITHMS.register(
    "dcqcn", "DCQCN (Mellanox variant): ECN/CNP-driven rate cuts, timer-driven recovery",
    "Zhu et al., SIGCOMM 2015; docs/reference-semantics.md A.1.1 (CC_MODE 1)",
)(ALGORITHM)
