"""Server templates (hgx-h100/h800/h20/h200/b200, mi300x, gb200-nvl72), GPU domains and the rail-optimized fabric.

Structural tests re-derive what each template must hold from its data sheet (bandwidths per direction:
a data sheet's "total" NVLink bandwidth counts both directions) and check every route against the
rules: inside a server over the GPU interconnect only, across servers through the GPU's own NIC, and
on a rail-optimized fabric GPU k ↔ GPU k over rail k's leaf alone.
"""

from __future__ import annotations

import time
from pathlib import Path

import networkx as nx
import pytest
from test_topology_ns3 import expected_graph
from topo_helpers import node_path

from moesim.errors import MoesimError
from moesim.topology import (
    NodeKind,
    Placement,
    Topology,
    build_topology,
    dump_cluster_yaml,
    get_cluster_spec,
    get_topology,
    load_cluster_yaml,
    read_ns3_topology,
    write_ns3_topology,
)
from moesim.topology.gpus import GPU_MODELS
from moesim.topology.templates import SERVER_TEMPLATES

GBYTE_PER_S = 8e9  # 1 GB/s in bit/s

# name → (GPUs per server, NICs per server, NVSwitch nodes per server, GPU-link bandwidth per direction
#         in bit/s, GPU links per GPU), from the data sheets cited in templates.py
SHEETS = {
    "hgx-h100": (8, 8, 1, 900 / 2 * GBYTE_PER_S, 1),     # NVLink 4: 900 GB/s total per GPU
    "hgx-h800": (8, 8, 1, 400 / 2 * GBYTE_PER_S, 1),     # H800 sheet: NVLink 400 GB/s; DeepSeek: 8 × CX7 400G
    "hgx-h20": (8, 8, 1, 900 / 2 * GBYTE_PER_S, 1),      # H20: NVLink 900 GB/s
    "hgx-h200": (8, 8, 1, 900 / 2 * GBYTE_PER_S, 1),     # H200 sheet: NVLink 900 GB/s; DGX H200: 8 × CX7 400G
    "hgx-b200": (8, 8, 1, 1800 / 2 * GBYTE_PER_S, 1),    # HGX B200: NVLink 5 1.8 TB/s; DGX B200: 8 × CX7 400G
    "mi300x": (8, 8, 0, 128 / 2 * GBYTE_PER_S, 7),       # 7 Infinity Fabric links, 128 GB/s bidirectional
    "gb200-nvl72": (72, 72, 1, 1800 / 2 * GBYTE_PER_S, 1),  # 1.8 TB/s total per GPU
}
NIC_BPS = 400e9  # ConnectX-7


def nvlink_links(topo: Topology, node: str) -> list:
    return [lk for lk in topo.links if lk.src == node and lk.kind == "nvlink"]


@pytest.mark.parametrize("name", sorted(SHEETS))
@pytest.mark.parametrize("servers", [1, 3])
def test_counts_and_bandwidths_follow_the_data_sheets(name: str, servers: int) -> None:
    gpus, nics, nvswitches, gpu_bps, gpu_links = SHEETS[name]
    topo = get_topology(f"{name}:{servers}")
    kinds = [n.kind for n in topo.nodes]
    assert topo.num_gpus == kinds.count(NodeKind.GPU) == servers * gpus
    assert kinds.count(NodeKind.NIC) == servers * nics
    assert kinds.count(NodeKind.NVSWITCH) == servers * nvswitches
    # rail-optimized, one leaf group (≤ 32 servers): one leaf per rail plus 8 spines
    assert kinds.count(NodeKind.SWITCH) == nics + 8
    for g in topo.gpus:
        links = nvlink_links(topo, g.name)
        assert len(links) == gpu_links and {lk.bandwidth_bps for lk in links} == {gpu_bps}
        assert sum(lk.bandwidth_bps for lk in links) == pytest.approx(
            gpu_bps * gpu_links)  # per GPU and direction: 450 GB/s, 7 × 64 GB/s, 900 GB/s
    nic_links = [lk for lk in topo.links if topo.node_by_name[lk.src].kind == NodeKind.NIC and lk.kind == "fabric"]
    assert len(nic_links) == servers * nics and {lk.bandwidth_bps for lk in nic_links} == {NIC_BPS}
    # GPU k uses NIC k of its server (its affinity), and every NIC serves exactly one GPU
    for i, g in enumerate(topo.gpus):
        assert g.nic == f"s{g.server}.nic{i % gpus}"


