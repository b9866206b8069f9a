"""NS-3 topology file (docs/reference-semantics.md A.2): hosts = ranks 0..N−1, every other node a switch."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest

from moesim.errors import MoesimError
from moesim.topology import NodeKind, Placement, Topology, get_topology, read_ns3_topology, write_ns3_topology
from moesim.topology.ns3_export import format_ns3_rate, ns3_cables, ns3_node_ids, ns3_topology_text


def expected_graph(topo: Topology, placement: Placement) -> nx.Graph:
    """The rule of A.2: rank r's GPU is node r; the other nodes follow in topology order from N."""
    ids = {topo.gpus[g].name: r for r, g in enumerate(placement.rank_to_gpu)}
    for n in topo.nodes:
        if n.kind != NodeKind.GPU:
            ids[n.name] = len(ids)
    g = nx.Graph()
    for n in topo.nodes:
        g.add_node(ids[n.name], host=n.kind == NodeKind.GPU)
    for lk in topo.links:
        g.add_edge(ids[lk.src], ids[lk.dst], rate_bps=lk.bandwidth_bps, delay_s=lk.delay_s, error_rate=0.0)
    return g


@pytest.mark.parametrize("name", ["1", "2", "3", "4", "5", "6"])
@pytest.mark.parametrize("delay", [0.7e-6, 1e-6])
def test_exported_file_parses_back_to_the_same_graph(tmp_path: Path, name: str, delay: float) -> None:
    topo = get_topology(name, delay)
    path = write_ns3_topology(topo, tmp_path / "topology.txt")
    parsed = read_ns3_topology(path)
    assert parsed.num_hosts == 32
    assert parsed.num_nodes == len(topo.nodes) and len(parsed.links) == len(topo.links) // 2
    assert nx.utils.graphs_equal(parsed.to_networkx(), expected_graph(topo, Placement.contiguous(32)))


def test_file_layout_and_units(tmp_path: Path) -> None:
    topo = get_topology("1", 1e-6)
    lines = write_ns3_topology(topo, tmp_path / "t.txt").read_text().splitlines()
    assert lines[0] == f"{len(topo.nodes)} {len(topo.nodes) - 32} {len(topo.links) // 2}"
    assert lines[1].split() == [str(i) for i in range(32, len(topo.nodes))]
    assert "0 32 512Gbps 0.0002ms 0" in lines  # GPU 0 ↔ its CPU (node 32): 512 Gbps, 0.2 µs
    assert any(line.endswith("400Gbps 0.001ms 0") for line in lines)  # NIC ↔ switch under RoCE: 1 µs


def test_placement_decides_host_ids(tmp_path: Path) -> None:
    topo = get_topology("4")
    placement = Placement(tuple(reversed(range(32))))  # rank 0 on the last GPU
    parsed = read_ns3_topology(write_ns3_topology(topo, tmp_path / "t.txt", placement)).to_networkx()
    assert nx.utils.graphs_equal(parsed, expected_graph(topo, placement))
    ids = {n.name: i for i, n in enumerate(n for n in topo.nodes if n.kind != NodeKind.GPU)}
    assert list(parsed.neighbors(0)) == [32 + ids[topo.gpus[31].pcie_switch]]


def test_reads_the_shipped_example_format(tmp_path: Path) -> None:
    """Like ASTRA-sim's 8_nodes_1_switch_topology.txt: 8 × 400 Gbps, 0.0005 ms."""
    text = "9 1 8\n8\n" + "".join(f"{i} 8 400Gbps 0.0005ms 0\n" for i in range(8))
    (tmp_path / "e.txt").write_text(text)
    parsed = read_ns3_topology(tmp_path / "e.txt")
    assert parsed.switch_ids == (8,) and parsed.num_hosts == 8
    assert {(lk.rate_bps, lk.delay_s, lk.error_rate) for lk in parsed.links} == {(400e9, 500e-9, 0.0)}


