"""``nic_model``: moesim's NIC bookkeeping ("fast", the default) against ns-3's queue-pair vector ("ns3").

The two differ only in the order of events within one ns and in when a finished queue pair leaves the
round-robin, so on one-dimension collectives they agree to a fraction of a percent; ASTRA-sim inputs and
collective benchmarks, which reproduce the reference stack, take "ns3"."""

from __future__ import annotations

import pytest

from moesim.errors import MoesimError
from moesim.experiments.inputs import input_hash
from moesim.network.base import Flow
from moesim.network.packet import PacketBackend
from moesim.network.packet.layout import G_DATA_PKTS, G_EVENTS
from moesim.network.params import REFERENCE_PRESETS, NetworkParams
from moesim.system.microbench import CollectiveSpec, prepare_collective, run_collective
from moesim.system.spec import RunSpec
from moesim.topology.catalog import get_topology


def all_to_all(nic_model: str, preset: str) -> tuple[float, int, PacketBackend]:
    """An 8-GPU all-to-all of 256 KiB per pair on one switch: (last completion s, bytes, backend)."""
    params = REFERENCE_PRESETS[preset].with_overrides({"nic_model": nic_model})
    topology = get_topology("star:8", nic_switch_delay_s=params.transport.nic_switch_delay_s)
    net = PacketBackend(topology, params)
    size = 256 << 10
    flows = [Flow(8 * a + b, a, b, size, cc=True) for a in range(8) for b in range(8) if a != b]
    for f in flows:
        net.start_flow(f, 0.0)
    done, t = [], 0.0
    while net.active_flows:
        t = net.next_completion_s(None)
        done += net.advance_to(t)
    return t, sum(f.size_bytes for f in flows), net


@pytest.mark.parametrize("preset", ["none", "dcqcn", "hpcc"])
def test_the_models_agree_on_an_all_to_all(preset):
    fast, size_fast, _ = all_to_all("fast", preset)
    ns3, size_ns3, _ = all_to_all("ns3", preset)
    assert size_fast == size_ns3
    assert ns3 == pytest.approx(fast, rel=0.005)


def test_ns3_schedules_a_transmit_complete_event_per_packet():
    """ns-3 schedules the port's transmit-complete for every packet; "fast" only while a port has more to
    send, so it runs fewer events for the same data packets (at least one per packet fewer on the last
    packet of each burst)."""
    _, _, fast = all_to_all("fast", "none")
    _, _, ns3 = all_to_all("ns3", "none")
    assert fast.S.g[G_DATA_PKTS] == ns3.S.g[G_DATA_PKTS]
    assert ns3.S.g[G_EVENTS] > fast.S.g[G_EVENTS]


def test_the_default_is_left_out_of_the_run_key():
    base = RunSpec("deepseek-v4-flash", "1", "TP4EP8", backend="packet", overrides=(("tokens", 64),))
    fast = RunSpec("deepseek-v4-flash", "1", "TP4EP8", backend="packet",
                   overrides=(("nic_model", "fast"), ("tokens", 64)))
    ns3 = RunSpec("deepseek-v4-flash", "1", "TP4EP8", backend="packet", overrides=(("nic_model", "ns3"), ("tokens", 64)))
    assert input_hash(base) == input_hash(fast) != input_hash(ns3)
    fluid = RunSpec("deepseek-v4-flash", "1", "TP4EP8", backend="fluid", overrides=(("nic_model", "ns3"), ("tokens", 64)))
    assert input_hash(fluid) == input_hash(RunSpec("deepseek-v4-flash", "1", "TP4EP8", backend="fluid",
                                                   overrides=(("tokens", 64),)))


def test_collective_benchmarks_take_ns3_unless_told_otherwise():
    bench = prepare_collective(CollectiveSpec("all_reduce", "star:4", backend="packet", network="none"))
    assert bench.make_backend().params.packet.nic_model == "ns3"
    told = prepare_collective(CollectiveSpec("all_reduce", "star:4", backend="packet", network="none",
                                             overrides=(("nic_model", "fast"),)))
    assert told.make_backend().params.packet.nic_model == "fast"
    assert run_collective(bench, 1 << 20).time_s == pytest.approx(run_collective(told, 1 << 20).time_s, rel=0.005)


def test_an_unknown_model_is_one_line():
    with pytest.raises(MoesimError, match="'nic_model'.*fast, ns3"):
        NetworkParams().with_overrides({"nic_model": "ns2"})
