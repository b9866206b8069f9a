"""Small hand-built topologies and workloads shared by tests (no library code depends on this)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from moesim.network import BACKENDS
from moesim.network.base import Flow
from moesim.network.params import network_mode
from moesim.system.spec import RunSpec
from moesim.topology.catalog import get_topology, star_topology
from moesim.topology.model import Topology
from moesim.workload.graph import CollectiveType, Node, RankGraph, Workload
from moesim.workload.graph import NodeKind as NK


def star(n: int, bandwidth_bps: float = 400e9, delay_s: float = 500e-9) -> Topology:
    """``n`` hosts, each on its own server, on one switch (docs/reference-runs.md scenario S1)."""
    return star_topology(n, bandwidth_bps, delay_s)


def one_collective(n: int, ctype: CollectiveType, size_bytes: int) -> Workload:
    """Every rank runs one collective of ``size_bytes`` over all ranks (logical topology: one dim of n)."""
    graphs = tuple(
        RankGraph(r, (Node(0, "coll", NK.COLLECTIVE, collective=ctype, size_bytes=size_bytes),)) for r in range(n)
    )
    return Workload(f"{ctype.name.lower()}_{n}", graphs, (n,))


def all_to_all(backend_name: str, mode: str, size_bytes: int, n: int = 8, topology: str = "1",
               groups: int = 1, **overrides: Any) -> tuple[list[float], Any]:
    """(completion times, backend) of all-to-alls among the first ``n`` GPUs of a study topology (default
    1: one GPU per server, 512 Gb/s PCIe into a 400 Gb/s NIC port), GPU i in group i mod ``groups``;
    every message of ``size_bytes`` sent at t = 0, congestion control on inter-server flows only."""
    params = network_mode(mode).with_overrides(overrides or None)
    topo = get_topology(topology, nic_switch_delay_s=params.transport.nic_switch_delay_s)
    backend = BACKENDS.get(backend_name)(topo, params)
    pairs = [(s, d) for s in range(n) for d in range(n) if s != d and s % groups == d % groups]
    for i, (s, d) in enumerate(pairs):
        backend.start_flow(Flow(i, s, d, size_bytes, cc=not topo.same_server(s, d)), 0.0)
    done: list[float] = []
    while len(done) < len(pairs):
        t = backend.next_completion_s(None)
        done += [t] * len(backend.advance_to(t))
    return done, backend


def load_benchmark(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` as a module (registered first: its dataclasses look their module up
    while the file runs)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


DP_EP_DECODE = RunSpec("deepseek-v3", "hgx-h800:2", "DP16EP16", backend="fluid", overrides=tuple(sorted({
    "phase": "decode", "batch": 256, "context_tokens": 1000, "gpu": "topology", "compute_model": "measured",
    "expert_dtype": "fp8", "overlap": "two-batch", "all_to_all_algorithm": "low_latency", "mtp_draft_tokens": 1,
    "mtp_acceptance": 0.85, "redundant_experts": 16, "expert_placement": "eplb"}.items())))
"""A DP-attention EP decode step as DeepSeek serves it, scaled down: replicas placed by EPLB once per pass (so
its MoE layers have one per-pair all-to-all matrix), two-batch overlap, MTP, low-latency all-to-all."""
