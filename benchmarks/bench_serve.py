"""Speed of the serving simulator: filling one deployment's step-cost cache, and replaying requests on warm costs.

    python benchmarks/bench_serve.py [--requests 10000] [--rate 20] [--repeat 3] [--backend fluid] [--workers 1]

DeepSeek V4 Flash, TP4EP8, with the default scheduler (token budget 8192, 256 sequences) and the default
request lengths (lognormal prompts around 1024 tokens, outputs around 256). It prints:

1. the fill: every grid step of the replica on ``--backend`` (default fluid, the default backend), simulated
   into an empty cache (``--workers`` processes; 1 = this process), steps and seconds;
2. the replay of ``--requests`` Poisson requests at ``--rate`` requests/s on the warm costs, colocated on
   ``hgx-h100:4`` and disaggregated (4 prefill : 4 decode servers) on ``hgx-h100:8`` with KV transfers on the
   flow backend: the median wall time of ``--repeat`` replays, and the steps replayed.

On a shared machine compare medians.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from moesim.serving import Deployment, SchedulerConfig, Slo, StepCache, make_requests
from moesim.serving.simulate import Executor, evaluate, grids, step_costs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backend", default="fluid")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    config, slo = SchedulerConfig(), Slo(1.0, 0.05)
    requests = make_requests(rate_rps=args.rate, count=args.requests, seed=1)
    colocated = Deployment("deepseek-v4-flash", "hgx-h100:4", "TP4EP8", backend=args.backend)
    disaggregated = Deployment("deepseek-v4-flash", "hgx-h100:8", "TP4EP8", backend=args.backend, disaggregate=(4, 4))

    with tempfile.TemporaryDirectory() as folder:
        cache = StepCache(folder)
        t0 = time.perf_counter()
        costs, report = step_costs(grids(colocated, [requests], config), cache, Executor(workers=args.workers))
        fill_s = time.perf_counter() - t0
        print(f"fill: {report.simulated} steps of TP4EP8 on hgx-h100:4 simulated on {args.backend} in {fill_s:.1f} s "
              f"({fill_s / max(report.simulated, 1):.2f} s per step, {args.workers} worker(s))")
        for label, deployment in (("colocated, hgx-h100:4", colocated), ("disaggregated 4:4, hgx-h100:8", disaggregated)):
            costs, _ = step_costs(grids(deployment, [requests], config), cache)  # the same replica kind: all cached
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                _, summary = evaluate(deployment, requests, config, slo, costs)
                times.append(time.perf_counter() - t0)
            print(f"replay of {len(requests)} requests at {args.rate:g}/s, {label}: median {statistics.median(times):.2f} s "
                  f"of {args.repeat} ({summary['steps']} steps; all runs: {', '.join(f'{t:.2f}' for t in times)} s)")


if __name__ == "__main__":
    main()
