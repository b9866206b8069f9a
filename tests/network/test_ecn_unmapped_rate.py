"""Ports whose rate the ECN maps lack (the study's 512 Gb/s attachments), both readings of
``ecn_unmapped_rate`` (docs/network.md): "scale" gives KMIN/KMAX = 400 Gb/s entry × rate/400 Gb/s;
"zero" gives KMIN = KMAX = 0, so a data packet is marked whenever another waits behind it."""

from __future__ import annotations

import pytest
from helpers import star

from moesim.errors import MoesimError
from moesim.network import BACKENDS
from moesim.network.base import Flow
from moesim.network.params import NETWORK_MODES
from moesim.topology.model import GpuInfo, Link, NodeKind, Topology, TopoNode

DCQCN = NETWORK_MODES["roce_dcqcn"]
RATE = 512e9  # in no map


def test_scale_multiplies_the_400_gbps_entry_and_zero_reads_zero():
    assert DCQCN.switch.kmin_bytes(RATE) == pytest.approx(800e3 * 512 / 400)
    assert DCQCN.switch.kmax_bytes(RATE) == pytest.approx(3200e3 * 512 / 400)
    zero = DCQCN.with_overrides({"ecn_unmapped_rate": "zero"})
    assert zero.switch.kmin_bytes(RATE) == zero.switch.kmax_bytes(RATE) == 0.0
    # rates in the maps keep their entries
    assert zero.switch.kmin_bytes(400e9) == DCQCN.switch.kmin_bytes(400e9) == 800e3


def test_an_unknown_reading_is_a_one_line_error():
    with pytest.raises(MoesimError, match=r"cli: field 'ecn_unmapped_rate': 'half' is not allowed \(one of scale, zero\)"):
        DCQCN.with_overrides({"ecn_unmapped_rate": "half"}, "cli")


def tandem() -> Topology:
    """h0, h1 → a → b → h2: 512 Gb/s up to b, 400 Gb/s from b to h2, so port a→b is overloaded (two
    senders at 512) while the max-min bottleneck, where the fluid keeps the backlog, is b→h2."""
    hosts = [TopoNode(f"h{i}", NodeKind.GPU, i) for i in range(3)]
    edges = [("h0", "a", RATE), ("h1", "a", RATE), ("a", "b", RATE), ("b", "h2", 400e9)]
    links: list[Link] = []
    for u, v, bps in edges:
        links.append(Link(len(links), u, v, bps, 500e-9, "fabric"))
        links.append(Link(len(links), v, u, bps, 500e-9, "fabric"))
    gpus = [GpuInfo(f"h{i}", i, None, None, None) for i in range(3)]
    return Topology("tandem", (*hosts, TopoNode("a", NodeKind.SWITCH), TopoNode("b", NodeKind.SWITCH)),
                    tuple(links), tuple(gpus))


def run(backend_name: str, senders: int, unmapped: str, topology: Topology | None = None):
    """``senders`` flows of 300 kB into the last host of a 512 Gb/s star (or ``topology``) under DCQCN."""
    params = DCQCN.with_overrides({"ecn_unmapped_rate": unmapped})
    backend = BACKENDS.get(backend_name)(topology or star(senders + 1, bandwidth_bps=RATE), params)
    for i in range(senders):
        backend.start_flow(Flow(i, i, senders, 300_000), 0.0)
    while backend.active_flows:
        backend.advance_to(backend.next_completion_s(None))
    return backend


@pytest.mark.parametrize("unmapped", ["scale", "zero"])
def test_packet_a_lone_flow_never_queues_so_is_never_marked(unmapped):
    assert run("packet", 1, unmapped).stats()["ecn_marks"] == 0


def test_packet_two_to_one_marks_only_with_zero_thresholds():
    # the 2-to-1 queue stays far below the scaled KMIN (1024 kB): no mark; with KMIN = KMAX = 0 the
    # packets that leave another behind are marked, and DCQCN cuts
    assert run("packet", 2, "scale").stats()["ecn_marks"] == 0
    st = run("packet", 2, "zero").stats()
    assert st["ecn_marks"] > 0 and st["cnps"] > 0


def test_fluid_marks_at_a_zero_threshold_backlog_and_nothing_else():
    assert run("fluid", 1, "zero").diagnostics()["cnps"] == 0
    assert run("fluid", 2, "scale").diagnostics()["cnps"] == 0
    assert run("fluid", 2, "zero").diagnostics()["cnps"] > 0


@pytest.mark.parametrize("backend", ["packet", "fluid"])
def test_an_overloaded_zero_threshold_port_marks_even_with_the_backlog_downstream(backend):
    def cnps(unmapped: str) -> int:
        b = run(backend, 2, unmapped, tandem())
        return b.stats()["cnps"] if backend == "packet" else b.diagnostics()["cnps"]

    assert cnps("scale") == 0  # the 400 Gb/s backlog stays below its KMIN (800 kB)
    assert cnps("zero") > 0
