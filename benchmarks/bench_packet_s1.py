"""Benchmark the packet backend on docs/reference-runs.md scenario S1 (32 hosts, one 400 Gb/s switch).

    python benchmarks/bench_packet_s1.py [--rows ring-none,a2a-hpcc,...] [--repeat 3]

Runs each row through the system layer and prints the completion time against the reference, the
FCT range of the 524 288 B messages, the wall-clock (median of --repeat; the kernel's share in
brackets), data packets and events per second, and the peak RSS. The first, untimed run loads (or
compiles, ~20 s once per source change) the kernel.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

from moesim.network.diagnostics import DiagnosticsSpec
from moesim.network.packet import PacketBackend
from moesim.network.params import REFERENCE_PRESETS
from moesim.system.engine import SystemSettings
from moesim.system.run import simulate
from moesim.topology.model import GpuInfo, Link, NodeKind, Topology, TopoNode
from moesim.workload.graph import CollectiveType, Node, RankGraph, Workload
from moesim.workload.graph import NodeKind as WorkNodeKind

REFERENCE = {  # completion ns, FCT ns, reference wall-clock s (docs/reference-runs.md)
    "ring-none": (3_474_644, 13_510, 386), "ring-dcqcn": (3_474_644, 13_510, 398),
    "ring-hpcc": (3_725_868, 14_523, 406), "a2a-none": (1_438_236, 359_350, 208),
    "a2a-dcqcn": (1_438_236, 359_350, 183), "a2a-hpcc": (1_568_212, 391_803, 225),
}


def s1_topology(n: int = 32) -> Topology:
    nodes = [TopoNode(f"h{i}", NodeKind.GPU, i) for i in range(n)] + [TopoNode("sw", NodeKind.SWITCH)]
    links: list[Link] = []
    for i in range(n):
        links.append(Link(len(links), f"h{i}", "sw", 400e9, 500e-9))
        links.append(Link(len(links), "sw", f"h{i}", 400e9, 500e-9))
    gpus = [GpuInfo(f"h{i}", i, None, None, None) for i in range(n)]
    return Topology("s1", tuple(nodes), tuple(links), tuple(gpus))


def s1_workload(ctype: CollectiveType, n: int = 32) -> Workload:
    graphs = tuple(RankGraph(r, (Node(0, "coll", WorkNodeKind.COLLECTIVE, collective=ctype, size_bytes=64 << 20),))
                   for r in range(n))
    return Workload(f"s1_{ctype.name.lower()}", graphs, (n,))


def run_row(row: str) -> tuple[float, PacketBackend, float]:
    kind, mode = row.split("-")
    ctype = CollectiveType.ALL_REDUCE if kind == "ring" else CollectiveType.ALL_TO_ALL
    topo = s1_topology()
    backend = PacketBackend(topo, REFERENCE_PRESETS[mode], diagnostics=DiagnosticsSpec(fct=True))
    t0 = time.perf_counter()
    times = simulate(s1_workload(ctype), topo, backend, SystemSettings(roofline=False))
    return time.perf_counter() - t0, backend, max(t.wall_s for t in times) * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=",".join(REFERENCE))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    t0 = time.perf_counter()
    warm = PacketBackend(s1_topology(2), REFERENCE_PRESETS["none"])
    from moesim.network.base import Flow

    warm.start_flow(Flow(0, 0, 1, 1000), 0.0)
    warm.advance_to(1.0)
    print(f"kernel load/compile: {time.perf_counter() - t0:.1f} s")
    for row in args.rows.split(","):
        ref_done, ref_fct, ref_wall = REFERENCE[row]
        samples = [run_row(row) for _ in range(args.repeat)]
        wall = statistics.median(s[0] for s in samples)
        _, backend, done_ns = samples[-1]
        st = backend.stats()
        fct = backend.tables()["fct"].column("fct_ns").to_pylist()
        print(f"S1 {row:10s} completion {done_ns:12,.0f} ns ({(done_ns / ref_done - 1) * 100:+.3f} %)  "
              f"FCT {min(fct):,}–{max(fct):,} ns (ref {ref_fct:,})  wall {wall:5.2f} s "
              f"[kernel {st['wallclock_s']:.2f} s; reference {ref_wall} s]  "
              f"{st['data_packets'] / st['wallclock_s'] / 1e6:5.2f} M data pkts/s  "
              f"{st['events'] / st['wallclock_s'] / 1e6:5.1f} M events/s")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