def check_routes(topo: Topology, pairs: list[tuple[int, int]]) -> None:
    """Inside a server: NVLink links only (via the NVSwitch, or the one direct mesh link). Across servers:
    out through the source GPU's own NIC and in through the destination GPU's own NIC."""
    for a, b in pairs:
        ga, gb = topo.gpus[a], topo.gpus[b]
        for route in topo.routes(a, b):
            path = node_path(topo, route)
            assert path[0] == ga.name and path[-1] == gb.name
            if ga.server == gb.server:
                assert {topo.links[i].kind for i in route} == {"nvlink"}
                assert path[1:-1] in ([], [f"s{ga.server}.nvswitch"])
            else:
                nics = [n for n in path if topo.node_by_name[n].kind == NodeKind.NIC]
                assert nics == [ga.nic, gb.nic], path
                assert all(topo.node_by_name[n].server is None for n in path[path.index(ga.nic) + 1:path.index(gb.nic)])


@pytest.mark.parametrize("name", ["hgx-h100:3", "mi300x:3", "hgx-h800:3:ls", "hgx-h20:2", "hgx-h200:2:ls2",
                                  "hgx-b200:3"])
def test_every_gpu_pair_routes_inside_its_domain_or_through_its_own_nic(name: str) -> None:
    topo = get_topology(name)
    check_routes(topo, [(a, b) for a in range(topo.num_gpus) for b in range(topo.num_gpus) if a != b])


def test_rack_scale_domain_routes_inside_the_rack_and_through_own_nics() -> None:
    topo = get_topology("gb200-nvl72:2")
    sample = range(0, topo.num_gpus, 5)
    check_routes(topo, [(a, b) for a in sample for b in range(topo.num_gpus) if a != b])


def test_nvswitch_domain_is_two_hops_and_mesh_one_hop_for_every_pair() -> None:
    hgx, mi = get_topology("hgx-h100"), get_topology("mi300x")
    for a in range(8):
        for b in range(8):
            if a != b:
                assert len(hgx.route(a, b)) == 2 and len(mi.route(a, b)) == 1


@pytest.mark.parametrize("name", ["hgx-h100:4", "mi300x:3", "gb200-nvl72:2", "hgx-h800:4", "hgx-h20:2", "hgx-h200:2",
                                  "hgx-b200:3"])
def test_rail_optimized_same_rail_stays_on_its_leaf_other_rails_cross_a_spine(name: str) -> None:
    topo = get_topology(name)
    per = SHEETS[name.split(":")[0]][0]
    servers = topo.num_gpus // per
    for k in (0, per - 1):
        for sa in range(servers):
            for sb in range(servers):
                if sa == sb:
                    continue
                a, b = sa * per + k, sb * per + k
                for route in topo.routes(a, b):
                    path = node_path(topo, route)
                    fabric = [n for n in path if topo.node_by_name[n].server is None]
                    assert fabric == [f"rail{k}-leaf0"], path  # NIC → rail-k leaf → NIC, never a spine
    a, b = 0, per + 1  # GPU 0 of server 0 → GPU 1 of server 1: rail 0 leaf, a spine, rail 1 leaf
    fabric = [n for n in node_path(topo, topo.route(a, b)) if topo.node_by_name[n].server is None]
    assert fabric[0] == "rail0-leaf0" and fabric[1].startswith("spine") and fabric[2] == "rail1-leaf0"


def test_classic_leaf_spine_with_oversubscription() -> None:
    # 8 NICs per server → 4 servers per 32-port leaf, 8 spines; 3:1 → each uplink 4·8·400G / (3·8)
    topo = get_topology("mi300x:8:ls3")
    uplinks = [lk for lk in topo.links if lk.src.startswith("leaf") and lk.dst.startswith("spine")]
    assert len(uplinks) == 2 * 8 and {lk.bandwidth_bps for lk in uplinks} == {4 * 8 * 400e9 / (3 * 8)}
    assert get_cluster_spec("mi300x:8:ls").fabric.oversubscription == 1.0
    check_routes(topo, [(0, b) for b in range(topo.num_gpus) if b])


