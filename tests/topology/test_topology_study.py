"""Structural checks of the six study topologies against docs/study.md §4 (counts, links, routes)."""

from __future__ import annotations

import itertools

import networkx as nx
import pytest
from topo_helpers import node_path, route_delay_s

from moesim.topology import TOPOLOGIES, NodeKind, get_topology

NAMES = ["1", "2", "3", "4", "5", "6"]
US = 1e-6

# docs/study.md §4: servers, GPUs/server, CPUs/server, PCIe switches/server, NICs/server
SHAPE = {
    "1": (32, 1, 1, 0, 1),
    "2": (16, 2, 1, 1, 1),
    "3": (16, 2, 2, 0, 1),
    "4": (4, 8, 2, 2, 2),
    "5": (2, 16, 2, 4, 4),
    "6": (1, 32, 2, 8, 0),
}


def expected_cables(name: str) -> int:
    """Per server: one cable per GPU and NIC to its CPU/PCIe switch, one uplink per PCIe switch, the UPI
    cable when there are two CPUs, a full mesh between PCIe switches; plus one fabric cable per NIC."""
    servers, g, c, p, n = SHAPE[name]
    per_server = g + n + p + (1 if c == 2 else 0) + p * (p - 1) // 2
    return servers * (per_server + n)


@pytest.mark.parametrize("name", NAMES)
def test_counts(name: str) -> None:
    topo = get_topology(name)
    servers, g, c, p, n = SHAPE[name]
    kinds = [node.kind for node in topo.nodes]
    assert topo.num_gpus == kinds.count(NodeKind.GPU) == 32 == servers * g
    assert topo.num_servers == servers
    assert kinds.count(NodeKind.CPU) == servers * c
    assert kinds.count(NodeKind.PCIE_SWITCH) == servers * p
    assert kinds.count(NodeKind.NIC) == servers * n
    assert kinds.count(NodeKind.SWITCH) == (0 if name == "6" else 1)
    assert len(topo.links) == 2 * expected_cables(name)
    assert len(topo.cables()) == expected_cables(name)


@pytest.mark.parametrize("name", NAMES)
def test_registry_entries(name: str) -> None:
    entry = TOPOLOGIES.entry(name)
    assert entry.reference == "docs/study.md §4"
    assert entry.description and "\n" not in entry.description


@pytest.mark.parametrize("name", NAMES)
def test_every_cable_is_two_directions_with_study_parameters(name: str) -> None:
    topo = get_topology(name)
    g = topo.to_networkx()
    expected = {"pcie": (512e9, 0.2 * US), "p2p": (400e9, 0.1 * US), "upi": (400e9, 2 * US), "fabric": (400e9, 0.7 * US)}
    for link in topo.links:
        assert g.has_edge(link.dst, link.src)
        assert (link.bandwidth_bps, link.delay_s) == expected[link.kind], link
        kinds = {g.nodes[link.src]["kind"], g.nodes[link.dst]["kind"]}
        allowed = {"pcie": [{"gpu", "cpu"}, {"gpu", "pcie_switch"}, {"nic", "cpu"}, {"nic", "pcie_switch"},
                            {"pcie_switch", "cpu"}],
                   "p2p": [{"pcie_switch"}], "upi": [{"cpu"}], "fabric": [{"nic", "switch"}]}[link.kind]
        assert kinds in allowed, link


@pytest.mark.parametrize("name", NAMES)
def test_gpu_placement_information(name: str) -> None:
    topo = get_topology(name)
    g = topo.to_networkx()
    servers, per, _, p, n = SHAPE[name]
    for i, gpu in enumerate(topo.gpus):
        assert gpu.server == i // per  # contiguous placement: rank r on server r // G
        assert g.nodes[gpu.cpu]["kind"] == "cpu" and g.nodes[gpu.cpu]["server"] == gpu.server
        if p:
            assert gpu.pcie_switch == f"s{gpu.server}.psw{(i % per) // 4}"  # four consecutive ranks per switch
            assert g.has_edge(gpu.name, gpu.pcie_switch)
        else:
            assert gpu.pcie_switch is None
        if n == 0:
            assert gpu.nic is None
        elif p:
            assert g.has_edge(gpu.nic, gpu.pcie_switch)  # the NIC on its own PCIe switch
        else:
            assert gpu.nic == f"s{gpu.server}.nic0"  # the server's only NIC


@pytest.mark.parametrize("name", NAMES)
def test_every_gpu_pair_has_a_valid_route(name: str) -> None:
    topo = get_topology(name)
    for a, b in itertools.permutations(range(topo.num_gpus), 2):
        route = topo.route(a, b, flow_id=a * 7 + b)
        nodes = node_path(topo, route)
        assert nodes[0] == topo.gpus[a].name and nodes[-1] == topo.gpus[b].name
        assert len(set(nodes)) == len(nodes)  # loop-free
        if not topo.same_server(a, b):  # out through own NIC, in through the destination's NIC
            assert topo.gpus[a].nic in nodes and topo.gpus[b].nic in nodes
            assert nodes.index(topo.gpus[a].nic) < nodes.index(topo.gpus[b].nic)
            assert [topo.node_by_name[x].kind for x in nodes].count(NodeKind.NIC) == 2
        else:
            assert {topo.node_by_name[x].server for x in nodes} == {topo.gpus[a].server}


