"""Static traffic of a placement: conservation of the collectives' volumes and the balance bound."""

from __future__ import annotations

import pytest

from moesim.system.run import prepare
from moesim.system.spec import RunSpec
from moesim.system.traffic import workload_traffic
from moesim.workload.costs import ep_alltoall_bytes, tp_allreduce_bytes


def _prepared(topology: str, strategy: str, placement: str = "contiguous"):  # type: ignore[no-untyped-def]
    spec = RunSpec("deepseek-v4-flash", topology, strategy, "ring_direct", "ib_cc0", "flow",
                   (("placement", placement), ("tokens", 512)))
    return prepare(spec)


def test_one_server_sends_nothing_through_nics() -> None:
    p = _prepared("6", "TP4EP8")
    traffic = workload_traffic(p.workload(), p.topology, p.placement.rank_to_gpu)
    assert traffic.nic_bytes() == {} and traffic.bound_s() > 0


def test_nic_bytes_equal_the_inter_server_volume() -> None:
    """Topology 1 (one GPU per server): every byte a rank sends leaves through its NIC. Per MoE layer a rank
    sends 2(TP−1)/TP·V_TP twice (two TP all-reduces) and (EP−1)/EP·V_EP twice (dispatch, combine)."""
    p = _prepared("1", "TP4EP8")
    model, layout = p.model, p.layout
    traffic = workload_traffic(p.workload(), p.topology, p.placement.rank_to_gpu)
    v_tp, v_ep = tp_allreduce_bytes(model, p.tokens), ep_alltoall_bytes(model, layout, p.tokens)
    per_rank = model.num_layers * 2 * 2 * 3 / 4 * v_tp + model.moe_layers * 2 * 7 / 8 * v_ep
    sent = [out for out, _ in traffic.nic_bytes().values()]
    assert sent == pytest.approx([per_rank] * 32, rel=1e-12)


def test_bound_orders_the_study_placements_as_the_simulation_does() -> None:
    """TP16EP2 on topology 4: packing the EP pairs into one PCIe switch beats packing TP groups."""
    bounds = {}
    for rule in ("contiguous", "ep-within-server"):
        p = _prepared("4", "TP16EP2", rule)
        bounds[rule] = workload_traffic(p.workload(), p.topology, p.placement.rank_to_gpu).bound_s()
    assert bounds["ep-within-server"] < bounds["contiguous"]
