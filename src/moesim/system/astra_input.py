"""Read an ASTRA-sim 2.0 input directory (the inverse of ``moesim export``) into one simulation's inputs.

ASTRA-sim's command line names a workload ET prefix, a system JSON (docs/reference-semantics.md B.1), a
network config (the NS-3 text config of A.3 with its topology file, A.2, or an analytical network YAML),
a remote-memory JSON, a logical-topology JSON and optional communicator groups (C.4). Every key is read
or refused with a one-line error naming the file, the key and the allowed values.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from moesim.errors import MoesimError, input_error
from moesim.fileio import refuse_special_file
from moesim.network.params import REFERENCE_PRESETS, NetworkParams, params_from_ns3_config
from moesim.schema import Constraint, Param
from moesim.system.collectives.base import resolve
from moesim.system.settings import SystemSettings
from moesim.topology.catalog import STAR_MAX_HOSTS, star_topology
from moesim.topology.model import GpuInfo, Link, NodeKind, Topology, TopoNode
from moesim.topology.ns3_export import read_ns3_topology
from moesim.topology.units import BANDWIDTH_RANGE_BPS, DELAY_RANGE_S
from moesim.workload.chakra import read_et
from moesim.workload.graph import Workload


@dataclass(frozen=True)
class AstraPaths:
    """The files of one ASTRA-sim invocation (``None``: not given; ``comm_groups`` "empty" is none)."""

    workload: Path
    system: Path
    network: Path
    remote_memory: Path | None = None
    logical_topology: Path | None = None
    comm_groups: Path | None = None
    cc_policy: Path | None = None


@dataclass(frozen=True)
class AstraInputs:
    """What the files describe: ready for ``Simulation(workload, topology, backend, settings)``."""

    workload: Workload
    topology: Topology
    params: NetworkParams
    settings: SystemSettings
    network_kind: str  # "ns3" or "analytical"


def find_paths(directory: str | Path | None, **given: str | None) -> AstraPaths:
    """The files of ``directory`` as ``moesim export`` names them, each replaced by the one ``given``
    (keys: workload, system, network, remote_memory, logical_topology, comm_groups)."""
    d = Path(directory) if directory is not None else None
    if d is not None and not d.is_dir():
        raise MoesimError(f"{d}: not a directory")

    def pick(key: str, *names: str, required: bool = True) -> Path | None:
        if given.get(key):
            return Path(str(given[key]))
        for name in names:
            if d is not None and (d / name).exists():
                return d / name
        if required:
            where = f"{d}: no {' or '.join(names)}" if d is not None else "no directory"
            option = "--" + {"system": "system", "network": "network", "workload": "workload"}[key] + "-configuration"
            raise MoesimError(f"{where}; give {option}")
        return None

    workload = pick("workload", "workload")
    system, network = pick("system", "system.json"), pick("network", "network.txt", "network_analytical.yml")
    groups = given.get("comm_groups")
    assert workload is not None and system is not None and network is not None
    return AstraPaths(
        workload, system, network, pick("remote_memory", "remote_memory.json", required=False),
        pick("logical_topology", "logical_topology.json", required=False),
        None if groups in (None, "", "empty") else Path(str(groups)),
        d / "cc_policy.json" if d is not None and (d / "cc_policy.json").is_file() else None,
    )


def _read_text(path: Path, what: str) -> str:
    refuse_special_file(path, what)
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MoesimError(f"{path}: cannot read the {what} ({getattr(exc, 'strerror', None) or exc})") from None


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        raw = json.loads(_read_text(path, what))
    except ValueError as exc:
        raise MoesimError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise MoesimError(f"{path}: expected a JSON object ({what})")
    return raw


_IMPLEMENTATIONS = {"all-reduce-implementation": "all_reduce", "all-to-all-implementation": "all_to_all",
                    "all-gather-implementation": "all_gather", "reduce-scatter-implementation": "reduce_scatter"}
SYSTEM_KEYS = ("scheduling-policy", "endpoint-delay", "active-chunks-per-dimension", "preferred-dataset-splits",
               *_IMPLEMENTATIONS, "collective-optimization", "local-mem-bw", "peak-perf", "roofline-enabled",
               "boost-mode")
"""The system JSON keys moesim models (docs/reference-semantics.md B.1); any other is refused."""


_SCALED = {"endpoint-delay": ("endpoint_delay_s", 1e-9, "ns"), "local-mem-bw": ("mem_bw_bytes_per_s", 1e9, "GB/s"),
           "peak-perf": ("peak_flops", 1e12, "TFLOP/s"), "active-chunks-per-dimension": ("active_chunks", 1, ""),
           "preferred-dataset-splits": ("dataset_splits", 1, "")}
"""System JSON keys holding a number: the SystemSettings field, the factor from the file's unit, that unit."""
_NAMED = {"scheduling-policy": "scheduling_policy", "collective-optimization": "collective_optimization"}
_SYSTEM_PARAMS = {p.name: p for p in Param.of(SystemSettings, "system")}


