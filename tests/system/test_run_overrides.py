"""Run overrides that reshape the topology: link bandwidth per link kind."""

from __future__ import annotations

import pytest

from moesim.errors import MoesimError
from moesim.system.run import prepare, simulate_run
from moesim.system.spec import RunSpec


def spec(**overrides: float) -> RunSpec:
    return RunSpec("deepseek-v4-flash", "3", "TP2EP16", "ring_direct", "ib_cc0", "flow", tuple(sorted(overrides.items())))


def test_only_links_of_the_named_kind_change():
    base, faster = prepare(spec()).topology, prepare(spec(upi_bandwidth_bps=800e9)).topology
    assert len(base.links) == len(faster.links)
    for a, b in zip(base.links, faster.links, strict=True):
        assert (a.src, a.dst, a.kind, a.delay_s) == (b.src, b.dst, b.kind, b.delay_s)
        assert b.bandwidth_bps == (800e9 if a.kind == "upi" else a.bandwidth_bps)
    assert sum(link.kind == "upi" for link in faster.links) == 32  # 16 servers, one UPI cable each way


def test_a_faster_fabric_shortens_communication_only():
    # topology 3 at TP2EP16: every EP all-to-all crosses the 400 Gb/s NIC-switch links
    slow, fast = simulate_run(spec()), simulate_run(spec(fabric_bandwidth_bps=800e9))
    assert fast.comm_s < slow.comm_s
    assert fast.gpu_s == pytest.approx(slow.gpu_s, rel=1e-12)


def test_a_non_positive_bandwidth_names_the_field():
    with pytest.raises(MoesimError, match="field 'pcie_bandwidth_bps'"):
        prepare(spec(pcie_bandwidth_bps=0))


@pytest.mark.parametrize("name,value", [("scheduling_policy", "RANDOM"), ("dataset_splits", 0),
                                        ("active_chunks", 1.5), ("peak_flops", -1.0)])
def test_bad_system_settings_name_the_field(name, value):
    with pytest.raises(MoesimError, match=f"field '{name}'"):
        prepare(spec(**{name: value}))
