"""The four study network modes at packet level on study runs (docs/study.md §5).

V4 Flash with 512 tokens (an eighth of the study's; 256 where only equality is checked) keeps each run
to seconds; the traffic pattern is the study's. Topology 3 (two GPUs behind one NIC, one of them over UPI) is congested at TP16EP2:
the modes must differ. Topology 6 has no NIC: every flow stays inside the server, so the per-flow
policy exempts all of them from congestion control and the four modes must agree to the bit.
"""

from __future__ import annotations

import pytest

from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec

MODES = ("ib_cc0", "ib_hpcc", "roce_hpcc", "roce_dcqcn")

pytestmark = pytest.mark.slow


def walls(topology: str, tokens: int = 512) -> dict[str, float]:
    return {
        mode: simulate_run(RunSpec("deepseek-v4-flash", topology, "TP16EP2", "ring_direct", mode, "packet",
                                   (("tokens", tokens),))).wall_s
        for mode in MODES
    }


@pytest.fixture(scope="module")
def topology3() -> dict[str, float]:
    return walls("3")


def test_modes_differ_on_a_congested_run(topology3):
    values = sorted(topology3.values())
    assert all(b > a * (1 + 1e-4) for a, b in zip(values, values[1:], strict=False)), topology3
    # INT headers and the 95 % target cost HPCC time against no rate control
    assert topology3["ib_hpcc"] > topology3["ib_cc0"]


@pytest.mark.xfail(strict=True, reason="reference: roce_dcqcn 0.783 s vs ib_cc0 0.395 s; with the 512 Gb/s ECN "
                   "thresholds scaled as docs/study.md §5 asks, our queues stay below KMIN here and DCQCN never cuts its "
                   "rate (see docs/network-packet.md)")
def test_roce_dcqcn_is_slowest_as_in_the_reference(topology3):
    assert topology3["roce_dcqcn"] == max(topology3.values())


def test_roce_dcqcn_is_slowest_with_the_references_own_reading_of_the_ecn_maps(topology3):
    """With KMIN = KMAX = 0 at the 512 Gb/s ports (what the reference code reads for a rate its maps lack
    once its assertions are compiled out), the queue that two GPUs build towards their shared NIC is marked and roce_dcqcn is the
    slowest mode by far, as in the reference (0.783 s against 0.395 s under ib_cc0 at 4096 tokens)."""
    def zero(mode: str) -> float:
        return simulate_run(RunSpec("deepseek-v4-flash", "3", "TP16EP2", "ring_direct", mode, "packet",
                                    (("tokens", 512), ("ecn_unmapped_rate", "zero")))).wall_s

    others = {m: v for m, v in topology3.items() if m != "roce_dcqcn"}
    assert zero("roce_dcqcn") > 1.5 * max(others.values()), (zero("roce_dcqcn"), others)
    # HPCC does not read ECN marks (and the ib_* modes do not mark): roce_hpcc is unchanged
    assert zero("roce_hpcc") == topology3["roce_hpcc"]


def test_modes_agree_when_no_flow_is_congestion_controlled():
    results = walls("6", tokens=256)
    assert len(set(results.values())) == 1, results
