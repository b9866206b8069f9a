"""Routing: reproducible across runs and processes, ECMP spread, reverse paths, pickling."""

from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from topo_helpers import node_path

from moesim.errors import MoesimError
from moesim.topology import build_topology, get_cluster_spec, get_topology
from moesim.topology.model import GpuInfo, Link, NodeKind, Topology, TopoNode

LEAF_SPINE = """
name: ls
servers: 8
server:
  cpus: [cpu0]
  pcie_switches: [psw0]
  gpus: [gpu0, gpu1, gpu2, gpu3]
  nics: [nic0]
  links:
    - {a: psw0, b: cpu0, bandwidth: 512Gbps, delay: 0.2us}
    - {a: gpu0, b: psw0, bandwidth: 512Gbps, delay: 0.2us}
    - {a: gpu1, b: psw0, bandwidth: 512Gbps, delay: 0.2us}
    - {a: gpu2, b: psw0, bandwidth: 512Gbps, delay: 0.2us}
    - {a: gpu3, b: psw0, bandwidth: 512Gbps, delay: 0.2us}
    - {a: nic0, b: psw0, bandwidth: 512Gbps, delay: 0.2us}
fabric: {kind: leaf_spine, servers_per_leaf: 2, spines: 4, oversubscription: 2}
"""

DIGEST_SCRIPT = """
import hashlib, sys
from moesim.topology import get_topology
h = hashlib.sha256()
for name in sys.argv[1:]:
    t = get_topology(name)
    for a in range(t.num_gpus):
        for b in range(t.num_gpus):
            for f in (0, 1, 17):
                h.update(repr((name, a, b, f, t.route(a, b, f))).encode())
print(h.hexdigest())
"""


@pytest.fixture()
def leaf_spine(tmp_path: Path) -> Path:
    path = tmp_path / "ls.yaml"
    path.write_text(LEAF_SPINE)
    return path


def _digest(names: list[str]) -> str:
    h = hashlib.sha256()
    for name in names:
        t = get_topology(name)
        for a in range(t.num_gpus):
            for b in range(t.num_gpus):
                for f in (0, 1, 17):
                    h.update(repr((name, a, b, f, t.route(a, b, f))).encode())
    return h.hexdigest()


def test_routes_identical_across_processes(leaf_spine: Path) -> None:
    names = ["1", "3", "4", "5", "6", str(leaf_spine)]
    here = _digest(names)
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", DIGEST_SCRIPT, *names], capture_output=True, text=True,
                         check=True, env=env)
    assert out.stdout.strip() == here


def test_routes_identical_across_fresh_builds(leaf_spine: Path) -> None:
    for name in ("5", str(leaf_spine)):
        a, b = (build_topology(get_cluster_spec(name)) for _ in range(2))
        assert all(a.routes(i, j) == b.routes(i, j) for i in range(32) for j in range(32))
        assert [a.route(0, 31, f) for f in range(50)] == [b.route(0, 31, f) for f in range(50)]


def test_ecmp_over_spines_uses_every_equal_cost_path(leaf_spine: Path) -> None:
    topo = get_topology(str(leaf_spine))
    options = topo.routes(0, 31)  # leaf0 → leaf3: one path per spine
    assert len(options) == 4
    spines = {n for r in options for n in node_path(topo, r) if n.startswith("spine")}
    assert spines == {"spine0", "spine1", "spine2", "spine3"}
    chosen = Counter(topo.route(0, 31, f) for f in range(400))
    assert set(chosen) == set(options)
    assert min(chosen.values()) > 50  # a hash spreads flows, none starves
    assert len(topo.routes(0, 4)) == 1  # same leaf: no spine, a single path


def test_leaf_spine_oversubscription_closed_form(leaf_spine: Path) -> None:
    topo = get_topology(str(leaf_spine))
    up = [lk for lk in topo.links if lk.src.startswith("leaf") and lk.dst.startswith("spine")]
    assert len(up) == 4 * 4  # 8 servers / 2 per leaf = 4 leaves, × 4 spines
    # leaf capacity 2 servers × 1 NIC × 400 Gbps, shared by 4 spines at 2:1 → 100 Gbps per uplink
    assert {lk.bandwidth_bps for lk in up} == {2 * 400e9 / (2 * 4)}


