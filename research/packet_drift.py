"""How packet-level asymmetries between ranks grow (the figures of docs/calibration.md, packet section).

    python research/packet_drift.py pair
    python research/packet_drift.py layers deepseek-v4-flash 6 TP2EP16 ring_direct ib_cc0 [--tokens 256]
        [--backend fluid] [--set key=value ...] [--seed N] [--offsets]

``pair``: two GPUs behind one PCIe switch (512 Gb/s, 0.2 µs links), ib_cc0. Two opposite 256 KiB
messages started δ apart, then a 2 MiB two-rank ring all-reduce with one rank starting δ late; prints
how far apart they end; then, for longer and shorter links, what the late message loses. ``layers``:
one study run simulated in full (no fast-forward) with its timeline; prints per layer rank 0's period
(with their mean, standard deviation and the means of the run's two halves, and the wall error of
extrapolating later layers with the mean of the periods before them) and, for the first nodes, how long
rank 0 takes, how far apart the ranks finish them (``--offsets``: when each of ranks 0-7 ends them) and
how many CNPs have reached senders when rank 0 ends them. ``--backend`` runs it on another backend,
``--seed`` seeds the packet backend's ECN marks.
Writes nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics

from moesim.commands.run import parse_set
from moesim.network.base import Flow, NetworkBackend
from moesim.network.packet import PacketBackend
from moesim.network.params import network_mode
from moesim.system.engine import Simulation, SystemSettings
from moesim.system.run import prepare, simulate
from moesim.system.spec import RunSpec
from moesim.topology.model import GpuInfo, Link, NodeKind, Topology, TopoNode
from moesim.workload.graph import CollectiveType, Node, RankGraph, Workload
from moesim.workload.graph import NodeKind as WorkNodeKind

DELTAS_NS = (0, 10, 30, 100)
LATE_NS = 3000


def two_gpus(bandwidth_bps: float = 512e9, delay_s: float = 200e-9) -> Topology:
    nodes = (TopoNode("g0", NodeKind.GPU, 0), TopoNode("g1", NodeKind.GPU, 1), TopoNode("sw", NodeKind.PCIE_SWITCH))
    links = tuple(Link(i, a, b, bandwidth_bps, delay_s)
                  for i, (a, b) in enumerate((("g0", "sw"), ("sw", "g0"), ("g1", "sw"), ("sw", "g1"))))
    return Topology("two_gpus", nodes, links, (GpuInfo("g0", 0, None, None, None), GpuInfo("g1", 1, None, None, None)))


def opposite_messages(delta_ns: int, size_bytes: int = 256 << 10, delay_s: float = 200e-9) -> tuple[float, float]:
    topo = two_gpus(delay_s=delay_s)
    b = PacketBackend(topo, network_mode("ib_cc0"))
    b.start_flow(Flow(0, 0, 1, size_bytes), 0.0)
    b.advance_to(delta_ns * 1e-9)
    b.start_flow(Flow(1, 1, 0, size_bytes), delta_ns * 1e-9)
    ends = {}
    while (t := b.next_completion_s()) < math.inf:
        ends.update({f: t * 1e9 for f in b.advance_to(t)})
    return ends[0], ends[1]


def late_all_reduce(delta_ns: int, size_bytes: int = 2 << 20) -> tuple[float, float]:
    graphs = tuple(RankGraph(r, (
        Node(0, "wait", WorkNodeKind.COMPUTE, duration_ns=delta_ns if r == 1 else 0),
        Node(1, "all_reduce", WorkNodeKind.COLLECTIVE, deps=(0,), collective=CollectiveType.ALL_REDUCE,
             size_bytes=size_bytes),
    )) for r in range(2))
    topo = two_gpus()
    times = simulate(Workload("late_all_reduce", graphs, (2,)), topo, PacketBackend(topo, network_mode("ib_cc0")),
                     SystemSettings(roofline=False))
    return times[0].wall_s * 1e9, times[1].wall_s * 1e9


def pair() -> None:
    for delta in DELTAS_NS:
        a, b = opposite_messages(delta)
        r0, r1 = late_all_reduce(delta)
        print(f"δ {delta:4d} ns: opposite 256 KiB messages end {b - a:+5.0f} ns apart (A {a:.0f}, B {b:.0f}); "
              f"2-rank ring all-reduce: ranks end {r1 - r0:+5.0f} ns apart")
    # what the late message loses grows with the latency by which each message's ACK stream lags its data
    for delay_ns in (100, 200, 400, 800):
        a, b = opposite_messages(LATE_NS, delay_s=delay_ns * 1e-9)
        one_way_ns = 2 * delay_ns + 32  # two links plus two 16 ns store-and-forward hops of a data packet
        print(f"links {delay_ns} ns (one-way {one_way_ns} ns): with δ {LATE_NS} ns the late message "
              f"ends {b - a - LATE_NS:+4.0f} ns later than δ")


def cnps(backend: NetworkBackend) -> int:
    """CNPs that reached a sender so far (packet: CNP-flagged ACKs; fluid: CNPs delivered; else 0)."""
    if isinstance(backend, PacketBackend):
        return int(backend.stats()["cnps"])
    return int(backend.diagnostics().get("cnps", 0))


def layers(spec: RunSpec, show_nodes: int, seed: int | None, offsets: bool) -> None:
    prepared = prepare(spec)
    params = prepared.params
    topology = prepared.topology
    workload = prepared.workload()
    settings = prepared.settings
    backend_cls = prepared.backend_cls
    backend = backend_cls(topology, params) if seed is None else backend_cls(topology, params, seed=seed)
    sim = Simulation(workload, topology, backend, dataclasses.replace(settings, fast_forward=False))
    cnps_at: dict[int, int] = {}  # rank 0's nodes: CNPs so far when each ends
    started: dict[tuple[int, int], float] = {}
    timeline: list[tuple[int, int, float, float]] = []  # (rank, node id, start s, end s) per node

    def start(r: int, i: int) -> None:
        started[(r, i)] = sim.now

    def finish(r: int, i: int) -> None:
        node_id = workload.graphs[r].nodes[i].id
        if r == 0:
            cnps_at[node_id] = cnps(backend)
        timeline.append((r, node_id, started.pop((r, i)), sim.now))

    sim.hooks.node_started.append(start)
    sim.hooks.node_finished.append(finish)
    sim.run()
    layer_of = {n.id: n.layer for n in workload.graphs[0].nodes}
    ends: dict[int, dict[int, float]] = {}
    rank0: dict[int, tuple[float, float]] = {}
    layer_start: dict[int, float] = {}
    for rank, node_id, start, end in timeline:
        ends.setdefault(node_id, {})[rank] = end
        if rank == 0:
            rank0[node_id] = (start, end)
            layer = layer_of[node_id]
            layer_start[layer] = min(start, layer_start.get(layer, math.inf))
    names = {n.id: n.name for n in workload.graphs[0].nodes}
    for node_id in sorted(ends)[:show_nodes]:
        e = ends[node_id]
        start, end = rank0[node_id]
        first = min(e.values())
        print(f"node {node_id:4d} {names[node_id]:20s} rank 0 takes {(end - start) * 1e6:9.2f} µs, "
              f"ranks end within {(max(e.values()) - first) * 1e9:9.0f} ns, "
              f"CNPs by then {cnps_at[node_id]:6d}"
              + (", ranks 0-7 after the first (ns): " + " ".join(f"{(e[r] - first) * 1e9:.0f}" for r in sorted(e)[:8])
                 if offsets else ""))
    starts = [layer_start[k] for k in sorted(layer_start) if k >= 0]
    periods = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    half = len(periods) // 2
    print(f"wall {sim.now:.6f} s, {cnps(backend)} CNPs; layer periods (rank 0), ms: "
          + " ".join(f"{p * 1e3:.3f}" for p in periods))
    print(f"min {min(periods) * 1e3:.3f} ms, max {max(periods) * 1e3:.3f} ms, mean {statistics.mean(periods) * 1e3:.3f}, "
          f"sd {statistics.pstdev(periods) * 1e3:.3f}; first half {statistics.mean(periods[:half]) * 1e3:.3f}, "
          f"second half {statistics.mean(periods[half:]) * 1e3:.3f}")
    # what a fast-forward would get by extrapolating every later layer with the mean of the last k periods
    for k in (8, 16):
        errors = []
        for j in range(k, len(periods) - 2, 4):
            rest = sum(periods[j:])
            errors.append(f"{j}: {(len(periods) - j) * statistics.mean(periods[j - k:j]) / sim.now - rest / sim.now:+.2%}")
        print(f"wall error if layers from L on were extrapolated with the mean of the {k} periods before L: "
              + ", ".join(errors))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("pair")
    lp = sub.add_parser("layers")
    for name in ("model", "topology", "strategy", "algorithm", "network"):
        lp.add_argument(name)
    lp.add_argument("--tokens", type=int, default=None)
    lp.add_argument("--backend", default="packet")
    lp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a run override, repeatable")
    lp.add_argument("--seed", type=int, default=None, help="the packet backend's RNG seed (default 1)")
    lp.add_argument("--nodes", type=int, default=28, help="how many nodes of the first layers to show")
    lp.add_argument("--offsets", action="store_true", help="also print when ranks 0-7 end each shown node")
    args = ap.parse_args()
    if args.what == "pair":
        pair()
    else:
        over = {**dict(parse_set(args.set)), **({"tokens": args.tokens} if args.tokens else {})}
        layers(RunSpec(args.model, args.topology, args.strategy, args.algorithm, args.network, args.backend,
                       tuple(sorted(over.items()))), args.nodes, args.seed, args.offsets)


if __name__ == "__main__":
    main()