def _file_param(key: str) -> Param:
    """The declared SystemSettings parameter behind a numeric system JSON key, in the file's unit."""
    name, scale, unit = _SCALED[key]
    p = _SYSTEM_PARAMS[name]
    lo, hi = (None if x is None else x / scale for x in (p.allowed.low, p.allowed.high))
    return dataclasses.replace(p, name=key, unit=unit, allowed=dataclasses.replace(p.allowed, low=lo, high=hi))


def read_system_json(path: Path) -> SystemSettings:
    """ASTRA-sim's ``--system-configuration`` → SystemSettings (moesim's defaults for keys left out). Every
    value is checked against the SystemSettings field it sets, in the file's unit, and an error names the
    file's key."""
    raw = _read_json(path, "system configuration")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in SYSTEM_KEYS:
            raise input_error(str(path), key, "a system key moesim does not model", SYSTEM_KEYS)
        if key in _NAMED:
            values[_NAMED[key]] = _SYSTEM_PARAMS[_NAMED[key]].check(value, str(path), strict=True, label=key)
        elif key in _SCALED:
            name, scale, _ = _SCALED[key]
            values[name] = _file_param(key).check(value, str(path), strict=True) * scale
        elif key == "roofline-enabled":
            if value not in (0, 1) or isinstance(value, bool):
                raise input_error(str(path), key, f"got {value!r}", (0, 1))
            values["roofline"] = value == 1
        elif key == "boost-mode":
            if value != 0 or isinstance(value, bool):
                raise input_error(str(path), key, f"{value!r} is not modelled", (0,))
        else:
            names = [value] if isinstance(value, str) else value
            if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
                raise input_error(str(path), key, f"must be a list of implementation names, got {value!r}")
            for name in names:
                try:
                    resolve(name)
                except MoesimError as exc:
                    raise MoesimError(f"{path}: field '{key}': {exc}") from None
            values[_IMPLEMENTATIONS[key]] = tuple(names)
    return SystemSettings(**values)


def check_remote_memory(path: Path) -> None:
    """``--remote-memory-configuration``: only ``NO_MEMORY_EXPANSION`` is modelled."""
    raw = _read_json(path, "remote-memory configuration")
    for key, value in raw.items():
        if key != "memory-type":
            raise input_error(str(path), key, "a remote-memory key moesim does not model", ("memory-type",))
        if value != "NO_MEMORY_EXPANSION":
            raise input_error(str(path), key, f"{value!r} is not modelled", ("NO_MEMORY_EXPANSION",))


def read_logical_dims(path: Path, num_ranks: int) -> tuple[int, ...]:
    """``--logical-topology-configuration``: ``{"logical-dims": ["8", "4"]}``, multiplying to the rank count."""
    raw = _read_json(path, "logical topology")
    for key in raw:
        if key != "logical-dims":
            raise input_error(str(path), key, "unknown key", ("logical-dims",))
    dims_raw = raw.get("logical-dims")
    try:
        dims = tuple(int(d) for d in dims_raw)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise input_error(str(path), "logical-dims", f"must be a list of positive integers, got {dims_raw!r}") from None
    product = 1
    for d in dims:
        product *= d
    if not dims or min(dims) < 1 or product != num_ranks:
        raise input_error(str(path), "logical-dims", f"{list(dims)} does not multiply to the {num_ranks} ranks")
    return dims


