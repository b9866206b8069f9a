"""DeepEP's published kernel tests, as moesim models them (docs/overlap.md, "Against DeepEP's published tests").

Normal kernels (github.com/deepseek-ai/DeepEP, docs/legacy.md "Normal kernels"): H800 servers of 8 GPUs on
NVLink ("~160 GB/s NVLink maximum bandwidth", the test's own statement), one 400 Gb/s InfiniBand NIC per GPU; 4096 tokens per GPU, hidden 7168, top-8 of 256 experts within
the top-4 groups (a group = one server's experts, DeepEP's test groups experts by node), FP8 dispatch (7168 B
+ one 4-byte scale per 128 values) and BF16 combine. EP16, EP32 and EP64 (2, 4, 8 servers) run the
hierarchical all-to-all; the intra-node EP8 case runs on one server over NVLink. Printed per case, in
DeepEP's definitions: RDMA bandwidth = the bytes each GPU sends over RDMA / kernel time, where those bytes
count each token once per destination server, its own server included (DeepEP's ``num_rdma_token_sent``),
so the figure can exceed the NIC; NVLink bandwidth (EP8) = the bytes a GPU receives / kernel time.

Low-latency kernels (docs/legacy.md "Low-latency kernels with pure RDMA"; the figures of DeepEP's first
release, measured with pure RDMA; EP128 and EP256 are unchanged in today's table): 128 tokens per GPU,
hidden 7168, top-8, FP8 dispatch (7168 B + 224 B of scales + 16 B, DeepEP's test) and BF16 combine, every
token–expert row its own RDMA write (the ``low_latency`` all-to-all) on H800 servers whose GPUs reach each
other only through their NICs (``low_latency.rdma_only_server``). Printed: latency = the all-to-all's
simulated duration, in one chunk (the kernel sends everything at once), with the rows routed as DeepEP's test
draws them (tests/legacy/test_low_latency.py: each token's top-8 of 256 random scores, i.e. 8 distinct experts
uniformly at random, then 10 random (token, slot) entries set to -1 and not sent), one draw per rank seeded by
``--seed`` (``routing.draw_tokens``), beside the expected rows (every pair the same D/N, "uniform").

Kernel time = the simulated duration of one all-to-all in one chunk: a DeepEP kernel is one stream, whose
pipelining the algorithms model themselves (``--dataset-splits 4`` cuts it as a study run does). Nothing is
fitted: the hgx-h800 template (a 400 Gb/s NIC per GPU) with the NVLink bandwidth DeepEP's test states for
its H800s, 160 GB/s per direction (``--nvlink-gbps 200``: the data sheet's); the group-limited routing enters
only through the expected number of servers a token reaches (``hierarchical.miss_probability``).

    python benchmarks/bench_deepep.py [--backend flow|fluid] [--network ib_cc0] [--nvlink-gbps 200]
        [--dataset-splits 4] [--modes normal,low-latency] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
from math import comb

import numpy as np

from moesim.network import BACKENDS
from moesim.network.params import network_mode
from moesim.system.collectives.hierarchical import miss_probability
from moesim.system.collectives.low_latency import rdma_only_server
from moesim.system.engine import Simulation, SystemSettings
from moesim.topology.builder import build_topology
from moesim.topology.model import Topology
from moesim.topology.templates import template_spec
from moesim.workload.graph import CollectiveType, Node, NodeKind, RankGraph, Workload
from moesim.workload.routing import draw_tokens, uniform_counts

TOKENS, HIDDEN, EXPERTS, TOP_K, GROUPS_PER_TOKEN = 4096, 7168, 256, 8, 4
GPUS_PER_SERVER = 8
FP8_TOKEN_BYTES = HIDDEN * (1 + 4 / 128)  # FP8 values + one float32 scale per 128
BF16_TOKEN_BYTES = HIDDEN * 2
PUBLISHED = {  # DeepEP docs/legacy.md: (dispatch, combine) bottleneck bandwidth, GB/s
    8: (153, 158), 16: (43, 43), 32: (58, 57), 64: (51, 50),
}
LL_TOKENS = 128
LL_FP8_ROW_BYTES = HIDDEN + HIDDEN // 128 * 4 + 16  # DeepEP tests/legacy/test_low_latency.py
LL_MASKED = 10  # entries of topk_idx the low-latency test sets to -1 (a (token, slot) drawn 10 times)
LL_PUBLISHED = {  # DeepEP's first release, README "Low-latency kernels with pure RDMA": (dispatch, combine) µs
    8: (163, 318), 16: (173, 329), 32: (182, 350), 64: (186, 353), 128: (192, 369),
}


def _all_to_all(n: int, size_bytes: int) -> Workload:
    node = Node(0, "a2a", NodeKind.COLLECTIVE, collective=CollectiveType.ALL_TO_ALL, size_bytes=size_bytes)
    return Workload(f"a2a_{n}", tuple(RankGraph(r, (node,)) for r in range(n)), (n,))


def _topology(servers: int, network: str, nvlink_bps: float, rdma_only: bool = False) -> Topology:
    spec = template_spec(f"hgx-h800:{servers}")
    assert spec is not None
    if rdma_only:
        spec = dataclasses.replace(spec, server=rdma_only_server(spec.server))
    topology = build_topology(spec, network_mode(network).transport.nic_switch_delay_s)
    return topology.with_link_bandwidths({"nvlink": nvlink_bps}) if nvlink_bps else topology


def _kernel_s(workload: Workload, topology: Topology, settings: SystemSettings, args: argparse.Namespace) -> float:
    params = network_mode(args.network)
    sim = Simulation(workload, topology, BACKENDS.get(args.backend)(topology, params), settings)
    return max(t.wall_s for t in sim.run())


def _splits(settings: SystemSettings, args: argparse.Namespace) -> SystemSettings:
    return dataclasses.replace(settings, dataset_splits=args.dataset_splits, active_chunks=args.active_chunks)


def internode(ep: int, token_bytes: float, args: argparse.Namespace, rows: tuple[int, ...] = ()) -> tuple[float, float]:
    """(kernel time s, RDMA GB/s in DeepEP's definition) of one dispatch or combine at EP ``ep``; ``rows``
    (sender × receiver, ``normal_drawn_rows``): the rows each pair carries (default TOKENS·k/EP each)."""
    servers = ep // GPUS_PER_SERVER
    routing = (EXPERTS, TOP_K, servers, min(GROUPS_PER_TOKEN, servers))
    per_server = EXPERTS // servers
    servers_hit = sum(1 - miss_probability(frozenset(range(s * per_server, (s + 1) * per_server)), routing)
                      for s in range(servers))
    # per-rank buffer: every token's top-k rows (the engine sends a pair its 1/ep share)
    size = round(TOKENS * TOP_K * token_bytes)
    settings = SystemSettings(all_to_all=("hierarchical",), expert_routing=routing, fast_forward=False)
    workload = pair_all_to_all(ep, tuple(round(r * token_bytes) for r in rows)) if rows else _all_to_all(ep, size)
    t = _kernel_s(workload, _topology(servers, args.network, args.nvlink_bps), _splits(settings, args), args)
    return t, TOKENS * servers_hit * token_bytes / t / 1e9


def normal_drawn_rows(ep: int, seed: int) -> tuple[int, ...]:
    """Rows per (sender, receiver) pair, flattened, as DeepEP's internode test routes (tests/legacy/
    test_internode.py): per token, scores |N(0, 1)| + 1 over the 256 experts, the top-4 servers by their best
    score, then the top-8 experts on those servers; expert e lives on rank e·EP/256."""
    rng = np.random.default_rng([seed, ep, 1])
    servers, groups = ep // GPUS_PER_SERVER, min(GROUPS_PER_TOKEN, ep // GPUS_PER_SERVER)
    rows = []
    for _ in range(ep):
        scores = np.abs(rng.standard_normal((TOKENS, EXPERTS))) + 1
        best = scores.reshape(TOKENS, servers, -1).max(axis=2)
        kept = np.argpartition(-best, groups - 1, axis=1)[:, :groups]
        allowed = np.zeros((TOKENS, servers), dtype=bool)
        np.put_along_axis(allowed, kept, True, axis=1)
        scores = np.where(np.repeat(allowed, EXPERTS // servers, axis=1), scores, 0.0)
        picked = np.argpartition(-scores, TOP_K - 1, axis=1)[:, :TOP_K]
        rows.extend(np.bincount(picked.ravel() * ep // EXPERTS, minlength=ep).tolist())
    return tuple(rows)


def intranode(token_bytes: float, args: argparse.Namespace) -> tuple[float, float]:
    """(kernel time s, NVLink GB/s received per GPU) of one EP8 dispatch or combine on one server: each token
    goes once to every GPU holding one of its top-8 experts (32 experts per GPU)."""
    hit = 1 - comb(EXPERTS - EXPERTS // 8, TOP_K) / comb(EXPERTS, TOP_K)
    size = round(8 * TOKENS * hit * token_bytes)
    settings = _splits(SystemSettings(fast_forward=False), args)
    t = _kernel_s(_all_to_all(8, size), _topology(1, args.network, args.nvlink_bps), settings, args)
    return t, 8 * TOKENS * hit * token_bytes / t / 1e9


def drawn_rows(ep: int, seed: int) -> tuple[int, ...]:
    """Rows per (sender, receiver) pair, flattened, as DeepEP's low-latency test routes: each rank's 128 tokens
    pick 8 distinct experts of 256 uniformly at random, ``LL_MASKED`` random (token, slot) entries become -1
    (not sent), and expert e lives on rank e·EP/256."""
    rng = np.random.default_rng([seed, ep])
    counts = uniform_counts(EXPERTS, LL_TOKENS, TOP_K)
    rows = []
    for _ in range(ep):
        picked = draw_tokens(counts, LL_TOKENS, LL_TOKENS, rng)
        picked[rng.integers(0, LL_TOKENS, LL_MASKED), rng.integers(0, TOP_K, LL_MASKED)] = -1
        rows.extend(np.bincount(picked[picked >= 0] * ep // EXPERTS, minlength=ep).tolist())
    return tuple(rows)


def pair_all_to_all(n: int, pair_bytes: tuple[int, ...]) -> Workload:
    """One all-to-all over ``n`` ranks in which sender s sends ``pair_bytes[s·n + d]`` bytes to receiver d."""
    graphs = tuple(RankGraph(r, (Node(0, "a2a", NodeKind.COLLECTIVE, collective=CollectiveType.ALL_TO_ALL,
                                      size_bytes=sum(pair_bytes[r * n:(r + 1) * n]), pair_bytes=pair_bytes),))
                   for r in range(n))
    return Workload(f"a2a_{n}", graphs, (n,))


def low_latency(ep: int, row_bytes: int, args: argparse.Namespace, rows: tuple[int, ...] = ()) -> float:
    """Kernel time (s) of one low-latency dispatch or combine at EP ``ep``: every rank sends each of its
    128 tokens' 8 rows to the GPU of the row's expert, over RDMA only, in one go; ``rows`` (sender ×
    receiver, ``drawn_rows``): the rows each pair carries (default the expected D/N each)."""
    settings = SystemSettings(all_to_all=("low_latency",), dataset_splits=1, fast_forward=False)
    topology = _topology(max(1, ep // GPUS_PER_SERVER), args.network, 0.0, rdma_only=True)
    workload = (pair_all_to_all(ep, tuple(r * row_bytes for r in rows)) if rows
                else _all_to_all(ep, LL_TOKENS * TOP_K * row_bytes))
    return _kernel_s(workload, topology, settings, args)


def transposed(rows: tuple[int, ...], n: int) -> tuple[int, ...]:
    """The combine's rows: each receiver returns what it got (none given: none)."""
    return tuple(rows[s * n + d] for d in range(n) for s in range(n))


