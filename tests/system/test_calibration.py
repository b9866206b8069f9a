"""V4 Flash calibration (docs/study.md §8) on the flow backend: single ib_cc0 runs and orderings.

No parameter is fitted to these figures: the roofline constants and link parameters are the study's,
and V4 Flash's head_dim (128) is the one documented model choice (docs/models.md).
"""

from __future__ import annotations

import pytest

from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec

M = "deepseek-v4-flash"

SINGLE_RUNS_S = [
    ("6", "TP2EP16", "ring_direct", 0.1056),
    ("4", "TP2EP16", "ring_direct", 0.1615),
    ("6", "TP16EP2", "ring_direct", 0.6721),
    ("1", "TP16EP2", "ring_direct", 0.2896),
    pytest.param("4", "TP16EP2", "ring_direct", 0.6737, marks=[pytest.mark.slow, pytest.mark.xfail(
        strict=True, reason="+19 %: the EP combine's ranks end up to 143 µs apart (packet: 3.5 µs), and the "
        "TP ring all-reduce that follows takes 3x as long when staggered; see docs/calibration.md")]),
    ("5", "TP16EP2", "ring_direct", 0.6709),
    ("6", "TP2EP16", "dbt_direct", 0.1589),
    ("6", "TP16EP2", "dbt_direct", 1.1273),
    pytest.param("3", "TP16EP2", "ring_direct", 0.3946, marks=pytest.mark.xfail(
        strict=True, reason="+26 %: max-min sharing ignores the window unfairness that favours the UPI GPU at "
        "the shared NIC; the ring all-reduce then runs bunched message pairs; see docs/calibration.md")),
    ("1", "TP2EP16", "ring_direct", 0.131895),
    ("2", "TP2EP16", "ring_direct", 0.134670),
    ("5", "TP2EP16", "ring_direct", 0.137794),
]


def wall(topology: str, strategy: str, algorithm: str = "ring_direct", network: str = "ib_cc0") -> float:
    return simulate_run(RunSpec(M, topology, strategy, algorithm, network, "flow")).wall_s


@pytest.mark.parametrize("topology,strategy,algorithm,reference_s", SINGLE_RUNS_S)
def test_single_ib_cc0_runs_within_15_percent(topology, strategy, algorithm, reference_s):
    assert wall(topology, strategy, algorithm) == pytest.approx(reference_s, rel=0.15)


def test_strategy_order_and_ring_before_dbt_on_topology_1():
    walls = [wall("1", s) for s in ("TP2EP16", "TP4EP8", "TP8EP4", "TP16EP2")]
    assert walls == sorted(walls)
    assert wall("1", "TP8EP4", "ring_direct") < wall("1", "TP8EP4", "dbt_direct")


@pytest.mark.slow
def test_topology_6_fastest_at_tp2ep16_but_in_the_slow_group_at_tp16ep2():
    tp2 = {t: wall(t, "TP2EP16") for t in ("1", "2", "5", "6")}
    assert min(tp2, key=tp2.get) == "6"
    tp16 = {t: wall(t, "TP16EP2") for t in ("1", "5", "6")}
    assert tp16["6"] > 1.5 * tp16["1"] and tp16["5"] > 1.5 * tp16["1"]