def test_rail_groups_beyond_one_leaf_per_rail() -> None:
    # 40 servers, 32 per rail leaf: two groups; server 35's NIC 3 sits on rail3-leaf1
    topo = get_topology("hgx-h100:40")
    assert "rail3-leaf1" in topo.node_by_name
    fabric = [n for n in node_path(topo, topo.route(3, 35 * 8 + 3)) if topo.node_by_name[n].server is None]
    assert fabric[0] == "rail3-leaf0" and fabric[1].startswith("spine") and fabric[2] == "rail3-leaf1"


def test_study_topologies_still_route_over_pcie() -> None:
    """The NVLink-first rule changes nothing where no nvlink link exists (topology 4: GPU 0 → GPU 1 on psw0)."""
    topo = get_topology("4")
    assert node_path(topo, topo.route(0, 1)) == ["s0.gpu0", "s0.psw0", "s0.gpu1"]


def test_ring_all_reduce_in_one_nvswitch_domain_matches_the_closed_form() -> None:
    """TP8 on one hgx-h100 server, flow backend, no congestion control. Per chunk (K = 4 chunks of
    D = S/K, one after another): 2(n−1) ring steps of m = D/n bytes, each step
        4δ + (min(1000, m) + 36)/C + 2·48/C + m·(1000 + 36 + 48)/(1000·C)
    (data out and back over GPU → NVSwitch → GPU, δ = 0.1 µs per hop; the last packet stored at the
    switch; two ACK transmissions; every GPU's link carries one data stream and the ACKs of the stream
    it receives), plus (2n−1) bundle delays of 10 ns and (n−1) reductions of 3·⌊m / 1.6 TB/s⌋ ns
    (docs/system.md). C = 450 GB/s, the NVLink bandwidth per direction: the data term is
    2(n−1)/n · S / C × 1.084."""
    from moesim.system.collectives.base import StepTiming
    from moesim.system.microbench import CollectiveSpec, prepare_collective, run_collective

    size, n, chunks = 64 << 20, 8, 4
    bench = prepare_collective(CollectiveSpec("all_reduce", "hgx-h100", 0, "ring", "none", "flow", ()))
    assert bench.ranks == n and bench.settings.dataset_splits == chunks
    c, delay = 450e9, 0.1e-6
    m = size // chunks // n
    step = 4 * delay + (min(1000, m) + 36) / c + 2 * 48 / c + m * 1084 / 1000 / c
    timing = StepTiming()
    per_chunk = 2 * (n - 1) * step + (2 * n - 1) * timing.endpoint_delay_s + (n - 1) * timing.reduction_s(m)
    assert run_collective(bench, size).time_s == pytest.approx(chunks * per_chunk, rel=1e-9)


@pytest.mark.parametrize("name", ["hgx-h100:2", "mi300x:2:ls2", "gb200-nvl72:2", "hgx-h800:2:ls2", "hgx-b200:2",
                                  "hgx-h100:2:ls3", "mi300x:2:ls3"])  # ls3: spines at 1600/3 Gb/s
def test_yaml_round_trip_and_ns3_export(tmp_path: Path, name: str) -> None:
    spec = get_cluster_spec(name)
    path = tmp_path / "t.yaml"
    path.write_text(dump_cluster_yaml(spec), encoding="utf-8")
    again = load_cluster_yaml(path)
    assert again.server == spec.server and again.fabric == spec.fabric and again.num_servers == spec.num_servers
    topo, rebuilt = get_topology(name), build_topology(again, 0.7e-6)
    assert topo.links == rebuilt.links and topo.gpus == rebuilt.gpus
    ns3 = read_ns3_topology(write_ns3_topology(topo, tmp_path / "topology.txt"))
    assert ns3.num_hosts == topo.num_gpus
    assert nx.utils.graphs_equal(ns3.to_networkx(), expected_graph(topo, Placement.contiguous(topo.num_gpus)))


def test_drawings_show_the_domain(tmp_path: Path) -> None:
    from moesim.topology.draw import render_topology

    hgx = render_topology(get_topology("hgx-h100:2"), "svg").decode()
    assert "s0.nvswitch" in hgx and "NVSwitch (GPU interconnect)" in hgx and "rail7-leaf0" in hgx
    mi = render_topology(get_topology("mi300x:2"), "svg").decode()
    assert "full mesh K8: 28 direct GPU links" in mi and "s0.nvswitch" not in mi
    assert "s0.gpu71" in render_topology(get_topology("gb200-nvl72:2"), "svg").decode()