def topology_from_ns3(path: Path, servers: tuple[int, ...] | None = None) -> Topology:
    """An NS-3 topology file as a Topology: hosts 0..N−1 are GPUs h<i> (rank i), every other node a switch
    sw<id>; line i is links 2i (as written) and 2i+1 (reverse). ``servers``: host → server (default: own).
    Routes take the fewest hops, then the least delay, through switches only (docs/reference-semantics.md A.2)."""
    ns3 = read_ns3_topology(path)
    n = ns3.num_hosts
    servers = servers or tuple(range(n))
    names = [f"h{i}" if i < n else f"sw{i}" for i in range(ns3.num_nodes)]
    nodes = [TopoNode(names[i], NodeKind.GPU if i < n else NodeKind.SWITCH, servers[i] if i < n else None)
             for i in range(ns3.num_nodes)]
    links: list[Link] = []
    for number, link in enumerate(ns3.links, start=1):
        if link.error_rate != 0:
            raise input_error(f"{path}: link {number}", "error rate", f"{link.error_rate:g} is not modelled", (0,))
        links.append(Link(len(links), names[link.src], names[link.dst], link.rate_bps, link.delay_s, "fabric"))
        links.append(Link(len(links), names[link.dst], names[link.src], link.rate_bps, link.delay_s, "fabric"))
    # a host's "NIC" is the host itself: a route between servers then crosses switches only, as NS-3
    # hosts do not forward (without it, a GPU with an NVLink and a PCIe port would relay traffic)
    gpus = tuple(GpuInfo(f"h{i}", servers[i], None, None, f"h{i}") for i in range(n))
    topology = Topology(f"ns3:{path.name}", tuple(nodes), tuple(links), gpus)
    topology.check_routes(str(path))
    return topology


_NPUS = Param("npus_count", "network", int, "", Constraint(low=1, high=STAR_MAX_HOSTS))
_BANDWIDTH_GBS = Param("bandwidth", "network", float, "GB/s",
                       Constraint(low=BANDWIDTH_RANGE_BPS[0] / 8e9, high=BANDWIDTH_RANGE_BPS[1] / 8e9))
_LATENCY_NS = Param("latency", "network", float, "ns", Constraint(low=DELAY_RANGE_S[0] * 1e9, high=DELAY_RANGE_S[1] * 1e9))
"""The analytical network YAML's numbers, in its units (GB/s, ns), within moesim's link ranges."""


def topology_from_analytical(path: Path) -> Topology:
    """ASTRA-sim's analytical network YAML (bandwidth GB/s, latency ns per link) with ``Switch`` dimensions:
    one dimension is ``star:N``; with several, each NPU has a link to one switch per dimension, shared
    with the NPUs that differ from it in that coordinate only, so a message inside a dimension crosses
    that dimension's two links (docs/reference-runs.md S5, S6)."""
    try:
        raw = yaml.safe_load(_read_text(path, "analytical network"))
    except yaml.YAMLError as exc:
        raise MoesimError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    keys = ("topology", "npus_count", "bandwidth", "latency")
    if not isinstance(raw, dict):
        raise MoesimError(f"{path}: expected a mapping with keys {', '.join(keys)}")
    for key in raw:
        if key not in keys:
            raise input_error(str(path), key, "unknown or unsupported analytical network key", keys)
    lists = [raw.get(key) for key in keys]
    if not all(isinstance(v, list) and v for v in lists) or len({len(v) for v in lists}) != 1:  # type: ignore[arg-type]
        raise MoesimError(f"{path}: {', '.join(keys)} must be lists with one entry per dimension")
    for kind in raw["topology"]:
        if kind != "Switch":
            raise input_error(str(path), "topology", f"{kind!r} is not modelled", ("Switch",))
    dims = [_NPUS.check(d, str(path), strict=True) for d in raw["npus_count"]]
    bandwidths = [_BANDWIDTH_GBS.check(b, str(path), strict=True) * 8e9 for b in raw["bandwidth"]]
    latencies = [_LATENCY_NS.check(v, str(path), strict=True) * 1e-9 for v in raw["latency"]]
    if len(dims) == 1:
        return star_topology(dims[0], bandwidths[0], latencies[0])
    n = 1
    for d in dims:
        n *= d
    nodes = [TopoNode(f"h{i}", NodeKind.GPU, i) for i in range(n)]
    links: list[Link] = []
    stride = 1
    for k, d in enumerate(dims):
        switches: dict[int, str] = {}
        for i in range(n):
            key = i - (i // stride) % d * stride  # the NPU's coordinates with dimension k's set to 0
            if key not in switches:
                switches[key] = f"sw{k}_{len(switches)}"
                nodes.append(TopoNode(switches[key], NodeKind.SWITCH))
            links.append(Link(len(links), f"h{i}", switches[key], bandwidths[k], latencies[k], "fabric"))
            links.append(Link(len(links), switches[key], f"h{i}", bandwidths[k], latencies[k], "fabric"))
        stride *= d
    gpus = tuple(GpuInfo(f"h{i}", i, None, None, None) for i in range(n))
    return Topology(f"analytical:{'x'.join(map(str, dims))}", tuple(nodes), tuple(links), gpus)


def _servers(policy_path: Path, n: int) -> tuple[bool, tuple[int, ...] | None]:
    """moesim's ``cc_policy.json`` (written by ``moesim export``): (CC on every flow, host → server from the
    pairs it exempts). ASTRA-sim has no such file; it applies CC_MODE to every flow."""
    raw = _read_json(policy_path, "congestion-control policy")
    pairs = raw.get("no_cc_pairs", [])
    parent = list(range(n))

    def root(a: int) -> int:
        while parent[a] != a:
            a = parent[a]
        return a

    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(r, int) and 0 <= r < n for r in pair)):
            raise input_error(str(policy_path), "no_cc_pairs", f"must list rank pairs in 0..{n - 1}, got {pair!r}")
        parent[root(pair[0])] = root(pair[1])
    return raw.get("policy") == "all flows", tuple(root(i) for i in range(n))


