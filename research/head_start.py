"""How a head start grows when four GPUs share one NIC (research/fluid-accuracy.md, "Where the errors come from").

    python research/head_start.py [--lead-us 2] [--size-bytes 786432] [--set fluid_marks=random] [--trace]
        [--mode roce_hpcc]
    python research/head_start.py --dispatch [--lead-us 1] [--set fluid_window=bytes]

Topology 4, ib_cc0 (or ``--mode``, which congestion-controls the messages): GPUs 4..7 (one PCIe
switch, one NIC) each send one message to GPU +16 on another server; GPU 7 starts ``lead`` µs before
the other three. Without and then with the reverse messages (GPU +16 back to each GPU, started at the
same times), as in the study's EP all-to-all. Prints each backend's completion times and by how much
GPU 7 finishes ahead of the others; ``--trace`` adds, at packet level, how many bytes of GPU 7's and
GPU 4's messages are acknowledged over time.

``--dispatch``: the first EP dispatch of V4 Flash on topology 4, TP16EP2, 256 tokens (every GPU's 6 MiB
to its EP peer, in back-to-back chunks) alone, the GPUs 8k+7 starting ``lead`` µs before the others;
prints when GPUs 4..7 finish it. Writes nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any

from moesim.commands.run import parse_set
from moesim.network import BACKENDS
from moesim.network.base import Flow
from moesim.network.cc import algorithm_for_mode
from moesim.network.params import network_mode
from moesim.system.engine import Simulation
from moesim.system.run import prepare
from moesim.system.spec import RunSpec
from moesim.topology.catalog import get_topology
from moesim.workload.graph import Node, NodeKind

EARLY, LATE = (7,), (4, 5, 6)
TRACE_US = (6, 10, 15, 20, 25, 30)


def finish_us(backend_name: str, lead_s: float, size_bytes: int, reverse: bool, overrides: dict[str, Any],
              trace_us: tuple[float, ...] = (), mode: str = "ib_cc0",
              ) -> tuple[dict[int, float], list[tuple[float, dict[int, int]]]]:
    """Completion time (µs) of each forward message, by its source GPU; with ``trace_us`` (packet backend)
    also the bytes acknowledged of each forward message at those instants."""
    params = network_mode(mode).with_overrides(overrides or None)
    cc = algorithm_for_mode(params.cc_mode, strict=False).controls_rate
    backend = BACKENDS.get(backend_name)(get_topology("4", nic_switch_delay_s=params.transport.nic_switch_delay_s), params)
    events = sorted([(0.0, g) for g in EARLY] + [(lead_s, g) for g in LATE] + [(t * 1e-6, -1) for t in trace_us])
    done: dict[int, float] = {}
    trace = []
    for t, gpu in events:
        while (nxt := backend.next_completion_s(t)) <= t:
            done.update({f: nxt for f in backend.advance_to(nxt)})
        backend.advance_to(t)
        if gpu < 0:
            progress = backend.flow_progress()
            trace.append((t * 1e6, {g: progress[g][0] if g in progress else size_bytes for g in EARLY + LATE}))
            continue
        backend.start_flow(Flow(gpu, gpu, gpu + 16, size_bytes, cc=cc), t)
        if reverse:
            backend.start_flow(Flow(gpu + 16, gpu + 16, gpu, size_bytes, cc=cc), t)
    while (t := backend.next_completion_s(math.inf)) < math.inf:
        done.update({f: t for f in backend.advance_to(t)})
    return {g: done[g] * 1e6 for g in EARLY + LATE}, trace


def dispatch_end_us(backend_name: str, lead_s: float, overrides: dict[str, Any]) -> list[float]:
    """When GPUs 4..7 finish the first EP dispatch (µs after the early GPUs start)."""
    spec = RunSpec("deepseek-v4-flash", "4", "TP16EP2", "ring_direct", "ib_cc0", backend_name,
                   tuple(sorted({"tokens": 256, **(overrides if backend_name == "fluid" else {})}.items())))
    prepared = prepare(spec)
    params = prepared.params
    topology = prepared.topology
    workload = prepared.workload()
    settings = prepared.settings
    backend_cls = prepared.backend_cls
    graphs = []
    for g in workload.graphs:
        node = next(n for n in g.nodes if n.name.startswith("ep_dispatch"))
        wait = Node(-1, "wait", NodeKind.COMPUTE, duration_ns=0 if g.rank % 8 == 7 else round(lead_s * 1e9))
        graphs.append(dataclasses.replace(g, nodes=(wait, dataclasses.replace(node, deps=(-1,)))))
    sim = Simulation(dataclasses.replace(workload, graphs=tuple(graphs)), topology, backend_cls(topology, params),
                     dataclasses.replace(settings, fast_forward=False, roofline=False))
    return [r.wall_s * 1e6 for r in sim.run()[4:8]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lead-us", type=float, default=2.0)
    ap.add_argument("--size-bytes", type=int, default=786432)
    ap.add_argument("--dispatch", action="store_true", help="the study's EP dispatch instead of single messages")
    ap.add_argument("--trace", action="store_true", help="packet: bytes acknowledged of GPUs 7 and 4 over time")
    ap.add_argument("--mode", default="ib_cc0", help="network mode of the single messages")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="network parameter override, e.g. fluid_window=bytes (with --dispatch: the fluid "
                         "runs only)")
    args = ap.parse_args()
    if args.dispatch:
        print(f"EP dispatch, GPUs 8k+7 start {args.lead_us} µs early: when GPUs 4..7 finish (µs)")
        for name in ("packet", "fluid", "flow"):
            ends = dispatch_end_us(name, args.lead_us * 1e-6, dict(parse_set(args.overrides)))
            print(f"  {name:6s} " + " ".join(f"GPU{4 + i} {t:7.1f}" for i, t in enumerate(ends))
                  + f"   GPU 7 ahead by {min(ends[:3]) - ends[3]:5.1f} µs")
        return
    for reverse in (False, True):
        print(f"GPU 7 starts {args.lead_us} µs early; reverse messages: {'yes' if reverse else 'no'}")
        for name in ("packet", "fluid", "flow"):
            t, trace = finish_us(name, args.lead_us * 1e-6, args.size_bytes, reverse,
                                 dict(parse_set(args.overrides)), TRACE_US if args.trace and name == "packet" else (),
                                 args.mode)
            ahead = min(t[g] for g in LATE) - t[7]
            print(f"  {name:6s} " + " ".join(f"GPU{g} {t[g]:7.2f}" for g in EARLY + LATE)
                  + f"   GPU 7 ahead by {ahead:5.2f} µs")
            for at_us, acked in trace:
                print(f"    {at_us:4.0f} µs: kB acknowledged GPU7 {acked[7] / 1e3:4.0f}, GPU4 {acked[4] / 1e3:4.0f}")


if __name__ == "__main__":
    main()