def test_templates_are_registered_with_a_description_and_a_source() -> None:
    assert SERVER_TEMPLATES.names() == ["gb200-nvl72", "hgx-b200", "hgx-h100", "hgx-h20", "hgx-h200", "hgx-h800",
                                        "mi300x"]
    for entry in SERVER_TEMPLATES:
        assert entry.description and any(w in entry.reference for w in ("data sheet", "page", "specification"))
        assert entry.obj.gpu in GPU_MODELS


@pytest.mark.parametrize(("name", "pattern"), [
    ("hgx-h100:0", r"topology 'hgx-h100:0': the server count '0' is not a positive integer \(allowed: hgx-h100, "
                   r"hgx-h100:N, hgx-h100:N:FABRIC\)"),
    ("mi300x:two", r"the server count 'two' is not a positive integer"),
    ("mi300x:2:torus", r"topology 'mi300x:2:torus': unknown fabric 'torus' \(allowed: rail, ls, ls<R>"),
    ("mi300x:2:ls0.5", r"unknown fabric 'ls0.5'"),
    ("hgx-h100:999999", r"field 'servers': 999999 servers and the fabric make .* devices, more than a cluster may have"),
    ("h100:4", r"unknown topology 'h100:4' \(allowed: 1, 2, 3, 4, 5, 6, gb200-nvl72\[:N\[:FABRIC\]\]"),
])
def test_bad_template_names_are_one_line_errors(name: str, pattern: str) -> None:
    with pytest.raises(MoesimError, match=pattern) as err:
        get_topology(name)
    assert "\n" not in str(err.value)


SERVER = """
servers: 2
server:
  gpus: [gpu0, gpu1, gpu2, gpu3]
  nics: [nic0, nic1]
  gpu_domain: {domain}
  links:
    - {{a: gpu0, b: nic0, bandwidth: 512Gbps, delay: 0.2us}}
    - {{a: gpu1, b: nic0, bandwidth: 512Gbps, delay: 0.2us}}
    - {{a: gpu2, b: nic1, bandwidth: 512Gbps, delay: 0.2us}}
    - {{a: gpu3, b: nic1, bandwidth: 512Gbps, delay: 0.2us}}
fabric: {fabric}
"""
NVS = "{kind: nvswitch, bandwidth: 3600Gbps, delay: 0.5us}"  # slower than GPU → NIC → GPU over PCIe (0.4 µs)
RAIL = "{kind: rail_optimized, spines: 2}"