def read_inputs(paths: AstraPaths) -> AstraInputs:
    """Read and check every file of ``paths``."""
    if paths.comm_groups is not None and not paths.comm_groups.is_file():
        raise MoesimError(f"{paths.comm_groups}: no such communicator-group file")
    workload = read_et(paths.workload, paths.comm_groups)  # the groups every pg_name is checked against
    n = len(workload.graphs)
    settings = read_system_json(paths.system)
    if paths.remote_memory is not None:
        check_remote_memory(paths.remote_memory)
    if paths.logical_topology is not None:
        workload = dataclasses.replace(workload, logical_dims=read_logical_dims(paths.logical_topology, n))
    if paths.network.suffix in (".yml", ".yaml"):
        topology, params, kind = topology_from_analytical(paths.network), REFERENCE_PRESETS["astra"], "analytical"
    else:
        params, files = params_from_ns3_config(_read_text(paths.network, "NS-3 network config"), str(paths.network))
        if "TOPOLOGY_FILE" not in files:
            raise input_error(str(paths.network), "TOPOLOGY_FILE", "missing: the NS-3 topology file")
        all_flows, servers = _servers(paths.cc_policy, n) if paths.cc_policy else (True, None)
        # ASTRA-sim resolves TOPOLOGY_FILE from its working directory: the export's README runs it from the
        # config's directory, which is where a relative name is looked up here
        topology = topology_from_ns3(paths.network.parent / files["TOPOLOGY_FILE"], servers)
        # and ns-3's NIC bookkeeping (nic_model), which the reference's multi-dimension runs need
        params = params.with_overrides({"intra_server_cc": all_flows, "nic_model": "ns3"}, str(paths.network))
        kind = "ns3"
    if topology.num_gpus != n:
        raise MoesimError(f"{paths.network}: the network has {topology.num_gpus} hosts but the workload "
                          f"{paths.workload} has {n} ranks")
    # ASTRA-sim inputs get ASTRA-sim's receive semantics (SystemSettings.astra_receives)
    settings = dataclasses.replace(settings, intra_server_cc=params.transport.intra_server_cc, astra_receives=True)
    return AstraInputs(workload, topology, params, settings, kind)


def with_overrides(inputs: AstraInputs, overrides: dict[str, Any]) -> AstraInputs:
    """``--set key=value`` on top of the files: a SystemSettings field, else a network parameter."""
    fields = {f.name for f in dataclasses.fields(SystemSettings)}
    system = {k: v for k, v in overrides.items() if k in fields}
    network = {k: v for k, v in overrides.items() if k not in fields}
    params = inputs.params.with_overrides(network or None, "--set")
    settings = dataclasses.replace(inputs.settings, **system, intra_server_cc=params.transport.intra_server_cc)
    return dataclasses.replace(inputs, params=params, settings=settings)
