"""Speed of the placement search on one core: simulations per second on the scoring backend, and balance bounds
(the pruning step) per second.

    python benchmarks/bench_place.py [--topology 4] [--strategy TP16EP2] [--evaluations 12] [--repeat 3]

Runs ``moesim place``'s search in this process (one worker, no re-scoring) on DeepSeek V4 Flash with the flow
backend and prints, per repeat, the simulations, proposals skipped as symmetric, proposals pruned and the
wall time; then the medians of simulations/s and bounds/s. On a busy machine compare medians of several repeats.
"""

from __future__ import annotations

import argparse
import statistics
import time

from moesim.experiments.placement_search import SearchSpec, search_placement
from moesim.system.run import prepare
from moesim.system.spec import RunSpec
from moesim.system.traffic import TrafficModel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default="4")
    ap.add_argument("--strategy", default="TP16EP2")
    ap.add_argument("--evaluations", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    spec = RunSpec("deepseek-v4-flash", args.topology, args.strategy, "ring_direct", "roce_dcqcn", "flow")

    prepared = prepare(spec)
    model = TrafficModel(prepared.workload(), prepared.topology)
    mapping = prepared.placement.rank_to_gpu
    model.traffic(mapping)  # fill the route cache, as a search does after its first candidates
    t0 = time.perf_counter()
    bounds = 0
    while time.perf_counter() - t0 < 2.0:
        model.traffic(mapping).bound_s()
        bounds += 1
    bounds_per_s = bounds / (time.perf_counter() - t0)

    rates = []
    for seed in range(args.repeat):
        t0 = time.perf_counter()
        r = search_placement(SearchSpec(spec, evaluations=args.evaluations, seed=seed, rescore_backend=None),
                             workers=1)
        wall = time.perf_counter() - t0
        rates.append(r.evaluated / wall)
        print(f"seed {seed}: {r.evaluated} simulated, {r.skipped_symmetric} skipped as symmetric, {r.pruned} pruned, "
              f"{wall:.1f} s, best {r.best.origin} {100 * r.gain:.1f} % faster than contiguous")
    print(f"topology {args.topology} {args.strategy}: median {statistics.median(rates):.2f} simulations/s (flow, one "
          f"core, including proposals); {bounds_per_s:.0f} balance bounds/s")


if __name__ == "__main__":
    main()
