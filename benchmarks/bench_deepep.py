"""DeepEP's published normal-kernel test, as moesim models it (docs/system.md, "All-to-all against DeepEP").

Setup of DeepEP's test (github.com/deepseek-ai/DeepEP, docs/legacy.md "Normal kernels"): H800-class servers of
8 GPUs on NVLink, one 400 Gb/s InfiniBand NIC per GPU; 4096 tokens per GPU, hidden 7168, top-8 of 256 experts
within the top-4 groups (a group = one server's experts, DeepEP's test groups experts by node), FP8 dispatch
(7168 B + one 4-byte scale per 128 values) and BF16 combine. EP16, EP32 and EP64 (2, 4, 8 servers) run the
hierarchical all-to-all; the intra-node EP8 case runs on one server over NVLink.

Printed per case, in DeepEP's definitions: RDMA bandwidth = the bytes each GPU sends over RDMA / kernel time,
where those bytes count each token once per destination server, its own server included (DeepEP's
``num_rdma_token_sent``), so the figure can exceed the NIC; NVLink bandwidth (EP8) = the bytes a GPU receives
/ kernel time. Kernel time = the all-to-all's simulated duration. Nothing is fitted: the topology is the
hgx-h100 template with the NVLink bandwidth of an H800 (400 GB/s both directions: 200 GB/s each way), the
group-limited routing enters only through the expected number of servers a token reaches
(``hierarchical.miss_probability``), and moesim's chunking and timing are its defaults.

    python benchmarks/bench_deepep.py [--backend flow|fluid] [--network ib_cc0]
"""

from __future__ import annotations

import argparse
import dataclasses
from math import comb

from moesim.network import BACKENDS
from moesim.network.params import network_mode
from moesim.system.collectives.hierarchical import miss_probability
from moesim.system.engine import Simulation, SystemSettings
from moesim.topology.catalog import get_topology
from moesim.workload.graph import CollectiveType, Node, NodeKind, RankGraph, Workload

TOKENS, HIDDEN, EXPERTS, TOP_K, GROUPS_PER_TOKEN = 4096, 7168, 256, 8, 4
GPUS_PER_SERVER = 8
H800_NVLINK_BPS = 200e9 * 8  # per direction
FP8_TOKEN_BYTES = HIDDEN * (1 + 4 / 128)  # FP8 values + one float32 scale per 128
BF16_TOKEN_BYTES = HIDDEN * 2
PUBLISHED = {  # DeepEP docs/legacy.md: (dispatch, combine) bottleneck bandwidth, GB/s
    8: (153, 158), 16: (43, 43), 32: (58, 57), 64: (51, 50),
}


def _all_to_all(n: int, size_bytes: int) -> Workload:
    node = Node(0, "a2a", NodeKind.COLLECTIVE, collective=CollectiveType.ALL_TO_ALL, size_bytes=size_bytes)
    return Workload(f"a2a_{n}", tuple(RankGraph(r, (node,)) for r in range(n)), (n,))


SPLITS = [4, 1]  # the study's dataset_splits and active_chunks; --dataset-splits, --active-chunks change them


def _kernel_s(workload: Workload, servers: int, settings: SystemSettings, backend: str, network: str) -> float:
    settings = dataclasses.replace(settings, dataset_splits=SPLITS[0], active_chunks=SPLITS[1])
    params = network_mode(network)
    topology = get_topology(f"hgx-h100:{servers}", nic_switch_delay_s=params.transport.nic_switch_delay_s)
    topology = topology.with_link_bandwidths({"nvlink": H800_NVLINK_BPS})
    sim = Simulation(workload, topology, BACKENDS.get(backend)(topology, params), settings)
    return max(t.wall_s for t in sim.run())


def internode(ep: int, token_bytes: float, backend: str, network: str) -> tuple[float, float]:
    """(kernel time s, RDMA GB/s in DeepEP's definition) of one dispatch or combine at EP ``ep``."""
    servers = ep // GPUS_PER_SERVER
    routing = (EXPERTS, TOP_K, servers, min(GROUPS_PER_TOKEN, servers))
    per_server = EXPERTS // servers
    servers_hit = sum(1 - miss_probability(frozenset(range(s * per_server, (s + 1) * per_server)), routing)
                      for s in range(servers))
    # per-rank buffer: every token's top-k rows (the engine sends a pair its 1/ep share)
    size = round(TOKENS * TOP_K * token_bytes)
    settings = SystemSettings(all_to_all=("hierarchical",), expert_routing=routing, fast_forward=False)
    t = _kernel_s(_all_to_all(ep, size), servers, settings, backend, network)
    return t, TOKENS * servers_hit * token_bytes / t / 1e9


def intranode(token_bytes: float, backend: str, network: str) -> tuple[float, float]:
    """(kernel time s, NVLink GB/s received per GPU) of one EP8 dispatch or combine on one server: each token
    goes once to every GPU holding one of its top-8 experts (32 experts per GPU)."""
    hit = 1 - comb(EXPERTS - EXPERTS // 8, TOP_K) / comb(EXPERTS, TOP_K)
    size = round(8 * TOKENS * hit * token_bytes)
    t = _kernel_s(_all_to_all(8, size), 1, SystemSettings(fast_forward=False), backend, network)
    return t, 8 * TOKENS * hit * token_bytes / t / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="flow", choices=sorted(BACKENDS.names()))
    ap.add_argument("--network", default="ib_cc0", help="network mode (DeepEP runs without congestion control)")
    ap.add_argument("--dataset-splits", type=int, default=4, help="chunks per all-to-all (moesim's default: 4)")
    ap.add_argument("--active-chunks", type=int, default=1, help="chunks in flight per GPU (moesim's default: 1)")
    args = ap.parse_args()
    SPLITS[:] = [args.dataset_splits, args.active_chunks]
    print(f"DeepEP normal kernels as moesim models them (backend {args.backend}, network {args.network}, "
          f"{args.dataset_splits} chunks, {args.active_chunks} in flight)")
    print(f"{'case':>10} {'dispatch ms':>12} {'GB/s':>7} {'DeepEP':>7} {'combine ms':>11} {'GB/s':>7} {'DeepEP':>7}")
    for ep in (8, 16, 32, 64):
        if ep == 8:
            (td, bd), (tc, bc), kind = (intranode(FP8_TOKEN_BYTES, args.backend, args.network),
                                        intranode(BF16_TOKEN_BYTES, args.backend, args.network), "NVLink")
        else:
            (td, bd), (tc, bc), kind = (internode(ep, FP8_TOKEN_BYTES, args.backend, args.network),
                                        internode(ep, BF16_TOKEN_BYTES, args.backend, args.network), "RDMA")
        pd, pc = PUBLISHED[ep]
        print(f"{f'EP{ep} {kind}':>10} {td * 1e3:12.3f} {bd:7.1f} {pd:7d} {tc * 1e3:11.3f} {bc:7.1f} {pc:7d}")


if __name__ == "__main__":
    main()
