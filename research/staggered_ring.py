"""A TP ring all-reduce (or another collective) whose ranks start at different times, on every backend
(research/fluid-accuracy.md).

    python research/staggered_ring.py 4 TP16EP2 roce_hpcc [--offsets-us 87,74,88,89,0,68,84,62]
    python research/staggered_ring.py 2 TP8EP4 ib_cc0 --node ep_dispatch --tokens 4096 --offsets-us 0,4
        --backends packet,fluid --set fluid_window=bytes
    python research/staggered_ring.py 2 TP2EP16 roce_dcqcn --model kimi-k3 --node ep_dispatch --tokens 4096
        --offsets-us 0,350 --backends packet,fluid

In a study run the TP all-reduce after the EP combine starts on each rank when that rank's combine
ends, so its ranks start up to ~100 µs apart. This runs only that collective (V4 Flash unless ``--model``, 256 tokens
unless ``--tokens``, ``tp_allreduce_out`` of the first layer unless ``--node``, chunked as in the
study), rank r starting ``offsets[r mod len(offsets)]`` µs late (the default: the combine ends of
topology 4 TP16EP2 ring at packet level), and prints per backend when the ranks finish, how long after
the last start, and when the last rank of each start offset ends (``--flows-from GPU``: also when each
message that GPU sends starts and ends). ``--set`` applies to the fluid runs.
With every offset 0 all backends agree. Writes nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import math

from moesim.commands.run import parse_set
from moesim.network.base import Flow
from moesim.system.engine import Simulation
from moesim.system.run import prepare
from moesim.system.spec import RunSpec
from moesim.workload.graph import Node, NodeKind


def ends_us(topology: str, strategy: str, mode: str, backend: str, offsets_us: list[float],
            tokens: int = 256, node_name: str = "tp_allreduce_out",
            overrides: tuple[tuple[str, object], ...] = (), flows_from: int | None = None,
            model: str = "deepseek-v4-flash") -> list[float]:
    """When each rank ends the collective (µs); with ``flows_from`` also print what that GPU sends."""
    spec = RunSpec(model, topology, strategy, "ring_direct", mode, backend,
                   tuple(sorted((("tokens", tokens), *overrides))))
    prepared = prepare(spec)
    params = prepared.params
    topo = prepared.topology
    workload = prepared.workload()
    settings = prepared.settings
    backend_cls = prepared.backend_cls
    graphs = []
    for g in workload.graphs:
        node = next(n for n in g.nodes if n.name.startswith(node_name))
        wait = Node(-1, "wait", NodeKind.COMPUTE, duration_ns=round(offsets_us[g.rank % len(offsets_us)] * 1e3))
        graphs.append(dataclasses.replace(g, nodes=(wait, dataclasses.replace(node, deps=(-1,)))))
    sim = Simulation(dataclasses.replace(workload, graphs=tuple(graphs)), topo, backend_cls(topo, params),
                     dataclasses.replace(settings, fast_forward=False, roofline=False))
    sent: dict[int, list[float]] = {}  # flow id → [start, end] of the messages ``flows_from`` sends
    if flows_from is not None:

        def started(flow: Flow, _origin: object) -> None:
            if flow.src_gpu == flows_from:
                sent[flow.flow_id] = [sim.now, math.nan]

        def finished(flow_id: int, _origin: object) -> None:
            if flow_id in sent:
                sent[flow_id][1] = sim.now

        sim.hooks.flow_started.append(started)
        sim.hooks.flow_finished.append(finished)
    ends = [r.wall_s * 1e6 for r in sim.run()]
    if sent:
        print(f"{backend:6s}: GPU {flows_from} sends (start–end, µs): " + ", ".join(
            f"{a * 1e6:.1f}–{b * 1e6:.1f} ({(b - a) * 1e6:.1f})" for a, b in sent.values()))
    return ends


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology")
    ap.add_argument("strategy")
    ap.add_argument("mode")
    ap.add_argument("--offsets-us", default="87,74,88,89,0,68,84,62")
    ap.add_argument("--backends", default="packet,fluid,flow")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--model", default="deepseek-v4-flash", help="a study model, e.g. kimi-k3")
    ap.add_argument("--node", default="tp_allreduce_out", help="the first-layer node to run, e.g. ep_dispatch")
    ap.add_argument("--flows-from", type=int, default=None, metavar="GPU",
                    help="also print when each message this GPU sends starts and ends")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="parameter override for the fluid runs, e.g. fluid_window=bytes")
    args = ap.parse_args()
    offsets = [float(x) for x in args.offsets_us.split(",")]
    for backend in args.backends.split(","):
        extra = tuple(parse_set(args.overrides)) if backend == "fluid" else ()
        ends = ends_us(args.topology, args.strategy, args.mode, backend, offsets, args.tokens, args.node,
                       extra, args.flows_from, args.model)
        last = {o: max(e for r, e in enumerate(ends) if offsets[r % len(offsets)] == o) for o in sorted(set(offsets))}
        print(f"{backend:6s}: ranks end {min(ends):7.1f}–{max(ends):7.1f} µs, "
              f"{max(ends) - max(offsets):6.1f} µs after the last start ({max(offsets):.0f} µs); last end by start "
              "offset: " + ", ".join(f"{o:g} µs late → {t:.1f}" for o, t in last.items()))


if __name__ == "__main__":
    main()
