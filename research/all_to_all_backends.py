"""All-to-alls on a study topology, packet against fluid: completions and where the backlog sits (the
figures of research/fluid-accuracy.md on shared-NIC servers).

    python research/all_to_all_backends.py 2 --groups 2 --size-bytes 1048576 --modes ib_cc0,roce_dcqcn
    python research/all_to_all_backends.py 4 --ranks 16 --size-bytes 786432 --modes ib_cc0,roce_hpcc
    python research/all_to_all_backends.py 2 --groups 8 --size-bytes 12582912 --set fluid_marks=random
    python research/all_to_all_backends.py 6 --pairs 3-4,7-0 --size-bytes 4194304 --modes ib_cc0

The first ``--ranks`` GPUs (default: all) form ``--groups`` interleaved all-to-all groups (GPU i is in
group i mod groups), or ``--pairs`` lists the messages (source-destination GPUs); every message is sent
at t = 0, with congestion control on inter-server flows only. Prints per backend and mode the first /
median / last completion, and the three largest egress backlogs at a few instants (packet: sampled
queue lengths; fluid: its port backlogs). Writes nothing.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import numpy as np

from moesim.commands.run import parse_set
from moesim.network.base import BACKENDS, Flow
from moesim.network.diagnostics import DiagnosticsSpec
from moesim.network.params import network_mode
from moesim.topology.catalog import get_topology

SAMPLES_US = (25, 50, 100, 150, 200, 300)


def run(topology: str, pairs: list[tuple[int, int]], size_bytes: int, mode: str, backend_name: str,
        overrides: dict[str, Any]) -> None:
    params = network_mode(mode).with_overrides(overrides or None, "--set")
    topo = get_topology(topology, nic_switch_delay_s=params.transport.nic_switch_delay_s)
    names = [f"{link.src}->{link.dst}" for link in topo.links]
    extra = {"diagnostics": DiagnosticsSpec(qlen=True, qlen_interval_s=25e-6, qlen_min_bytes=0,
                                            qlen_window_s=(0.0, 1e-3))} if backend_name == "packet" else {}
    backend = BACKENDS.get(backend_name)(topo, params, **extra)
    for i, (s, d) in enumerate(pairs):
        backend.start_flow(Flow(i, s, d, size_bytes, cc=not topo.same_server(s, d)), 0.0)
    done: list[float] = []
    fluid_q: dict[int, np.ndarray] = {}
    t_us = 0
    while len(done) < len(pairs):
        t = backend.next_completion_s(None)
        if backend_name == "fluid":  # sample the backlogs on the way
            for s_us in SAMPLES_US:
                if t_us < s_us <= t * 1e6:
                    backend.advance_to(s_us * 1e-6)
                    fluid_q[s_us] = backend.diagnostics()["queue_bytes"]
            t_us = t * 1e6
        done += [t * 1e6] * len(backend.advance_to(t))
    print(f"T{topology} {mode:10s} {backend_name:6s}: completions first {min(done):7.1f} median "
          f"{statistics.median(done):7.1f} last {max(done):7.1f} us")
    if backend_name == "packet":
        q = backend.tables()["qlen"].to_pydict()
        fluid_q = {}
        for t_ns, link, size in zip(q["time_ns"], q["link"], q["bytes"], strict=True):
            fluid_q.setdefault(int(round(t_ns / 1e3)), np.zeros(len(names)))[link] = size
    for s_us in SAMPLES_US:
        if s_us in fluid_q:
            top = np.argsort(-fluid_q[s_us])[:3]
            print(f"    {s_us:4d} us: " + ", ".join(f"{names[k]} {fluid_q[s_us][k] / 1e3:.0f} kB" for k in top
                                               if fluid_q[s_us][k] > 0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology")
    ap.add_argument("--ranks", type=int, default=0)
    ap.add_argument("--groups", type=int, default=1)
    ap.add_argument("--pairs", default="", help="explicit messages instead of all-to-alls, e.g. 3-4,7-0")
    ap.add_argument("--size-bytes", type=int, default=1 << 20)
    ap.add_argument("--modes", default="ib_cc0,roce_dcqcn")
    ap.add_argument("--backends", default="packet,fluid")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="network parameter override, e.g. fluid_marks=random (repeatable)")
    args = ap.parse_args()
    overrides = dict(parse_set(args.set))
    ranks = args.ranks or len(get_topology(args.topology).gpus)
    members = [[r for r in range(ranks) if r % args.groups == g] for g in range(args.groups)]
    pairs = [(s, d) for g in members for s in g for d in g if s != d]
    if args.pairs:
        try:
            pairs = [(int(s), int(d)) for s, d in (p.split("-") for p in args.pairs.split(","))]
        except ValueError:
            ap.error(f"--pairs {args.pairs!r}: expected source-destination GPU pairs, e.g. 3-4,7-0")
    for mode in args.modes.split(","):
        for backend_name in args.backends.split(","):
            run(args.topology, pairs, args.size_bytes, mode, backend_name, overrides)


if __name__ == "__main__":
    main()