@pytest.mark.parametrize("text,pattern", [
    ("3 1 2\n2\n0 2 400Gbps 0.0005ms 0\n", r"header says 2 links, found 1"),
    ("3 1 1\n2\n0 2 400GBps 0.0005ms 0\n", r"line 3: cannot read '400GBps'"),
    ("3 1 1\n2\n0 9 400Gbps 0.0005ms 0\n", r"line 3: bad node ids 0 9"),
    ("3 1 1\n0\n1 2 400Gbps 1ms 0\n", r"hosts must be ids 0..N-1"),
    ("3 x 1\n", r"line 1: expected 'node_num switch_num link_num'"),
])
def test_bad_files_name_the_line(tmp_path: Path, text: str, pattern: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(MoesimError, match=rf"^{path}: .*{pattern}"):
        read_ns3_topology(path)


def ns3_paths(graph: nx.Graph, a: int, b: int) -> list[list[int]]:
    """NS-3's routes from host a to host b (A.2): the fewest-hop paths whose inner nodes are switches."""
    inner = graph.subgraph([v for v in graph if not graph.nodes[v]["host"] or v in (a, b)])
    return sorted(nx.all_shortest_paths(inner, a, b))


@pytest.mark.parametrize("name", ["hgx-h100:2", "mi300x:2", "hgx-h800:2:ls2", "gb200-nvl72:1", "4", "6"])
def test_file_for_moesims_routes_makes_ns3_take_them(tmp_path: Path, name: str) -> None:
    """Written with moesim_routes, the file gives NS-3 exactly moesim's routes between every two GPUs:
    its fewest-hop paths through switches are moesim's routes (hop count, then delay, NIC affinity)."""
    topo = get_topology(name)
    graph = read_ns3_topology(write_ns3_topology(topo, tmp_path / "t.txt", moesim_routes=True)).to_networkx()
    ids = ns3_node_ids(topo, None, ns3_cables(topo))
    for a in range(topo.num_gpus):
        for b in range(topo.num_gpus):
            if a != b:
                moesim = sorted([ids[topo.links[r[0]].src], *(ids[topo.links[lid].dst] for lid in r)]
                                for r in topo.routes(a, b))
                assert ns3_paths(graph, a, b) == moesim, (name, a, b)


def test_rail_servers_lose_only_the_cables_of_ns3s_detours(tmp_path: Path) -> None:
    """hgx-h100: PCIe switches 0–3 sit under CPU 0, so in the full file NS-3 also reaches rail 1 of the
    other server through CPU 0 (as many hops as the spines). The file for moesim's routes leaves out each
    PCIe switch's cable to its CPU and the CPUs' UPI cable (then joined to no GPU); the study
    topologies, on which NS-3 already routes as moesim, keep every cable."""
    topo = get_topology("hgx-h100:2")
    full = read_ns3_topology(write_ns3_topology(topo, tmp_path / "full.txt")).to_networkx()
    cpus = {i for name, i in ns3_node_ids(topo).items() if topo.node_by_name[name].kind == NodeKind.CPU}
    assert any(cpus & set(path) for path in ns3_paths(full, 0, 9))
    dropped = set(topo.cables()) - set(ns3_cables(topo))
    assert len(dropped) == 2 * 8 + 2
    for f, _ in dropped:
        ends = {topo.node_by_name[topo.links[f].src].kind, topo.node_by_name[topo.links[f].dst].kind}
        assert ends in ({NodeKind.PCIE_SWITCH, NodeKind.CPU}, {NodeKind.CPU})
    for name in ("1", "2", "3", "4", "5", "6"):
        study = get_topology(name)
        assert ns3_cables(study) == study.cables()
        assert ns3_topology_text(study, moesim_routes=True) == ns3_topology_text(study)


@pytest.mark.parametrize(("bps", "text"), [(400e9, "400Gbps"), (25.5e9, "25500Mbps"), (1234567.0, "1234567bps"),
                                           (1600e9 / 3, "533.3333333333333Gbps")])
def test_rates_are_written_exactly(tmp_path: Path, bps: float, text: str) -> None:
    """A rate reads back as the float written (ls3 spines: 1600/3 Gb/s); ns-3's DataRate keeps whole bit/s."""
    assert format_ns3_rate(bps) == text
    (tmp_path / "r.txt").write_text(f"2 1 1\n1\n0 1 {text} 0.001ms 0\n")
    assert read_ns3_topology(tmp_path / "r.txt").links[0].rate_bps == bps
