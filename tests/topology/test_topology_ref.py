"""TopologyRef: a topology name looked up once into template, servers and fabric, the same template on other
servers (``with_servers``), and one build per process and NIC–switch delay (``resolve``)."""

from __future__ import annotations

import dataclasses

import pytest

import moesim.system.run as run_module
from moesim.errors import MoesimError
from moesim.system.run import prepare
from moesim.system.spec import RunSpec
from moesim.topology import TopologyRef, get_cluster_spec, get_topology, parse_topology, write_cluster_yaml


@pytest.mark.parametrize("name,template,servers,per_server,fabric", [
    ("hgx-h100:2:rail", "hgx-h100", 2, 8, "rail"),
    ("hgx-h100", "hgx-h100", 1, 8, None),
    ("mi300x:16:ls3", "mi300x", 16, 8, "ls3"),
    ("gb200-nvl72:2", "gb200-nvl72", 2, 72, None),
    ("star:32", "star", 32, 1, None),
    ("4", None, get_cluster_spec("4").num_servers, len(get_cluster_spec("4").server.gpus), None),
])
def test_a_name_is_read_into_template_servers_and_fabric(name, template, servers, per_server, fabric):
    ref = parse_topology(name)
    assert (ref.name, ref.template, ref.servers, ref.gpus_per_server, ref.fabric) == \
        (name, template, servers, per_server, fabric)
    assert ref.num_gpus == servers * per_server == ref.resolve().num_gpus


@pytest.mark.parametrize("name,servers,expected", [
    ("hgx-h100:2:rail", 4, "hgx-h100:4:rail"),
    ("mi300x:16:ls3", 2, "mi300x:2:ls3"),
    ("hgx-h100", 3, "hgx-h100:3"),
    ("star:32", 8, "star:8"),
])
def test_with_servers_keeps_the_template_and_the_fabric(name, servers, expected):
    ref = parse_topology(name).with_servers(servers)
    assert ref == parse_topology(expected) and ref.name == expected
    assert ref.resolve().num_gpus == servers * ref.gpus_per_server
    whole = parse_topology(name)
    assert whole.with_servers(whole.servers) is whole


def test_with_servers_of_a_fixed_topology_or_a_lone_host_is_a_one_line_error():
    study = parse_topology("4")
    assert study.with_servers(study.servers) is study
    with pytest.raises(MoesimError, match="server template"):
        study.with_servers(study.servers // 2)
    with pytest.raises(MoesimError, match="star:1"):
        parse_topology("star:32").with_servers(1)
    with pytest.raises(MoesimError, match="server count '0'"):
        parse_topology("hgx-h100:0")
    with pytest.raises(MoesimError, match="unknown fabric 'mesh'"):
        parse_topology("hgx-h100:2:mesh")


def test_resolve_builds_once_per_delay_and_is_the_catalog_build():
    ref = parse_topology("hgx-h100:2")
    ib, roce = ref.resolve(0.7e-6), ref.resolve(1.0e-6)
    assert ib is ref.resolve(0.7e-6) is get_topology("hgx-h100:2", 0.7e-6)
    assert roce is not ib and roce.num_gpus == ib.num_gpus
    assert parse_topology("star:4").resolve(0.7e-6) is parse_topology("star:4").resolve(1.0e-6)


def test_a_file_is_read_once_per_ref_so_count_and_build_agree(tmp_path):
    """A ref keeps the version of the file it read: rewriting the file changes new refs, not this one."""
    path = tmp_path / "cluster.yaml"
    write_cluster_yaml(get_cluster_spec("hgx-h100:2"), path)
    old = parse_topology(str(path))
    assert (old.template, old.servers, old.num_gpus) == (None, 2, 16)
    write_cluster_yaml(get_cluster_spec("hgx-h100:16"), path)
    assert old.resolve().num_gpus == old.num_gpus == 16
    assert parse_topology(str(path)).num_gpus == 128
    with pytest.raises(MoesimError, match="server template"):
        old.with_servers(4)


def test_prepare_looks_the_topology_up_once_and_carries_it(monkeypatch):
    calls: list[str] = []

    def counted(name: str) -> TopologyRef:
        calls.append(name)
        return parse_topology(name)

    monkeypatch.setattr(run_module, "parse_topology", counted)
    spec = RunSpec("qwen3-30b-a3b", "hgx-h100:2:rail", "TP2EP8", overrides=(("tokens", 256),))
    prepared = prepare(spec)
    assert calls == ["hgx-h100:2:rail"]
    assert prepared.topology_ref == parse_topology("hgx-h100:2:rail")
    assert prepared.topology is prepared.topology_ref.resolve(prepared.params.transport.nic_switch_delay_s)
    faster = prepare(dataclasses.replace(spec, overrides=(("fabric_bandwidth_bps", 800e9), ("tokens", 256))))
    assert faster.topology is not faster.topology_ref.resolve(faster.params.transport.nic_switch_delay_s)
