"""ECN marks, CNPs and DCQCN stragglers at packet level (the figures of docs/network-packet.md and
research/fluid-accuracy.md on DCQCN).

    python research/packet_marks.py alltoall [--size-bytes 2097152] [--at-us 130]
    python research/packet_marks.py run deepseek-v4-flash 1 TP4EP8 ring_direct roce_dcqcn

``alltoall``: the first 8 GPUs of topology 1 exchange messages, all sent at t = 0, under ib_cc0 and
roce_dcqcn; prints first / median / last completion, the mark and CNP counters, and the sorted sending
rates of the flows still active at ``--at-us``. ``run``: one study run simulated in full (no layer
fast-forward); prints its wall time and the counters. Writes nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

from moesim.network.base import Flow
from moesim.network.packet import PacketBackend
from moesim.network.params import network_mode
from moesim.system.engine import Simulation
from moesim.system.run import prepare
from moesim.system.spec import RunSpec
from moesim.topology.catalog import get_topology

COUNTERS = ("data_packets", "ecn_marks", "cnps", "pauses", "drops")


def _counters(backend: PacketBackend) -> str:
    st = backend.stats()
    return ", ".join(f"{k} {st[k]}" for k in COUNTERS)


def alltoall(size_bytes: int, at_us: float, n: int = 8) -> None:
    for mode in ("ib_cc0", "roce_dcqcn"):
        params = network_mode(mode)
        backend = PacketBackend(get_topology("1", nic_switch_delay_s=params.transport.nic_switch_delay_s), params)
        pairs = [(s, d) for s in range(n) for d in range(n) if s != d]
        for i, (s, d) in enumerate(pairs):
            backend.start_flow(Flow(i, s, d, size_bytes), 0.0)
        backend.advance_to(at_us * 1e-6)
        rates = sorted(rate / 1e9 for _, rate in backend.flow_progress().values())
        done = []
        while len(done) < len(pairs):
            t = backend.next_completion_s(None)
            done += [t * 1e6] * len(backend.advance_to(t))
        print(f"{mode}: completions first {min(done):.1f} µs, median {statistics.median(done):.1f} µs, "
              f"last {max(done):.1f} µs; {_counters(backend)}")
        print(f"  rates at {at_us:g} µs (Gb/s, {len(rates)} flows): {' '.join(f'{r:.0f}' for r in rates)}")


def run(spec: RunSpec) -> None:
    prepared = prepare(spec)
    params = prepared.params
    topology = prepared.topology
    workload = prepared.workload()
    settings = prepared.settings
    backend = PacketBackend(topology, params)
    ranks = Simulation(workload, topology, backend, dataclasses.replace(settings, fast_forward=False)).run()
    label = " ".join((spec.model, spec.topology, spec.strategy, spec.algorithm, spec.network))
    print(f"{label}: wall {max(r.wall_s for r in ranks):.6f} s; {_counters(backend)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("alltoall")
    a.add_argument("--size-bytes", type=int, default=2 << 20)
    a.add_argument("--at-us", type=float, default=130.0)
    r = sub.add_parser("run")
    for name in ("model", "topology", "strategy", "algorithm", "network"):
        r.add_argument(name)
    args = ap.parse_args()
    if args.cmd == "alltoall":
        alltoall(args.size_bytes, args.at_us)
    else:
        run(RunSpec(args.model, args.topology, args.strategy, args.algorithm, args.network, "packet"))


if __name__ == "__main__":
    main()