def test_reverse_route_uses_the_same_cables_backwards() -> None:
    topo = get_topology("3")
    fwd = topo.route(1, 30)
    back = topo.reverse_route(fwd)
    assert node_path(topo, back) == list(reversed(node_path(topo, fwd)))


def test_pickle_drops_caches_and_keeps_routes() -> None:
    topo = build_topology(get_cluster_spec("5"))
    fresh = pickle.dumps(topo)
    routes = [topo.route(a, b, 3) for a in range(32) for b in range(32)]
    assert pickle.dumps(topo) == fresh  # the route cache is not shipped to workers
    clone = pickle.loads(fresh)
    assert [clone.route(a, b, 3) for a in range(32) for b in range(32)] == routes
    assert clone.gpus == topo.gpus and clone.links == topo.links


def test_hand_built_topology_without_nics_routes_over_the_whole_graph() -> None:
    """A Topology built directly (as other layers' tests do): GPUs on their own servers, one switch."""
    nodes = tuple(TopoNode(f"h{i}", NodeKind.GPU, i) for i in range(3)) + (TopoNode("sw", NodeKind.SWITCH),)
    links = []
    for i in range(3):
        links += [Link(len(links), f"h{i}", "sw", 1e9, 1e-6, "fabric"), Link(len(links) + 1, "sw", f"h{i}", 1e9, 1e-6, "fabric")]
    topo = Topology("star", nodes, tuple(links), tuple(GpuInfo(f"h{i}", i, None, None, None) for i in range(3)))
    assert node_path(topo, topo.route(0, 2)) == ["h0", "sw", "h2"]
    assert topo.route(1, 1) == ()


def test_unreachable_pair_is_a_clear_error() -> None:
    nodes = (TopoNode("a", NodeKind.GPU, 0), TopoNode("b", NodeKind.GPU, 1))
    topo = Topology("split", nodes, (), (GpuInfo("a", 0, None, None, None), GpuInfo("b", 1, None, None, None)))
    with pytest.raises(MoesimError, match="no route from a to b"):
        topo.route(0, 1)
    with pytest.raises(MoesimError, match="gpu 'b'"):
        topo.check_routes()


def test_ecmp_choice_from_the_pair_seed_is_the_hash_of_the_whole_key() -> None:
    """``ecmp_index`` continued from the pair's ``ecmp_seed`` is CRC-32 of the whole ``"src:dst:flow_id"``
    modulo the route count (what ``route`` picks by), for ids of every digit count."""
    import zlib

    from moesim.topology.model import ecmp_index, ecmp_seed

    for src, dst in ((0, 9), (17, 3), (143, 100)):
        seed = ecmp_seed(src, dst)
        for flow_id in (0, 7, 10, 99, 12_345, 2_000_001, 987_654_321_012):
            for n in (2, 3, 8, 16):
                assert ecmp_index(seed, flow_id, n) == zlib.crc32(f"{src}:{dst}:{flow_id}".encode()) % n


def test_route_takes_the_ecmp_option_the_whole_key_hash_names() -> None:
    """``route`` over a two-server HGX template (8 equal-cost routes between servers): the option at
    CRC-32("src:dst:flow_id") mod 8, and flows spread over every option."""
    import zlib

    from moesim.topology.catalog import parse_topology

    topo = parse_topology("hgx-h800:2").resolve(1e-6)
    options = topo.routes(0, 9)
    assert len(options) == 8
    seen = set()
    for flow_id in range(200):
        route = topo.route(0, 9, flow_id)
        assert route == options[zlib.crc32(f"0:9:{flow_id}".encode()) % 8]
        seen.add(route)
    assert len(seen) == 8


def test_route_queries_leave_no_reference_cycles() -> None:
    """Enumerating every GPU pair's routes of a two-server HGX template (fabric and in-server searches)
    makes no cyclic garbage: what it frees, reference counting frees (a large run's event loop pauses full
    collections and counts on it)."""
    import gc

    from moesim.topology.catalog import parse_topology

    topo = parse_topology("hgx-h800:2").resolve(1e-6)
    gc.collect()
    gc.disable()
    try:
        for src in range(len(topo.gpus)):
            for dst in range(len(topo.gpus)):
                topo.routes(src, dst)
        assert gc.collect() == 0
    finally:
        gc.enable()
