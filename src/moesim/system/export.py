"""Export one run as an ASTRA-sim 2.0 input directory (NS-3 and analytical frontends).

Writes, from the same objects moesim simulates: per-rank Chakra ET files and communicator groups
(docs/reference-semantics.md C), the system JSON (B.1), the logical topology, the NS-3 network config text
(A.3) with the run's CC mode and ECN/PFC maps, the NS-3 topology file (A.2), a remote-memory JSON, an
analytical-backend network YAML, moesim's per-flow congestion-control policy, and a README.
"""

from __future__ import annotations

import json
from pathlib import Path

from moesim.errors import MoesimError
from moesim.fileio import atomic_write
from moesim.network.params import NetworkParams
from moesim.system.collectives import COLLECTIVES
from moesim.system.collectives.base import resolve
from moesim.system.phases import refine_dims
from moesim.system.run import prepare
from moesim.system.settings import SystemSettings
from moesim.system.spec import RunSpec
from moesim.topology.model import Topology
from moesim.topology.ns3_export import write_ns3_topology
from moesim.workload.chakra import write_et

_ASTRA_IMPL = {"ring": "ring", "dbt": "doubleBinaryTree", "doubleBinaryTree": "doubleBinaryTree",
               "direct": "direct", "halving_doubling": "halvingDoubling",
               "low_latency": "direct"}  # the same transfers as direct: one message per ordered pair


def system_json(settings: SystemSettings) -> dict[str, object]:
    """ASTRA-sim ``--system-configuration`` (B.1); every key the reference needs is set explicitly."""
    def impl(names: tuple[str, ...]) -> list[str]:  # one entry per logical dimension when they are set
        padded = names + names[-1:] * (len(settings.logical_dims) - len(names))
        return [_ASTRA_IMPL.get(n, n) for n in padded]

    return {
        "scheduling-policy": settings.scheduling_policy,
        "endpoint-delay": round(settings.endpoint_delay_s * 1e9),
        "active-chunks-per-dimension": settings.active_chunks,
        "preferred-dataset-splits": settings.dataset_splits,
        "all-reduce-implementation": impl(settings.all_reduce),
        "reduce-scatter-implementation": impl(settings.reduce_scatter),
        "all-gather-implementation": impl(settings.all_gather),
        "all-to-all-implementation": impl(settings.all_to_all),
        "collective-optimization": settings.collective_optimization,
        "local-mem-bw": settings.mem_bw_bytes_per_s / 1e9,
        "peak-perf": settings.peak_flops / 1e12,
        "roofline-enabled": 1 if settings.roofline else 0,
        "boost-mode": 0,
    }


def _rate_map(table: tuple[tuple[float, float], ...], rates: list[float], params: NetworkParams,
              which: str) -> str:
    values = {r: (params.switch.kmin_bytes(r) if which == "min" else params.switch.kmax_bytes(r)) / 1000 for r in rates}
    values.update({r: v for r, v in table})
    items = sorted(values.items())
    return f"{len(items)} " + " ".join(f"{int(r)} {v:g}" for r, v in items)


