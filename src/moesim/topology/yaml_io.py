"""User-defined topologies in YAML: a server template instantiated N times plus an external fabric.

    name: my-cluster                  # optional (default: the file name)
    description: two 8-GPU servers    # optional
    servers: 2                        # how many copies of the template
    server:
      cpus: [cpu0, cpu1]
      pcie_switches: [psw0, psw1]
      gpus: [gpu0, gpu1, gpu2, gpu3, gpu4, gpu5, gpu6, gpu7]   # or {name: gpu0, nic: nic1}
      nics: [nic0, nic1]
      gpu_domain: {kind: nvswitch, bandwidth: 3600Gbps, delay: 0.1us}   # optional: or kind: mesh
      links:                          # full-duplex cables; kind is inferred when omitted
        - {a: gpu0, b: psw0, bandwidth: 512Gbps, delay: 0.2us}
        ...
    fabric:
      kind: single_switch             # or leaf_spine, none
      nic_bandwidth: 400Gbps
      # nic_delay: 1us                # omitted: the run's network mode decides (IB 0.7 µs, RoCE 1 µs)

Validation is strict: text that is not UTF-8 or not YAML, unknown or duplicate keys, wrong types,
duplicate ids, dangling link ends, bandwidths or delays outside their range (units.py) and clusters
beyond the builder's size limits are one-line errors naming the file and the entry (e.g.
``server.links[3].b``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from moesim.errors import MoesimError, input_error
from moesim.fileio import load_yaml_strict, refuse_special_file
from moesim.topology.builder import (
    SERVERS,
    CableSpec,
    ClusterSpec,
    GpuSpec,
    ServerTemplate,
    check_cluster,
    check_template,
)
from moesim.topology.domains import GPU_DOMAINS, GpuDomain
from moesim.topology.fabrics import FABRICS
from moesim.topology.fabrics.base import check_keys
from moesim.topology.output import write_output
from moesim.topology.units import format_bandwidth, format_delay, parse_bandwidth_bps, parse_delay_s

_TOP_KEYS = ("name", "description", "servers", "server", "fabric")
_SERVER_KEYS = ("cpus", "pcie_switches", "gpus", "nics", "gpu_domain", "links")
_LINK_KEYS = ("a", "b", "bandwidth", "delay", "kind")
_GPU_KEYS = ("name", "nic")


def _mapping(value: Any, source: str, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise input_error(source, field, f"expected a mapping, got {type(value).__name__}")
    return value


def _names(value: Any, source: str, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise input_error(source, field, f"expected a list of ids, got {type(value).__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise input_error(source, f"{field}[{i}]", f"expected an id (text), got {item!r}")
    return tuple(value)


def _gpu(item: Any, source: str, field: str) -> GpuSpec:
    if isinstance(item, str):
        return GpuSpec(item)
    m = _mapping(item, source, field)
    check_keys(m, _GPU_KEYS, source, field)
    name, nic = m.get("name"), m.get("nic")
    if not isinstance(name, str):
        raise input_error(source, f"{field}.name", f"expected an id (text), got {name!r}")
    if nic is not None and not isinstance(nic, str):
        raise input_error(source, f"{field}.nic", f"expected a NIC id (text), got {nic!r}")
    return GpuSpec(name, nic)


def _link(item: Any, source: str, field: str) -> CableSpec:
    m = _mapping(item, source, field)
    check_keys(m, _LINK_KEYS, source, field)
    for key in ("a", "b", "bandwidth", "delay"):
        if key not in m:
            raise input_error(source, f"{field}.{key}", "missing", _LINK_KEYS[:4])
    for key in ("a", "b"):
        if not isinstance(m[key], str):
            raise input_error(source, f"{field}.{key}", f"expected a device id (text), got {m[key]!r}")
    kind = m.get("kind", "")
    if not isinstance(kind, str):
        raise input_error(source, f"{field}.kind", f"expected text, got {kind!r}")
    return CableSpec(m["a"], m["b"], parse_bandwidth_bps(m["bandwidth"], source, f"{field}.bandwidth"),
                     parse_delay_s(m["delay"], source, f"{field}.delay"), kind)


def _domain(value: Any, source: str) -> GpuDomain | None:
    if value is None:
        return None
    m = _mapping(value, source, "server.gpu_domain")
    kind = m.get("kind")
    if not isinstance(kind, str) or kind not in GPU_DOMAINS:
        raise input_error(source, "server.gpu_domain.kind", f"unknown GPU domain {kind!r}", GPU_DOMAINS.names())
    return GPU_DOMAINS.get(kind).from_dict(m, source)


def cluster_from_dict(data: Any, source: str, default_name: str = "custom") -> ClusterSpec:
    """Turn a parsed YAML document into a validated ``ClusterSpec`` (``source`` names it in errors)."""
    top = _mapping(data, source, "(top level)")
    check_keys(top, _TOP_KEYS, source, "")
    for key in ("servers", "server", "fabric"):
        if key not in top:
            raise input_error(source, key, "missing", _TOP_KEYS)
    servers = SERVERS.check(top["servers"], source, strict=True)
    name, description = top.get("name", default_name), top.get("description", "")
    if isinstance(name, bool) or not isinstance(name, str | int) or not str(name).strip() or not str(name).isprintable():
        raise input_error(source, "name", f"expected one line of text, got {name!r}")
    if not isinstance(description, str):
        raise input_error(source, "description", f"expected text, got {description!r}")
    srv = _mapping(top["server"], source, "server")
    check_keys(srv, _SERVER_KEYS, source, "server")
    gpus_raw = srv.get("gpus") or []
    if not isinstance(gpus_raw, list):
        raise input_error(source, "server.gpus", f"expected a list, got {type(gpus_raw).__name__}")
    links_raw = srv.get("links") or []
    if not isinstance(links_raw, list):
        raise input_error(source, "server.links", f"expected a list, got {type(links_raw).__name__}")
    template = ServerTemplate(
        cpus=_names(srv.get("cpus"), source, "server.cpus"),
        pcie_switches=_names(srv.get("pcie_switches"), source, "server.pcie_switches"),
        gpus=tuple(_gpu(g, source, f"server.gpus[{i}]") for i, g in enumerate(gpus_raw)),
        nics=_names(srv.get("nics"), source, "server.nics"),
        cables=tuple(_link(c, source, f"server.links[{i}]") for i, c in enumerate(links_raw)),
        domain=_domain(srv.get("gpu_domain"), source),
    )
    check_template(template, source)
    fab = _mapping(top["fabric"], source, "fabric")
    kind = fab.get("kind")
    if not isinstance(kind, str) or kind not in FABRICS:
        raise input_error(source, "fabric.kind", f"unknown fabric {kind!r}", FABRICS.names())
    fabric = FABRICS.get(kind).from_dict(fab, source)
    spec = ClusterSpec(str(name), template, servers, fabric, description, source)
    check_cluster(spec)
    return spec


def load_cluster_yaml(path: str | Path) -> ClusterSpec:
    """Read and validate a topology YAML file."""
    path = Path(path)
    source = str(path)
    refuse_special_file(path, "topology YAML")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise MoesimError(f"{source}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                          "save the topology file as UTF-8") from None
    except (OSError, ValueError) as exc:  # ValueError: a path with a NUL character
        raise MoesimError(f"{source}: cannot read the topology file ({getattr(exc, 'strerror', None) or exc})") from None
    data = load_yaml_strict(text, source)
    return cluster_from_dict(data, source, default_name=path.stem)


def cluster_to_dict(spec: ClusterSpec) -> dict[str, Any]:
    """The YAML document of ``spec``; loading it gives back an equal spec (apart from ``source``)."""
    t = spec.server
    server: dict[str, Any] = {}
    for key, names in (("cpus", t.cpus), ("pcie_switches", t.pcie_switches)):
        if names:
            server[key] = list(names)
    server["gpus"] = [g.name if g.nic is None else {"name": g.name, "nic": g.nic} for g in t.gpus]
    if t.nics:
        server["nics"] = list(t.nics)
    if t.domain is not None:
        server["gpu_domain"] = t.domain.to_dict()
    links = []
    for c in t.cables:
        link = {"a": c.a, "b": c.b, "bandwidth": format_bandwidth(c.bandwidth_bps), "delay": format_delay(c.delay_s)}
        if c.kind:
            link["kind"] = c.kind
        links.append(link)
    server["links"] = links
    out: dict[str, Any] = {"name": spec.name}
    if spec.description:
        out["description"] = spec.description
    out.update({"servers": spec.num_servers, "server": server, "fabric": spec.fabric.to_dict()})
    return out


class _Dumper(yaml.SafeDumper):
    """Block style at the top, flow style for the short link and GPU mappings."""


def _represent_dict(dumper: yaml.SafeDumper, data: dict[str, Any]) -> yaml.Node:
    flow = "a" in data or set(data) == {"name", "nic"} or set(data) == {"kind", "bandwidth", "delay"}  # one link,
    # one GPU with a pinned NIC, or the GPU domain
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=flow)


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = all(isinstance(v, str | int | float) for v in data)  # lists of ids on one line
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(dict, _represent_dict)
_Dumper.add_representer(list, _represent_list)


def dump_cluster_yaml(spec: ClusterSpec) -> str:
    """``spec`` as YAML text."""
    header = f"# moesim topology '{spec.name}' (see docs/topology.md for the format)\n"
    return header + yaml.dump(cluster_to_dict(spec), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def write_cluster_yaml(spec: ClusterSpec, path: str | Path) -> Path:
    """Write ``spec`` as YAML (atomically)."""
    return write_output(path, dump_cluster_yaml(spec))