def _off(value: float, published: float) -> str:
    return f"{(value / published - 1) * 100:+.0f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="flow", choices=sorted(BACKENDS.names()))
    ap.add_argument("--network", default="ib_cc0", help="network mode (DeepEP runs without congestion control)")
    ap.add_argument("--dataset-splits", type=int, default=1,
                    help="chunks per normal-mode all-to-all (default 1: one kernel; a study run's: 4)")
    ap.add_argument("--active-chunks", type=int, default=1, help="chunks in flight per GPU (moesim's default: 1)")
    ap.add_argument("--nvlink-gbps", type=float, default=160.0,
                    help="NVLink GB/s per direction (default 160: DeepEP's test's H800s; the data sheet's: 200)")
    ap.add_argument("--modes", default="normal,low-latency", help="which tests to run (comma-separated)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the tests' drawn routing")
    ap.add_argument("--normal-draws", action="store_true",
                    help="normal kernels EP16-64: rows drawn as DeepEP's internode test draws them (default: expected)")
    args = ap.parse_args()
    args.nvlink_bps = args.nvlink_gbps * 8e9
    modes = set(args.modes.split(","))
    if "normal" in modes:
        print(f"DeepEP normal kernels as moesim models them (backend {args.backend}, network {args.network}, NVLink "
              f"{args.nvlink_gbps:g} GB/s, chunks {args.dataset_splits}, {args.active_chunks} in flight)")
        print(f"{'case':>10} {'dispatch ms':>12} {'GB/s':>7} {'DeepEP':>7} {'off':>5} {'combine ms':>11} {'GB/s':>7} "
              f"{'DeepEP':>7} {'off':>5}")
        for ep in (8, 16, 32, 64):
            if ep == 8:
                (td, bd), (tc, bc), kind = intranode(FP8_TOKEN_BYTES, args), intranode(BF16_TOKEN_BYTES, args), "NVLink"
            else:
                rows = normal_drawn_rows(ep, args.seed) if args.normal_draws else ()
                (td, bd), (tc, bc), kind = (internode(ep, FP8_TOKEN_BYTES, args, rows),
                                            internode(ep, BF16_TOKEN_BYTES, args, transposed(rows, ep)), "RDMA")
            pd, pc = PUBLISHED[ep]
            print(f"{f'EP{ep} {kind}':>10} {td * 1e3:12.3f} {bd:7.1f} {pd:7d} {_off(bd, pd):>5} {tc * 1e3:11.3f} "
                  f"{bc:7.1f} {pc:7d} {_off(bc, pc):>5}")
    if "low-latency" in modes:
        print(f"DeepEP low-latency kernels (pure RDMA) as moesim models them (backend {args.backend}, network "
              f"{args.network}, one chunk)")
        print(f"rows drawn as DeepEP's test draws them (seed {args.seed}); 'uniform': the expected rows")
        print(f"{'case':>6} {'dispatch µs':>12} {'uniform':>8} {'DeepEP':>7} {'off':>5} {'combine µs':>11} "
              f"{'uniform':>8} {'DeepEP':>7} {'off':>5} {'max/mean rows':>14}")
        for ep, (pd, pc) in LL_PUBLISHED.items():
            rows = drawn_rows(ep, args.seed)
            received = np.asarray(rows).reshape(ep, ep).sum(axis=0)
            td, tc = (low_latency(ep, LL_FP8_ROW_BYTES, args, rows) * 1e6,
                      low_latency(ep, BF16_TOKEN_BYTES, args, transposed(rows, ep)) * 1e6)
            ud, uc = low_latency(ep, LL_FP8_ROW_BYTES, args) * 1e6, low_latency(ep, BF16_TOKEN_BYTES, args) * 1e6
            print(f"{f'EP{ep}':>6} {td:12.1f} {ud:8.1f} {pd:7d} {_off(td, pd):>5} {tc:11.1f} {uc:8.1f} {pc:7d} "
                  f"{_off(tc, pc):>5} {received.max() / received.mean():14.3f}")


if __name__ == "__main__":
    main()