def network_config_text(params: NetworkParams, topology: Topology) -> str:
    """The NS-3 backend's text config (A.3). ECN maps get an entry for every port rate in the topology."""
    rates = sorted({link.bandwidth_bps for link in topology.links})
    kmin = _rate_map(params.switch.kmin_kb, rates, params, "min")
    kmax = _rate_map(params.switch.kmax_kb, rates, params, "max")
    pmax = f"{len(rates)} " + " ".join(f"{int(r)} {params.switch.pmax:g}" for r in rates)
    lines = {
        "ENABLE_QCN": int(params.switch.enable_qcn), "USE_DYNAMIC_PFC_THRESHOLD": 1,
        "PACKET_PAYLOAD_SIZE": params.transport.packet_payload_bytes, "TOPOLOGY_FILE": "topology.txt",
        "FLOW_FILE": "flow.txt", "TRACE_FILE": "trace.txt", "TRACE_OUTPUT_FILE": "out/mix.tr",
        "FCT_OUTPUT_FILE": "out/fct.txt", "PFC_OUTPUT_FILE": "out/pfc.txt", "QLEN_MON_FILE": "out/qlen.txt",
        "QLEN_MON_START": 0, "QLEN_MON_END": 20000, "SIMULATOR_STOP_TIME": "40000000000000.00",
        "CC_MODE": params.cc_mode,
        "ALPHA_RESUME_INTERVAL": params.value("alpha_resume_interval_s") * 1e6,
        "RATE_DECREASE_INTERVAL": params.value("rate_decrease_interval_s") * 1e6,
        "CLAMP_TARGET_RATE": int(params.value("clamp_target_rate")), "RP_TIMER": params.value("rp_timer_s") * 1e6,
        "EWMA_GAIN": params.rate.ewma_gain, "FAST_RECOVERY_TIMES": params.value("fast_recovery_times"),
        "RATE_AI": f"{params.rate.rate_ai_bps / 1e6:g}Mb/s", "RATE_HAI": f"{params.rate.rate_hai_bps / 1e6:g}Mb/s",
        "MIN_RATE": f"{params.rate.min_rate_bps / 1e6:g}Mb/s", "DCTCP_RATE_AI": "1000Mb/s",
        "ERROR_RATE_PER_LINK": 0.0, "L2_CHUNK_SIZE": params.transport.l2_chunk_bytes,
        "L2_ACK_INTERVAL": params.transport.l2_ack_interval, "L2_BACK_TO_ZERO": int(params.transport.l2_back_to_zero),
        "HAS_WIN": int(params.transport.has_win), "GLOBAL_T": int(params.transport.global_t), "VAR_WIN": int(params.transport.var_win),
        "FAST_REACT": int(params.value("fast_react")), "U_TARGET": params.value("u_target"), "MI_THRESH": params.value("mi_thresh"),
        "INT_MULTI": params.value("int_multi"), "MULTI_RATE": int(params.value("multi_rate")),
        "SAMPLE_FEEDBACK": int(params.value("sample_feedback")), "PINT_LOG_BASE": 1.05, "PINT_PROB": 1.0,
        "RATE_BOUND": int(params.transport.rate_bound), "ACK_HIGH_PRIO": int(params.transport.ack_high_prio),
        "LINK_DOWN": "0 0 0", "ENABLE_TRACE": 0, "KMAX_MAP": kmax, "KMIN_MAP": kmin, "PMAX_MAP": pmax,
        "BUFFER_SIZE": params.switch.buffer_bytes // (1024 * 1024), "NIC_TOTAL_PAUSE_TIME": 0,
    }
    return "".join(f"{k} {v}\n" for k, v in lines.items())


def analytical_network_yaml(topology: Topology, logical_dims: tuple[int, ...]) -> str:
    """A congestion-unaware analytical network: one switch per logical dim at the slowest link rate."""
    slowest = min(link.bandwidth_bps for link in topology.links)
    latency_ns = max(link.delay_s for link in topology.links) * 1e9
    n = len(logical_dims)
    return (
        f"topology: [ {', '.join(['Switch'] * n)} ]\n"
        f"npus_count: [ {', '.join(str(d) for d in logical_dims)} ]\n"
        f"bandwidth: [ {', '.join([f'{slowest / 8e9:g}'] * n)} ]  # GB/s\n"
        f"latency: [ {', '.join([f'{latency_ns:g}'] * n)} ]  # ns\n"
    )


