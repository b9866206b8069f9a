"""Benchmark single study runs: median wall-clock per run, and peak memory, on a chosen backend.

    python benchmarks/bench_run.py [--backend flow] [--model deepseek-v4-flash] [--repeat 3]

Prints one line per configuration (median of --repeat runs) and the slowest configuration.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec

CONFIGS = [
    (topology, strategy, algorithm)
    for topology in ("1", "3", "6")
    for strategy in ("TP2EP16", "TP16EP2")
    for algorithm in ("ring_direct", "dbt_direct")
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="flow")
    ap.add_argument("--model", default="deepseek-v4-flash")
    ap.add_argument("--network", default="ib_cc0")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    worst = (0.0, None)
    medians = []
    for topo, strat, algo in CONFIGS:
        spec = RunSpec(args.model, topo, strat, algo, args.network, args.backend)
        samples = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            result = simulate_run(spec)
            samples.append(time.perf_counter() - t0)
        med = statistics.median(samples)
        medians.append(med)
        worst = max(worst, (med, spec), key=lambda x: x[0])
        print(f"topology {topo} {strat:8s} {algo:11s} {args.network:10s} wall {result.wall_s:.6f} s  "
              f"median {med:.3f} s over {args.repeat}")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"median of medians {statistics.median(medians):.3f} s; slowest {worst[0]:.3f} s "
          f"({worst[1].topology} {worst[1].strategy} {worst[1].algorithm}); peak RSS {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
