"""How a head start grows when four GPUs share one NIC (docs/network-fluid.md, "What it approximates").

    python benchmarks/head_start.py [--lead-us 2] [--size-bytes 786432]

Topology 4, ib_cc0: GPUs 4..7 (one PCIe switch, one NIC) each send one message to GPU +16 on another
server; GPU 7 starts ``lead`` µs before the other three. Without and then with the reverse messages
(GPU +16 back to each GPU, started at the same times), as in the study's EP all-to-all. Prints each
backend's completion times and by how much GPU 7 finishes ahead of the others. Writes nothing.
"""

from __future__ import annotations

import argparse
import math

from moesim.network import BACKENDS
from moesim.network.base import Flow
from moesim.network.params import network_mode
from moesim.topology.catalog import get_topology

EARLY, LATE = (7,), (4, 5, 6)


def finish_us(backend_name: str, lead_s: float, size_bytes: int, reverse: bool) -> dict[int, float]:
    """Completion time (µs) of each forward message, by its source GPU."""
    params = network_mode("ib_cc0")
    backend = BACKENDS.get(backend_name)(get_topology("4", nic_switch_delay_s=params.nic_switch_delay_s), params)
    starts = sorted([(0.0, g) for g in EARLY] + [(lead_s, g) for g in LATE])
    done: dict[int, float] = {}
    for t, gpu in starts:
        while (nxt := backend.next_completion_s(t)) <= t:
            done.update({f: nxt for f in backend.advance_to(nxt)})
        backend.advance_to(t)
        backend.start_flow(Flow(gpu, gpu, gpu + 16, size_bytes, cc=False), t)
        if reverse:
            backend.start_flow(Flow(gpu + 16, gpu + 16, gpu, size_bytes, cc=False), t)
    while (t := backend.next_completion_s(math.inf)) < math.inf:
        done.update({f: t for f in backend.advance_to(t)})
    return {g: done[g] * 1e6 for g in EARLY + LATE}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lead-us", type=float, default=2.0)
    ap.add_argument("--size-bytes", type=int, default=786432)
    args = ap.parse_args()
    for reverse in (False, True):
        print(f"GPU 7 starts {args.lead_us} µs early; reverse messages: {'yes' if reverse else 'no'}")
        for name in ("packet", "fluid", "flow"):
            t = finish_us(name, args.lead_us * 1e-6, args.size_bytes, reverse)
            ahead = min(t[g] for g in LATE) - t[7]
            print(f"  {name:6s} " + " ".join(f"GPU{g} {t[g]:7.2f}" for g in EARLY + LATE)
                  + f"   GPU 7 ahead by {ahead:5.2f} µs")


if __name__ == "__main__":
    main()
