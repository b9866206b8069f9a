"""Time the study matrix on one backend (default flow) with a local process pool (no store: pure simulation).

    python benchmarks/bench_study.py [--models deepseek-v4-flash,...] [--workers 2] [--backend flow]

Prints total wall-clock, the CPU of all runs, the median and slowest run, a worker's peak memory, and writes
nothing.
"""

from __future__ import annotations

import argparse
import itertools
import resource
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

from moesim.models.catalog import STUDY_MODELS
from moesim.network.params import NETWORK_MODES
from moesim.system.run import simulate_run
from moesim.system.spec import ALGORITHMS, RunSpec

STRATEGIES = ("TP2EP16", "TP4EP8", "TP8EP4", "TP16EP2")


def one(spec: RunSpec) -> tuple[RunSpec, float, float, str, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    r = simulate_run(spec)
    cpu_s = time.process_time() - c0
    return spec, time.perf_counter() - t0, r.wall_s, r.parameters["fast_forward_mode"], cpu_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(STUDY_MODELS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--backend", default="flow")
    args = ap.parse_args()
    specs = [RunSpec(m, t, s, a, n, args.backend) for m, t, s, a, n in itertools.product(
        args.models.split(","), "123456", STRATEGIES, ALGORITHMS, NETWORK_MODES)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(one, specs, chunksize=1))
    total = time.perf_counter() - t0
    times = sorted(r[1] for r in results)
    slow = max(results, key=lambda r: r[1])
    modes = {m: sum(1 for r in results if r[3] == m) for m in ("exact", "approximate", "none")}
    cpu = sum(r[4] for r in results)
    print(f"{len(specs)} runs on {args.workers} workers: {total:.1f} s total, {cpu:.0f} CPU s; "
          f"per run median {statistics.median(times):.2f} s, p90 {times[int(0.9 * len(times))]:.2f} s, "
          f"max {slow[1]:.1f} s ({slow[0].model} T{slow[0].topology} {slow[0].strategy} {slow[0].algorithm} "
          f"{slow[0].network}); fast-forward {modes}")
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS of a worker process {peak_mib:.0f} MiB")


if __name__ == "__main__":
    main()
