"""DCQCN stragglers in an all-to-all (research/fluid-accuracy.md, "study scale"): 8 GPUs of topology 1 exchange
2 MiB messages. Each GPU pushes 512 Gb/s of PCIe into a 400 Gb/s NIC port, so the NIC egress queue
passes KMIN; ECN marks fall at random, some flows collect several rate cuts and, with DCQCN's 900 µs
recovery timer, finish long after the rest. Without CC the seven flows of a NIC share it evenly."""

from __future__ import annotations

import statistics

from helpers import all_to_all

SIZE = 2 << 20
# 7 messages of 2 MiB leave each NIC: 7 × 2 MiB × 1036/1000 wire bytes at 400 Gb/s
CLOSED_FORM_S = 7 * SIZE * 1036 / 1000 * 8 / 400e9


def test_without_cc_the_flows_of_a_nic_end_together_near_the_closed_form():
    done, backend = all_to_all("packet", "ib_cc0", SIZE)
    assert backend.stats()["ecn_marks"] == 0 and backend.stats()["cnps"] == 0  # ENABLE_QCN 0
    assert CLOSED_FORM_S < max(done) < 1.1 * CLOSED_FORM_S
    assert min(done) > 0.98 * max(done)


def test_dcqcn_random_marks_leave_stragglers():
    base = max(all_to_all("packet", "ib_cc0", SIZE)[0])
    done, backend = all_to_all("packet", "roce_dcqcn", SIZE)
    st = backend.stats()
    # a marked packet's ACK carries the CNP flag back (docs/reference-semantics.md A.1)
    assert 0 < st["cnps"] <= st["ecn_marks"] and st["drops"] == 0
    assert max(done) > 2 * base  # the all-to-all ends with its slowest flow
    assert max(done) > 2 * statistics.median(done)  # a few stragglers, not a uniform slow-down
    assert min(done) < base  # flows cut less than their neighbours take the spare capacity
