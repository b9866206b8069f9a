"""User topologies in YAML: the six built-ins round-trip, and bad files give one-line errors naming the entry."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from moesim.errors import MoesimError
from moesim.topology import (
    TOPOLOGIES,
    build_topology,
    check_rank_count,
    get_topology,
    load_cluster_yaml,
    write_cluster_yaml,
)

GOOD: dict[str, Any] = {
    "name": "pair",
    "servers": 2,
    "server": {
        "cpus": ["cpu0"],
        "pcie_switches": ["psw0"],
        "gpus": ["gpu0", "gpu1"],
        "nics": ["nic0"],
        "links": [
            {"a": "psw0", "b": "cpu0", "bandwidth": "512Gbps", "delay": "0.2us"},
            {"a": "gpu0", "b": "psw0", "bandwidth": "512Gbps", "delay": "0.2us"},
            {"a": "gpu1", "b": "psw0", "bandwidth": "512 Gbps", "delay": "200ns"},
            {"a": "nic0", "b": "psw0", "bandwidth": 512e9, "delay": 0.2e-6},
        ],
    },
    "fabric": {"kind": "single_switch", "nic_bandwidth": "400Gbps"},
}


def write(tmp_path: Path, doc: Any, name: str = "topo.yaml") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("name", ["1", "2", "3", "4", "5", "6"])
def test_builtin_topologies_round_trip_through_yaml(tmp_path: Path, name: str) -> None:
    spec = TOPOLOGIES.get(name)
    path = write_cluster_yaml(spec, tmp_path / f"t{name}.yaml")
    loaded = load_cluster_yaml(path)
    assert loaded.server == spec.server and loaded.fabric == spec.fabric and loaded.num_servers == spec.num_servers
    for delay in (0.7e-6, 1e-6):  # the NIC–switch delay still follows the network mode
        a, b = get_topology(name, delay), get_topology(str(path), delay)
        assert a.nodes == b.nodes and a.links == b.links and a.gpus == b.gpus


def test_good_file_builds_with_units_parsed_exactly(tmp_path: Path) -> None:
    topo = get_topology(str(write(tmp_path, GOOD)), 1e-6)
    assert topo.name == "pair" and topo.num_gpus == 4 and topo.meta_value("source").endswith("topo.yaml")
    pcie = {(lk.bandwidth_bps, lk.delay_s) for lk in topo.links if lk.kind == "pcie"}
    assert pcie == {(512e9, 0.2e-6)}  # "512 Gbps", "200ns" and 512e9 / 0.2e-6 all mean the same
    assert {lk.delay_s for lk in topo.links if lk.kind == "fabric"} == {1e-6}


def test_fabric_nic_delay_overrides_the_network_mode(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    doc["fabric"]["nic_delay"] = "3us"
    topo = get_topology(str(write(tmp_path, doc)), 0.7e-6)
    assert {lk.delay_s for lk in topo.links if lk.kind == "fabric"} == {3e-6}


def test_gpu_nic_can_be_pinned(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    doc["server"]["nics"] = ["nic0", "nic1"]
    doc["server"]["links"].append({"a": "nic1", "b": "cpu0", "bandwidth": "512Gbps", "delay": "0.2us"})
    doc["server"]["gpus"] = ["gpu0", {"name": "gpu1", "nic": "nic1"}]
    topo = get_topology(str(write(tmp_path, doc)))
    assert [g.nic for g in topo.gpus] == ["s0.nic0", "s0.nic1", "s1.nic0", "s1.nic1"]
    spec = load_cluster_yaml(write_cluster_yaml(load_cluster_yaml(tmp_path / "topo.yaml"), tmp_path / "again.yaml"))
    assert spec.server.gpus[1].nic == "nic1"


def mutate(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    *parents, last = path.split("/")
    node: Any = doc
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if value is DELETE:
        del node[int(last) if isinstance(node, list) else last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


DELETE = object()


def bw(value: str) -> str:
    """The out-of-range message for a bandwidth, as a pattern."""
    return rf"bandwidth {re.escape(value)} bit/s is out of range \(allowed: 1Mbps\.\.1000Tbps\)"


BAD = [
    ("unknown top key", mutate("colour", "red"), r"field 'colour': unknown key"),
    ("unknown server key", mutate("server/gpu", ["x"]), r"field 'server.gpu': unknown key \(allowed: cpus"),
    ("unknown link key", mutate("server/links/1/latency", "1us"), r"field 'server.links\[1\].latency': unknown key"),
    ("unknown fabric key", mutate("fabric/spines", 2), r"field 'fabric.spines': unknown key"),
    ("duplicate id", mutate("server/nics/0", "gpu1"), r"field 'server.nics\[0\]': duplicate id 'gpu1' \(already server.gpus\[1\]\)"),
    ("dangling link end", mutate("server/links/2/b", "psw9"), r"field 'server.links\[2\].b': unknown device 'psw9' \(allowed: cpu0, psw0"),
    ("zero bandwidth", mutate("server/links/1/bandwidth", "0Gbps"), rf"field 'server.links\[1\].bandwidth': {bw('0.0')}"),
    ("negative bandwidth", mutate("server/links/1/bandwidth", -5), rf"field 'server.links\[1\].bandwidth': {bw('-5.0')}"),
    ("tiny bandwidth", mutate("server/links/1/bandwidth", 1e-300), rf"field 'server.links\[1\].bandwidth': {bw('1e-300')}"),
    ("infinite bandwidth", mutate("server/links/1/bandwidth", math.inf), rf"field 'server.links\[1\].bandwidth': {bw('inf')}"),
    ("nan bandwidth", mutate("server/links/1/bandwidth", math.nan), rf"field 'server.links\[1\].bandwidth': {bw('nan')}"),
    ("overflowing bandwidth", mutate("server/links/1/bandwidth", "1e400Gbps"), rf"field 'server.links\[1\].bandwidth': {bw('inf')}"),
    ("huge exponent", mutate("server/links/1/bandwidth", "1e99999999Gbps"), r"field 'server.links\[1\].bandwidth': cannot read the number"),
    ("huge integer", mutate("server/links/1/bandwidth", 10**400), r"field 'server.links\[1\].bandwidth': the number 1000.* is too large"),
    ("fabric bandwidth", mutate("fabric/nic_bandwidth", "2000Tbps"), rf"field 'fabric.nic_bandwidth': {bw('2000000000000000.0')}"),
    ("bad unit", mutate("server/links/1/bandwidth", "512 GB"), r"field 'server.links\[1\].bandwidth': cannot read '512 GB'"),
    ("negative delay", mutate("server/links/1/delay", -1e-6), r"field 'server.links\[1\].delay': delay -1e-06 s is out of range \(allowed: 0s\.\.1s\)"),
    ("long delay", mutate("server/links/1/delay", "2s"), r"field 'server.links\[1\].delay': delay 2.0 s is out of range \(allowed: 0s\.\.1s\)"),
    ("infinite fabric delay", mutate("fabric/nic_delay", math.inf), r"field 'fabric.nic_delay': delay inf s is out of range"),
    ("too many servers", mutate("servers", 10**9), r"field 'servers': 1000000000 servers and the fabric make 5,000,000,001 devices, "
     r"more than a cluster may have \(allowed: at most 2,000,000 devices\)"),
    ("two-line name", mutate("name", "a\nb"), r"field 'name': expected one line of text"),
    ("id with a newline", mutate("server/gpus/0", "gpu0\n"), r"field 'server.gpus\[0\]': invalid id"),
    ("missing delay", mutate("server/links/1/delay", DELETE), r"field 'server.links\[1\].delay': missing"),
    ("bad kind", mutate("server/links/1/kind", "ethernet"), r"field 'server.links\[1\].kind': unknown link kind 'ethernet'"),
    ("self link", mutate("server/links/1/b", "gpu0"), r"field 'server.links\[1\]': a link joins 'gpu0' to itself"),
    ("zero servers", mutate("servers", 0), r"field 'servers': 0 is not allowed \(int in \[1, "),
    ("no gpus", mutate("server/gpus", []), r"field 'server.gpus': a server needs at least one GPU"),
    ("unknown fabric", mutate("fabric/kind", "torus"), r"field 'fabric.kind': unknown fabric 'torus' \(allowed: leaf_spine, none, rail_optimized, single_switch\)"),
    ("missing fabric", mutate("fabric", DELETE), r"field 'fabric': missing"),
    ("bad pinned nic", mutate("server/gpus/0", {"name": "gpu0", "nic": "nic7"}), r"field 'server.gpus\[0\].nic': unknown NIC 'nic7'"),
]


@pytest.mark.parametrize("label,doc,pattern", BAD, ids=[b[0] for b in BAD])
def test_bad_yaml_gives_one_line_error_naming_file_and_entry(tmp_path: Path, label: str, doc: Any, pattern: str) -> None:
    path = write(tmp_path, doc)
    with pytest.raises(MoesimError) as err:
        get_topology(str(path))
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: "), msg
    assert re.search(pattern, msg), msg


def test_gpu_without_a_route_to_other_gpus(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    del doc["server"]["links"][2]  # gpu1 is cabled to nothing
    path = write(tmp_path, doc)
    with pytest.raises(MoesimError, match=rf"^{path}: gpu 's0.gpu1': no route from gpu 's0.gpu0' to it$"):
        get_topology(str(path))


def test_servers_not_joined_by_the_fabric(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    doc["fabric"] = {"kind": "none"}
    path = write(tmp_path, doc)
    with pytest.raises(MoesimError, match=rf"^{path}: gpu 's1.gpu0': no route"):
        get_topology(str(path))


def test_gpu_count_must_match_rank_count(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    topo = get_topology(str(path))
    check_rank_count(topo, 4)
    with pytest.raises(MoesimError, match=rf"^{path}: field 'servers': 4 GPUs \(2 servers × 2 GPUs\) do not match the run's 32 ranks$"):
        check_rank_count(topo, 32)
    with pytest.raises(MoesimError, match=r"^topology 6: field 'servers': 32 GPUs .* 16 ranks$"):
        check_rank_count(get_topology("6"), 16)


@pytest.mark.parametrize("text,pattern", [
    ("servers: 2\nservers: 3\n", r"not valid YAML at line 2, column 1: duplicate key 'servers'"),
    ("servers: [1, 2\n", r"not valid YAML at line 2"),
    ("- just\n- a list\n", r"field '\(top level\)': expected a mapping"),
])
def test_malformed_yaml(tmp_path: Path, text: str, pattern: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(MoesimError, match=rf"^{path}: {pattern}"):
        load_cluster_yaml(path)


def test_missing_file_and_unknown_name(tmp_path: Path) -> None:
    with pytest.raises(MoesimError, match=r"nope.yaml: cannot read the topology file"):
        get_topology(str(tmp_path / "nope.yaml"))
    with pytest.raises(MoesimError, match=r"unknown topology '7' \(allowed: 1, 2, 3, 4, 5, 6, gb200-nvl72\[:N\[:FABRIC\]\], "
                       r"hgx-b200\[:N\[:FABRIC\]\], hgx-h100\[:N\[:FABRIC\]\], hgx-h20\[:N\[:FABRIC\]\], "
                       r"hgx-h200\[:N\[:FABRIC\]\], hgx-h800\[:N\[:FABRIC\]\], mi300x\[:N\[:FABRIC\]\], star:N, or a path"):
        get_topology("7")


def test_python_spec_errors_name_the_template_entry() -> None:
    import dataclasses

    spec = TOPOLOGIES.get("4")
    cables = list(spec.server.cables)
    cables[3] = dataclasses.replace(cables[3], bandwidth_bps=0.0)
    bad = dataclasses.replace(spec, server=dataclasses.replace(spec.server, cables=tuple(cables)))
    with pytest.raises(MoesimError, match=r"^topology 4: field 'server.links\[3\].bandwidth': bandwidth 0.0 bit/s is out of range"):
        build_topology(bad)


def test_leaf_spine_file_round_trips(tmp_path: Path) -> None:
    doc = copy.deepcopy(GOOD)
    doc["servers"] = 6
    doc["fabric"] = {"kind": "leaf_spine", "servers_per_leaf": 4, "spines": 3, "oversubscription": 1.5,
                     "nic_bandwidth": "200Gbps", "nic_delay": "0.6us", "uplink_delay": "750ns"}
    first = load_cluster_yaml(write(tmp_path, doc))
    again = load_cluster_yaml(write_cluster_yaml(first, tmp_path / "again.yaml"))
    assert again.fabric == first.fabric and again.server == first.server
    topo = build_topology(again)
    up = {lk.bandwidth_bps for lk in topo.links if lk.src.startswith("leaf") and lk.dst.startswith("spine")}
    assert up == {4 * 200e9 / (1.5 * 3)}  # 4 servers × 1 NIC × 200 Gbps over 3 spines at 1.5:1
    assert {lk.delay_s for lk in topo.links if lk.kind == "fabric"} == {0.6e-6, 0.75e-6}
