"""One study run as a library call: RunSpec → workload, topology, backend → simulate → RunResult."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from moesim import __version__
from moesim.errors import MoesimError, input_error
from moesim.models.catalog import get_model
from moesim.network import BACKENDS
from moesim.network.diagnostics import DiagnosticsSpec
from moesim.network.params import NetworkParams, network_mode
from moesim.system.engine import Simulation, SystemSettings
from moesim.system.spec import ALGORITHMS, RunResult, RunSpec
from moesim.topology.builder import LINK_KINDS
from moesim.topology.catalog import get_topology
from moesim.workload.generator import WorkloadOptions, generate
from moesim.workload.layout import ParallelLayout

_WORKLOAD_KEYS = {"tokens"} | {f.name for f in dataclasses.fields(WorkloadOptions)}
_SYSTEM_KEYS = {f.name for f in dataclasses.fields(SystemSettings)} - {
    "all_reduce", "all_to_all", "all_gather", "reduce_scatter"}
_NETWORK_KEYS = {f.name for f in dataclasses.fields(NetworkParams)} - {"name"}
LINK_BANDWIDTH_KEYS = {f"{kind}_bandwidth_bps": kind for kind in LINK_KINDS}
"""Topology overrides: every link of one kind gets this bandwidth (e.g. ``fabric_bandwidth_bps``)."""


def split_overrides(overrides: dict[str, Any], source: str = "overrides") -> tuple[dict, dict, dict, dict]:
    """Sort override names into (workload, system, network, link bandwidth by kind) parts; unknown
    names are an error."""
    wl, sy, net, links = {}, {}, {}, {}
    for key, value in overrides.items():
        if key in _WORKLOAD_KEYS:
            wl[key] = value
        elif key in _SYSTEM_KEYS:
            sy[key] = value
        elif key in _NETWORK_KEYS:
            net[key] = value
        elif key in LINK_BANDWIDTH_KEYS:
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise input_error(source, key, f"must be a positive bandwidth in bits/s, got {value!r}")
            links[LINK_BANDWIDTH_KEYS[key]] = float(value)
        else:
            allowed = sorted(_WORKLOAD_KEYS | _SYSTEM_KEYS | _NETWORK_KEYS | set(LINK_BANDWIDTH_KEYS))
            raise MoesimError(f"{source}: field '{key}': unknown parameter (allowed: {', '.join(allowed)})")
    return wl, sy, net, links


def prepare(spec: RunSpec) -> tuple[Any, ...]:
    """Resolve every input of a run, so errors surface before anything is simulated."""
    if spec.algorithm not in ALGORITHMS:
        raise MoesimError(f"unknown algorithm '{spec.algorithm}' (allowed: {', '.join(ALGORITHMS)})")
    wl_over, sys_over, net_over, link_bw = split_overrides(spec.override_dict())
    model = get_model(spec.model)
    layout = ParallelLayout.parse(spec.strategy)
    params = network_mode(spec.network).with_overrides(net_over)
    topology = get_topology(spec.topology, nic_switch_delay_s=params.nic_switch_delay_s)
    if link_bw:
        topology = topology.with_link_bandwidths(link_bw)
    layout.validate(num_ranks=topology.num_gpus, routed_experts=model.routed_experts,
                    source=f"run {spec.model}/{spec.topology}")
    tokens = int(wl_over.pop("tokens", 4096))
    workload = generate(model, layout, tokens, WorkloadOptions(**wl_over))
    tp_impl, ep_impl = ALGORITHMS[spec.algorithm]
    settings = SystemSettings(all_reduce=(tp_impl, tp_impl), all_to_all=(ep_impl, ep_impl),
                              intra_server_cc=params.intra_server_cc)
    settings = dataclasses.replace(settings, **sys_over)
    backend_cls = BACKENDS.get(spec.backend)
    return model, layout, params, topology, workload, settings, backend_cls, tokens


def simulate_run(spec: RunSpec, diagnostics: bool = False) -> RunResult:
    """Simulate one run. ``diagnostics`` keeps the backend's per-run diagnostics (disables fast-forward)."""
    t0 = time.perf_counter()
    model, layout, params, topology, workload, settings, backend_cls, tokens = prepare(spec)
    if diagnostics:
        settings = dataclasses.replace(settings, fast_forward=False)
    backend = backend_cls(topology, params, diagnostics=DiagnosticsSpec.everything() if diagnostics else None)
    sim = Simulation(workload, topology, backend, settings)
    ranks = sim.run()
    bottleneck = max(range(len(ranks)), key=lambda r: (ranks[r].wall_s, -r))
    cc_model = params.cc_name if backend.capabilities.congestion_control else "none (backend is blind to CC)"
    policy = "all flows" if params.intra_server_cc else "inter-server flows only (intra-server flows: no CC)"
    parameters = {
        "tokens": tokens,
        "network": {k: v for k, v in params.as_dict().items() if k != "extra"},
        "system": dataclasses.asdict(settings),
        "topology_gpus": topology.num_gpus,
        "fast_forwarded_layers": sim.fast_forwarded_layers,
        "fast_forward_mode": sim.fast_forward_mode,
        "backend": backend.parameters(),
    }
    return RunResult(
        spec=spec, ranks=tuple(ranks), bottleneck_rank=bottleneck, backend=spec.backend, cc_model=cc_model,
        cc_policy=policy, version=__version__, parameters=parameters,
        diagnostics=backend.diagnostics() if diagnostics else {},
        sim_wallclock_s=time.perf_counter() - t0,
    )
