"""How far do strided fluid drains (``fluid_drain_step_s``) move a drawn all-to-all, and what do they save?

Drawn rows as DeepEP's low-latency test draws them (``bench_deepep.drawn_rows``: 128 tokens per GPU, top-8 of
256 experts), each row an FP8 write of 7,408 bytes, on H800 servers over RDMA only (``rdma_only_server``, as
DeepEP's table) or on H100 servers with NVLink (``--nvlink``), in ``--chunks`` chunks. Prints, per stride, the
all-to-all's simulated time, its error against exact drains and the CPU time it took (docs/network-fluid.md,
"Strided drains"). Exact drains at EP128 take minutes.

    python research/drain_stride.py --ep 64 [--nvlink] [--chunks 4] [--strides 0,2.5e-7,1e-6]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from bench_deepep import LL_FP8_ROW_BYTES, drawn_rows, pair_all_to_all  # noqa: E402

from moesim.network.fluid import FluidBackend  # noqa: E402
from moesim.network.params import network_mode  # noqa: E402
from moesim.system.collectives.low_latency import rdma_only_server  # noqa: E402
from moesim.system.engine import Simulation, SystemSettings  # noqa: E402
from moesim.topology.builder import build_topology  # noqa: E402
from moesim.topology.templates import template_spec  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ep", type=int, default=64, help="GPUs (a multiple of 8)")
    ap.add_argument("--nvlink", action="store_true", help="hgx-h100 servers with NVLink instead of RDMA-only H800s")
    ap.add_argument("--chunks", type=int, default=1, help="dataset splits of the all-to-all")
    ap.add_argument("--strides", default="0,2.5e-7,1e-6", help="fluid_drain_step_s values, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    spec = template_spec(f"{'hgx-h100' if args.nvlink else 'hgx-h800'}:{args.ep // 8}")
    assert spec is not None
    if not args.nvlink:
        spec = dataclasses.replace(spec, server=rdma_only_server(spec.server))
    workload = pair_all_to_all(args.ep, tuple(r * LL_FP8_ROW_BYTES for r in drawn_rows(args.ep, args.seed)))
    settings = SystemSettings(all_to_all=("low_latency",), dataset_splits=args.chunks, fast_forward=False)
    exact = None
    for stride in (float(s) for s in args.strides.split(",")):
        params = network_mode("ib_cc0").with_overrides({"fluid_drain_step_s": stride})
        topology = build_topology(spec, params.transport.nic_switch_delay_s)
        t0 = time.process_time()
        wall = max(t.wall_s for t in Simulation(workload, topology, FluidBackend(topology, params), settings).run())
        cpu = time.process_time() - t0
        exact = wall if stride == 0 else exact
        error = f"{(wall / exact - 1) * 100:+.2f} %" if exact else "–"
        print(f"stride {stride:g} s: {wall * 1e6:.2f} µs ({error} on exact), {cpu:.1f} CPU-s", flush=True)


if __name__ == "__main__":
    main()
