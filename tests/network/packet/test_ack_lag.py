"""Two opposite messages between the two hosts of a 512 Gb/s star, the second started δ = 3 µs late.

While both run, each host's link carries its data and the other message's ACKs (1 ns per 16 ns data
packet), so each message runs at 16/17 of line rate. The early one keeps its full rate for one one-way
latency L after the late one starts (until the late one's ACKs reach its NIC), and the late one stays
slowed for one L after the early one stops sending. So the late message ends later than δ after the
early one by an amount that grows with L by about 2L/17: the lag of the ACK stream behind its data,
which amplifies small start offsets at packet level (docs/calibration.md). The fast backends share
links without that lag and keep δ.
"""

from __future__ import annotations

import math

from helpers import star

from moesim.network import BACKENDS
from moesim.network.base import Flow
from moesim.network.params import network_mode

LATE_S = 3e-6
SIZE_BYTES = 256 << 10


def late_loss_ns(backend: str, delay_s: float) -> float:
    """How much later than δ the late message ends after the early one."""
    b = BACKENDS.get(backend)(star(2, 512e9, delay_s), network_mode("ib_cc0"))
    b.start_flow(Flow(0, 0, 1, SIZE_BYTES), 0.0)
    b.advance_to(LATE_S)
    b.start_flow(Flow(1, 1, 0, SIZE_BYTES), LATE_S)
    ends = {}
    while (t := b.next_completion_s()) < math.inf:
        ends.update(dict.fromkeys(b.advance_to(t), t))
    return (ends[1] - ends[0] - LATE_S) * 1e9


def one_way_ns(delay_s: float) -> float:
    """Two links and two store-and-forward hops of a 1036 B packet at 512 Gb/s (16 ns each)."""
    return 2 * delay_s * 1e9 + 32


def test_late_message_loses_about_2_17_of_the_extra_latency():
    short, long = 400e-9, 800e-9
    loss_short, loss_long = late_loss_ns("packet", short), late_loss_ns("packet", long)
    assert loss_short > 0 and loss_long > 0
    slope = (loss_long - loss_short) / (one_way_ns(long) - one_way_ns(short))
    assert 0.75 * 2 / 17 < slope < 1.25 * 2 / 17


def test_fast_backends_keep_the_start_offset():
    for backend in ("fluid", "flow"):
        assert abs(late_loss_ns(backend, 400e-9)) < 0.5
