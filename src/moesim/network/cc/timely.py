"""TIMELY (CC_MODE 7): rate-based congestion control on the RTT and its gradient.

Mittal et al., "TIMELY: RTT-based Congestion Control for the Datacenter", SIGCOMM 2015, Algorithm 1.
It reads the RTT sample of ACKs (``AckSignal.rtt_ns``), nothing from the switches. A completion event
is an ACK that passes the sequence sent at the previous one (once per RTT; the paper's per-segment
completions, as the HPCC authors' ns-3 TIMELY takes them); the first only records the RTT. At each:

* ``rtt_diff ← (1 − α)·rtt_diff + α·(rtt − prev_rtt)``, ``gradient = rtt_diff / minRTT``;
* ``rtt < T_low``: ``R ← R + δ``;
* ``rtt > T_high``: ``R ← R·(1 − β·(1 − T_high/rtt))``;
* else ``gradient ≤ 0``: ``R ← R + δ``, or ``R + N·δ`` (hyperactive increase, HAI) once the gradient
  has been negative at N consecutive completion events;
* else ``R ← R·max(0, 1 − β·gradient)``.

The rate stays within [MIN_RATE, line rate]; changes take effect from the next packet. Defaults are
the paper's (α 0.875, β 0.8, T_low 50 µs, T_high 500 µs, minRTT 20 µs, δ 10 Mb/s, N 5); MIN_RATE is
the shared ``RateParams.min_rate_bps``. No timers, no INT, no ECN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from moesim.network.cc.base import CC_ALGORITHMS, MAX_RATE, RATE, CcAlgorithm, compiled, ns
from moesim.schema import param

if TYPE_CHECKING:
    from moesim.network.params import NetworkParams

# state slots (RATE = the enforced rate, MAX_RATE = line rate)
PREV_RTT, RTT_DIFF, GRADIENT, NEG_COUNT, LAST_UPDATE_SEQ = range(2, 7)
# parameter vector
P_ALPHA, P_BETA, P_T_LOW, P_T_HIGH, P_MIN_RTT, P_DELTA, P_HAI_N, P_MIN_RATE = range(8)

PARAM_NAMES = ("rtt_ewma_alpha", "md_beta", "t_low_s", "t_high_s", "min_rtt_s", "ai_delta_bps",
               "hai_completions", "min_rate_bps")


@dataclass(frozen=True)
class TimelyParams:
    """TIMELY's own parameters, with the paper's values (Mittal et al. 2015, §5)."""

    rtt_ewma_alpha: float = param(0.875, low=0, high=1, low_open=True)
    md_beta: float = param(0.8, low=0, high=1, low_open=True)
    t_low_s: float = param(50e-6, low=0, high=1)
    t_high_s: float = param(500e-6, low=0, high=1, low_open=True)
    min_rtt_s: float = param(20e-6, low=0, high=1, low_open=True)
    ai_delta_bps: float = param(10e6, low=0, high=1e13)
    hai_completions: int = param(5, low=1, high=2**31 - 1)


def pack_params(params: NetworkParams) -> np.ndarray:
    t = params.cc_params(TimelyParams)
    return np.array([
        t.rtt_ewma_alpha, t.md_beta, ns(t.t_low_s), ns(t.t_high_s), ns(t.min_rtt_s), t.ai_delta_bps,
        float(t.hai_completions), params.rate.min_rate_bps,
    ])


@compiled
def init(st, hops, p, line_rate):
    st[:] = 0.0
    st[RATE] = line_rate
    st[MAX_RATE] = line_rate


@compiled
def on_ack(st, hops, p, ack):
    """Algorithm 1 at each completion event; other ACKs, and ACKs without an RTT sample, do nothing."""
    if ack.rtt_ns < 0 or float(ack.ack_seq) <= st[LAST_UPDATE_SEQ]:
        return 0
    rtt = float(ack.rtt_ns)
    first = st[LAST_UPDATE_SEQ] == 0.0
    st[LAST_UPDATE_SEQ] = float(ack.snd_nxt)
    prev = st[PREV_RTT]
    st[PREV_RTT] = rtt
    if first:
        return 0
    alpha = p[P_ALPHA]
    st[RTT_DIFF] = (1.0 - alpha) * st[RTT_DIFF] + alpha * (rtt - prev)
    gradient = st[RTT_DIFF] / p[P_MIN_RTT]
    st[GRADIENT] = gradient
    st[NEG_COUNT] = st[NEG_COUNT] + 1.0 if gradient < 0.0 else 0.0
    rate = st[RATE]
    if rtt < p[P_T_LOW]:
        rate += p[P_DELTA]
    elif rtt > p[P_T_HIGH]:
        rate *= 1.0 - p[P_BETA] * (1.0 - p[P_T_HIGH] / rtt)
    elif gradient <= 0.0:
        rate += p[P_HAI_N] * p[P_DELTA] if st[NEG_COUNT] >= p[P_HAI_N] else p[P_DELTA]
    else:
        rate *= max(0.0, 1.0 - p[P_BETA] * gradient)
    st[RATE] = min(max(rate, p[P_MIN_RATE]), st[MAX_RATE])
    return 0


ALGORITHM = CcAlgorithm(
    name="timely", mode=7,
    slots={"rate": RATE, "max_rate": MAX_RATE, "prev_rtt_ns": PREV_RTT, "rtt_diff_ns": RTT_DIFF,
           "gradient": GRADIENT, "neg_count": NEG_COUNT, "last_update_seq": LAST_UPDATE_SEQ},
    pack_params=pack_params, init=init, on_ack=on_ack, uses_rtt=True,
    params_type=TimelyParams, param_names=PARAM_NAMES,
)
CC_ALGORITHMS.register(
    "timely", "TIMELY: RTT gradient with T_low/T_high thresholds, additive increase (HAI), multiplicative decrease",
    "Mittal et al., SIGCOMM 2015 (Algorithm 1); docs/network.md (CC_MODE 7)",
)(ALGORITHM)
