"""8-to-1 incast on one 400 Gb/s switch: PFC without CC, HPCC's near-empty queue, DCQCN's ECN band.

Capacity of the bottleneck in payload terms: 400 Gb/s × 1000/1036 (1078 with HPCC's INT header).
"""

from __future__ import annotations

import numpy as np

from moesim.network.params import REFERENCE_PRESETS

CAP = 400e9
FAIR = CAP / 8
KMIN = REFERENCE_PRESETS["dcqcn"].switch.kmin_bytes(CAP)  # 800 KB at 400 Gb/s
WINDOW = (40_000, 300_000)  # ns: after HPCC's start-up burst, before the first flow ends


def jain(x: np.ndarray) -> float:
    return float(x.sum() ** 2 / (len(x) * (x ** 2).sum()))


def test_incast_without_cc_pauses_upstream_and_drops_nothing(incast_none):
    st = incast_none.backend.stats()
    assert st["pauses"] > 0 and st["drops"] == 0
    assert st["delivered_bytes"] == sum(incast_none.sizes)
    pfc = incast_none.backend.tables()["pfc"].to_pydict()
    # the switch pauses the senders' NICs (node type 0) and resumes them
    assert set(pfc["node_type"]) == {0} and set(pfc["type"]) == {0, 1}
    # the queue grows to the shared buffer's dynamic share, far beyond any ECN threshold
    assert incast_none.queue_b.max() > 5 * KMIN
    # and the link stays busy: payload goodput ≈ line rate × 1000/1036 (21-ns packets)
    good, _ = incast_none.window(*WINDOW)
    assert good.sum(axis=1).mean() > 0.97 * CAP * 1000 / 1036


def test_hpcc_incast_keeps_the_queue_near_zero_at_95_percent_utilisation(incast_hpcc):
    st = incast_hpcc.backend.stats()
    assert st["pauses"] == 0 and st["drops"] == 0
    assert st["delivered_bytes"] == sum(incast_hpcc.sizes)
    q = incast_hpcc.queue(*WINDOW)
    assert q.mean() < 8_000 and q.max() < 32_000
    good, _ = incast_hpcc.window(*WINDOW)
    wire_util = good.sum(axis=1).mean() * 1078 / 1000 / CAP
    assert 0.92 < wire_util < 0.98  # η = 0.95 of the wire


def test_hpcc_incast_converges_to_fair_shares(incast_hpcc):
    good, rates = incast_hpcc.window(*WINDOW)
    per_flow = good.mean(axis=0)
    assert jain(per_flow) > 0.98
    assert np.all(np.abs(per_flow / per_flow.mean() - 1) < 0.25)
    # within a few RTTs (2 µs each) the rates drop from line rate to about the fair share
    assert np.all(rates[0] < 1.5 * FAIR)


def test_dcqcn_incast_reaches_the_ecn_band_and_converges_more_slowly(incast_dcqcn, incast_hpcc):
    st = incast_dcqcn.backend.stats()
    assert st["drops"] == 0 and st["delivered_bytes"] == sum(incast_dcqcn.sizes)
    assert incast_dcqcn.queue_b.max() > KMIN
    d_good, d_rates = incast_dcqcn.window(*WINDOW)
    h_good, _ = incast_hpcc.window(*WINDOW)
    # HPCC holds the bottleneck busy; DCQCN's cuts (alpha starts at 1) leave it idle for long stretches
    assert h_good.sum(axis=1).min() > 0.7 * CAP
    assert d_good.sum(axis=1).min() < 0.5 * CAP
    assert d_rates.min() < FAIR / 10
    # and it needs far longer to finish the same bytes
    h_end = incast_hpcc.times_ns[-1]
    d_end = incast_dcqcn.times_ns[-1]
    assert d_end > 1.5 * h_end