def export_run(spec: RunSpec, out_dir: str | Path, prefix: str = "workload") -> list[Path]:
    """Write the ASTRA-sim input directory for ``spec``; returns the files written."""
    out = Path(out_dir)
    prepared = prepare(spec)
    settings = prepared.settings
    placed = [impl for impl in settings.all_to_all if COLLECTIVES.get(resolve(impl)[0]).placed is not None]
    if settings.comm_sms or placed:
        raise MoesimError(f"export: ASTRA-sim has no {'comm_sms' if settings.comm_sms else placed[0] + ' all-to-all'}; "
                          "export the run without it")
    params, topology, workload = prepared.params, prepared.topology, prepared.workload()
    if settings.logical_dims:
        workload = refine_dims(workload, settings.logical_dims)
    written = list(write_et(workload, out / "workload", prefix))
    comm_groups = {str(g): list(m) for g, m in workload.comm_groups}
    files = {
        "comm_groups.json": json.dumps(comm_groups, indent=1),
        "system.json": json.dumps(system_json(settings), indent=2),
        "logical_topology.json": json.dumps({"logical-dims": [str(d) for d in workload.logical_dims]}),
        "remote_memory.json": json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}),
        "network.txt": network_config_text(params, topology),
        "network_analytical.yml": analytical_network_yaml(topology, workload.logical_dims),
        "flow.txt": "0\n",
        "trace.txt": "0\n",
        "cc_policy.json": json.dumps(_policy(params, topology, prepared.placement.rank_to_gpu), indent=1),
        "README.md": _readme(spec, prefix, params),
    }
    for name, text in files.items():
        written.append(atomic_write(out / name, text))
    # without the cables NS-3 would take detours over: its fewest-hop routing then finds moesim's paths
    written.append(write_ns3_topology(topology, out / "topology.txt", prepared.placement, moesim_routes=True))
    (out / "out").mkdir(exist_ok=True)
    return written


def _policy(params: NetworkParams, topology: Topology, rank_to_gpu: tuple[int, ...]) -> dict[str, object]:
    """The per-flow CC policy by rank (NS-3 node id = rank); ranks on one server carry no CC unless asked."""
    n = len(rank_to_gpu)
    exempt = [[a, b] for a in range(n) for b in range(n)
              if a != b and topology.same_server(rank_to_gpu[a], rank_to_gpu[b])]
    return {
        "cc_mode": params.cc_mode, "cc": params.cc_name,
        "policy": "all flows" if params.transport.intra_server_cc else "inter-server flows only",
        "no_cc_pairs": [] if params.transport.intra_server_cc else exempt,
        "note": "moesim's per-flow policy; the reference NS-3 backend has no such switch and applies "
                "CC_MODE to every flow",
    }


def _readme(spec: RunSpec, prefix: str, params: NetworkParams) -> str:
    return f"""# ASTRA-sim 2.0 inputs for one moesim run

Run: model `{spec.model}`, topology `{spec.topology}`, strategy `{spec.strategy}`, algorithm
`{spec.algorithm}`, network `{spec.network}` (CC_MODE {params.cc_mode}, ENABLE_QCN {int(params.switch.enable_qcn)}).
Written by `moesim export`. From this directory, with ASTRA-sim built with its NS-3 backend:

```bash
"$ASTRA_SIM/extern/network_backend/ns-3/build/scratch/ns3.42-AstraSimNetwork-default" \\
  --workload-configuration=workload/{prefix} \\
  --system-configuration=system.json \\
  --network-configuration=network.txt \\
  --remote-memory-configuration=remote_memory.json \\
  --logical-topology-configuration=logical_topology.json \\
  --comm-group-configuration=empty
```

The study's collectives select their logical dimension with `involved_dim` (global group), so the
communicator groups in `comm_groups.json` are informational; pass it instead of `empty` only for
workloads that use `pg_name`. With the analytical frontend:

```bash
"$ASTRA_SIM/build/astra_analytical/build/bin/AstraSim_Analytical_Congestion_Unaware" \\
  --workload-configuration=workload/{prefix} --system-configuration=system.json \\
  --network-configuration=network_analytical.yml --remote-memory-configuration=remote_memory.json
```

`cc_policy.json` records moesim's per-flow congestion-control policy (no CC for flows inside one
server); the reference backend cannot express it and applies CC_MODE to every flow. The reference
HPCC INT header holds 5 hops and encodes 25/50/100/200/400/1200/2400 Gbps only: a 512 Gbps port is
stamped as 25 Gbps there (see docs/reference-runs.md, S1).
"""