def test_yaml_domain_and_rail_fabric_build(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(SERVER.format(domain=NVS, fabric=RAIL), encoding="utf-8")
    topo = get_topology(str(path))
    assert [n.name for n in topo.nodes if n.kind == NodeKind.NVSWITCH] == ["s0.nvswitch", "s1.nvswitch"]
    assert topo.meta_value("gpu_domain") == "NVSwitch, 3600 Gbps per GPU and direction"
    check_routes(topo, [(a, b) for a in range(8) for b in range(8) if a != b])  # NVLink first, though slower
    # two GPUs share NIC 0, so both rails carry two GPUs; GPU 1 of server 0 ↔ GPU 0 of server 1: rail 0 leaf
    fabric = [n for n in node_path(topo, topo.route(1, 4)) if topo.node_by_name[n].server is None]
    assert fabric == ["rail0-leaf0"]


@pytest.mark.parametrize(("domain", "fabric", "pattern"), [
    ("{kind: torus, bandwidth: 1Gbps, delay: 1us}", RAIL,
     r"field 'server.gpu_domain.kind': unknown GPU domain 'torus' \(allowed: mesh, nvswitch\)"),
    ("{kind: mesh, delay: 1us}", RAIL, r"field 'server.gpu_domain.bandwidth': missing \(allowed: kind, bandwidth, delay\)"),
    ("{kind: mesh, bandwidth: 1Gbps, delay: 1us, links: 7}", RAIL,
     r"field 'server.gpu_domain.links': unknown key \(allowed: kind, bandwidth, delay\)"),
    ("{kind: nvswitch, bandwidth: 450GB, delay: 1us}", RAIL,
     r"field 'server.gpu_domain.bandwidth': cannot read '450GB'"),
    ("{kind: nvswitch, bandwidth: 2000Tbps, delay: 1us}", RAIL,
     r"field 'server.gpu_domain.bandwidth': bandwidth 2000000000000000.0 bit/s is out of range \(allowed: 1Mbps..1000Tbps\)"),
    ("[nvswitch]", RAIL, r"field 'server.gpu_domain': expected a mapping, got list"),
    (NVS, "{kind: rail_optimized, spines: 0}", r"field 'fabric.spines': must be an integer ≥ 1, got 0"),
    (NVS, "{kind: rail_optimized, oversubscription: 0.5}", r"field 'fabric.oversubscription': must be a number from 1"),
    (NVS, "{kind: rail_optimized, rails: 8}", r"field 'fabric.rails': unknown key \(allowed: kind, servers_per_leaf"),
])
def test_bad_domain_or_rail_yaml_is_one_line_naming_file_and_field(tmp_path: Path, domain: str, fabric: str,
                                                                     pattern: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(SERVER.format(domain=domain, fabric=fabric), encoding="utf-8")
    with pytest.raises(MoesimError, match=pattern) as err:
        get_topology(str(path))
    assert str(err.value).startswith(f"{path}: ") and "\n" not in str(err.value)


def test_a_device_named_like_the_domain_switch_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(SERVER.format(domain=NVS, fabric=RAIL).replace("nics: [nic0, nic1]", "nics: [nvswitch, nic1]")
                    .replace("b: nic0", "b: nvswitch"), encoding="utf-8")
    with pytest.raises(MoesimError, match=r"field 'server.nics\[0\]': id 'nvswitch' is taken by the nvswitch GPU "
                                          r"domain's device; rename it"):
        get_topology(str(path))


def test_rack_scale_clusters_build_and_route_in_time_linear_in_racks() -> None:
    """8 and 16 racks of 72 GPUs: doubling the racks at most about doubles the build (a loose 3× bound on
    this process's CPU time, as the machine is shared), and 1,152 GPUs build and route GPU 0 to every
    GPU within seconds."""
    def timed(racks: int) -> tuple[float, float]:
        t0 = time.process_time()
        topo = build_topology(get_cluster_spec(f"gb200-nvl72:{racks}"), 0.7e-6)
        t1 = time.process_time()
        assert all(topo.route(0, g) for g in range(1, topo.num_gpus))
        return t1 - t0, time.process_time() - t1

    small = min(timed(8)[0] for _ in range(3))
    big, route_s = min(timed(16) for _ in range(2))
    assert big < 3 * small and big + route_s < 10.0


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "servers"


@pytest.mark.parametrize(("file", "name"), [("hgx-h100-rail.yaml", "hgx-h100:4"), ("mi300x-leaf-spine.yaml", "mi300x:8:ls3"),
                                            ("gb200-nvl72.yaml", "gb200-nvl72:2")])
def test_shipped_yaml_templates_are_the_built_ins_and_cite_their_sources(file: str, name: str) -> None:
    path = EXAMPLES / file
    spec, builtin = load_cluster_yaml(path), get_cluster_spec(name)
    assert (spec.server, spec.fabric, spec.num_servers) == (builtin.server, builtin.fabric, builtin.num_servers)
    head = path.read_text(encoding="utf-8").split("\nname:")[0]
    assert "Sources" in head and ("data sheet" in head or "page" in head)


def test_h800_server_keeps_the_h100_server_but_for_its_nvlink() -> None:
    """hgx-h800 is hgx-h100 with each GPU's NVLink at 400/900 of the H100's (H800 data sheet), and the same
    eight 400 Gb/s NICs, one per GPU (DeepSeek's H800 nodes): every other link is the same."""
    h100, h800 = get_topology("hgx-h100:2"), get_topology("hgx-h800:2")
    assert [(lk.src, lk.dst, lk.kind) for lk in h100.links] == [(lk.src, lk.dst, lk.kind) for lk in h800.links]
    for a, b in zip(h100.links, h800.links, strict=True):
        assert b.bandwidth_bps == (a.bandwidth_bps * 400 / 900 if a.kind == "nvlink" else a.bandwidth_bps)
    assert h100.gpus == h800.gpus