@pytest.mark.parametrize("name", NAMES)
def test_intra_server_routes_are_shortest_then_lowest_delay(name: str) -> None:
    """Oracle: networkx min-hop paths on the full graph, then the least delay among them."""
    topo = get_topology(name)
    g = topo.to_networkx()
    for a, b in itertools.permutations(range(min(topo.num_gpus, 16)), 2):
        if not topo.same_server(a, b):
            continue
        paths = list(nx.all_shortest_paths(g, topo.gpus[a].name, topo.gpus[b].name))
        best = min(sum(g.edges[u, v]["delay_s"] for u, v in itertools.pairwise(p)) for p in paths)
        route = topo.route(a, b)
        assert len(route) == len(paths[0]) - 1
        assert route_delay_s(topo, route) == pytest.approx(best, abs=1e-15)


@pytest.mark.parametrize("name", ["2", "4", "5", "6"])
def test_route_within_one_pcie_switch_stays_on_it(name: str) -> None:
    topo = get_topology(name)
    psw = topo.gpus[0].pcie_switch
    for b in range(1, 4 if name != "2" else 2):
        assert topo.gpus[b].pcie_switch == psw
        assert node_path(topo, topo.route(0, b)) == [topo.gpus[0].name, psw, topo.gpus[b].name]


def test_topology3_second_gpu_reaches_the_nic_over_upi() -> None:
    topo = get_topology("3")
    gpu1 = topo.gpus[1]
    assert gpu1.cpu == "s0.cpu1" and gpu1.nic == "s0.nic0"
    route = topo.route(1, 3)  # GPU 1 of server 0 → GPU 1 of server 1
    assert node_path(topo, route) == ["s0.gpu1", "s0.cpu1", "s0.cpu0", "s0.nic0", "sw0", "s1.nic0", "s1.cpu0",
                                      "s1.cpu1", "s1.gpu1"]
    # closed form: 0.2 + 2 + 0.2 + 0.7 | 0.7 + 0.2 + 2 + 0.2 µs
    assert route_delay_s(topo, route) == pytest.approx(6.2 * US, rel=1e-12)
    assert [topo.links[i].kind for i in route].count("upi") == 2


@pytest.mark.parametrize("name,other", [("4", 4), ("5", 4), ("5", 12), ("6", 31)])
def test_topologies_4_to_6_use_direct_switch_links(name: str, other: int) -> None:
    topo = get_topology(name)
    route = topo.route(0, other)
    assert [topo.links[i].kind for i in route] == ["pcie", "p2p", "pcie"]
    assert route_delay_s(topo, route) == pytest.approx(0.5 * US, rel=1e-12)  # 0.2 + 0.1 + 0.2 µs
    assert not any(topo.node_by_name[n].kind == NodeKind.CPU for n in node_path(topo, route))


@pytest.mark.parametrize("name", ["4", "5", "6"])
def test_pcie_switches_form_a_full_mesh(name: str) -> None:
    topo = get_topology(name)
    g = topo.to_networkx()
    psws = [n.name for n in topo.nodes if n.kind == NodeKind.PCIE_SWITCH and n.server == 0]
    assert all(g.has_edge(a, b) and g.edges[a, b]["kind"] == "p2p" for a, b in itertools.permutations(psws, 2))


def test_topology6_has_no_nic_and_no_network() -> None:
    topo = get_topology("6")
    assert not topo.nodes_of_kind(NodeKind.NIC) and not topo.nodes_of_kind(NodeKind.SWITCH)
    assert all(link.kind != "fabric" for link in topo.links)
    assert all(topo.same_server(0, b) for b in range(32))


@pytest.mark.parametrize("name", ["1", "2", "3", "4", "5"])
def test_ib_and_roce_nic_switch_delay(name: str) -> None:
    ib, roce = get_topology(name, 0.7e-6), get_topology(name, 1e-6)
    for a, b in zip(ib.links, roce.links, strict=True):
        assert (a.src, a.dst, a.bandwidth_bps) == (b.src, b.dst, b.bandwidth_bps)
        if a.kind == "fabric":
            assert (a.delay_s, b.delay_s) == (0.7e-6, 1e-6)
        else:
            assert a.delay_s == b.delay_s
    last = ib.num_gpus - 1
    assert ib.route(0, last) == roce.route(0, last)
    # a route between servers crosses two NIC–switch links: 2 × (1 − 0.7) µs longer under RoCE
    diff = route_delay_s(roce, roce.route(0, last)) - route_delay_s(ib, ib.route(0, last))
    assert diff == pytest.approx(0.6 * US, rel=1e-9)


def test_topology1_cross_server_route_closed_form() -> None:
    topo = get_topology("1")
    route = topo.route(0, 5)
    assert len(route) == 6  # gpu→cpu→nic→sw→nic→cpu→gpu
    assert route_delay_s(topo, route) == pytest.approx((4 * 0.2 + 2 * 0.7) * US, rel=1e-12)
    assert min(topo.links[i].bandwidth_bps for i in route) == 400e9
