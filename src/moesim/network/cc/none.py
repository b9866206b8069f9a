"""No congestion control (CC_MODE 0 and every unhandled mode, incl. ASTRA-sim's shipped 12).

The rate stays at line rate; CNP flags and INT records are ignored (docs/reference-semantics.md A.1.3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from moesim.network.cc.base import CC_ALGORITHMS, MAX_RATE, RATE, CcAlgorithm, compiled

if TYPE_CHECKING:
    from moesim.network.params import NetworkParams


def pack_params(params: NetworkParams) -> np.ndarray:
    return np.zeros(1)


@compiled
def init(st, hops, p, line_rate):
    st[:] = 0.0
    st[RATE] = line_rate
    st[MAX_RATE] = line_rate


@compiled
def on_ack(st, hops, p, ack):
    return 0


@compiled
def on_timer(st, p, now, timer_id):
    return 0


@compiled
def timer_time(st, timer_id):
    return -1.0


ALGORITHM = CcAlgorithm(
    name="none", mode=0, slots={"rate": RATE, "max_rate": MAX_RATE}, timers=(),
    pack_params=pack_params, init=init, on_ack=on_ack, on_timer=on_timer, timer_time=timer_time,
    controls_rate=False,
)
CC_ALGORITHMS.register(
    "none", "No congestion control: line rate, bounded only by the BDP window and PFC",
    "docs/reference-semantics.md A.1.3 (CC_MODE 0 / 12)",
)(ALGORITHM)
