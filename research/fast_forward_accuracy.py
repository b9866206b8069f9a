"""Error of approximate layer fast-forward: rerun a sweep's approximately fast-forwarded runs in full.

    python research/fast_forward_accuracy.py RESULTS_DIR [--workers 2] [--limit N] [--cheapest]

Reads RESULTS_DIR/results.duckdb (written by `moesim sweep`), re-simulates every run whose
fast_forward_mode is "approximate" with fast_forward=False, and prints the median and worst relative
difference of wall and comm time. Writes nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import duckdb

from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec


def full(spec: RunSpec) -> tuple[float, float]:
    r = simulate_run(RunSpec(spec.model, spec.topology, spec.strategy, spec.algorithm, spec.network, spec.backend,
                             tuple(sorted({**dict(spec.overrides), "fast_forward": False}.items()))))
    return r.wall_s, r.comm_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="check only the first N approximate runs")
    ap.add_argument("--cheapest", action="store_true",
                    help="order by the runs' own wall-clock time (with --limit: the quickest to re-simulate)")
    args = ap.parse_args()
    con = duckdb.connect(str(args.results / "results.duckdb"), read_only=True)
    rows = con.execute(
        "select model, topology, strategy, algorithm, network, backend, overrides_json, wall_s, comm_s from runs "
        "where status = 'ok' and json_extract_string(params_json, '$.fast_forward_mode') = 'approximate' "
        + ("order by sim_wallclock_s" if args.cheapest else "order by model, topology, strategy, algorithm, network")
    ).fetchall()
    total = con.execute("select count(*) from runs where status = 'ok'").fetchone()[0]
    approximate = len(rows)
    if args.limit:
        rows = rows[: args.limit]
    specs = [RunSpec(*r[:6], tuple(sorted(json.loads(r[6] or "{}").items()))) for r in rows]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        exact = list(pool.map(full, specs, chunksize=1))
    wall_err = [abs(r[7] - e[0]) / e[0] for r, e in zip(rows, exact, strict=True)]
    comm_err = [abs(r[8] - e[1]) / e[1] for r, e in zip(rows, exact, strict=True)]
    worst = max(range(len(rows)), key=wall_err.__getitem__)
    print(f"{approximate} of {total} runs were fast-forwarded approximately; {len(rows)} re-simulated in full in "
          f"{time.perf_counter() - t0:.0f} s")
    print(f"wall: median error {100 * statistics.median(wall_err):.2g} %, worst {100 * wall_err[worst]:.2g} % "
          f"({' '.join(rows[worst][:5])}); comm: median {100 * statistics.median(comm_err):.2g} %, "
          f"worst {100 * max(comm_err):.2g} %")
    large = [(e, r[:5]) for e, r in zip(wall_err, rows, strict=True) if e > 0.01]
    print(f"runs with wall error > 1 %: {len(large)}")
    for e, spec in sorted(large, reverse=True):
        print(f"  {100 * e:.2f} %  {' '.join(spec)}")


if __name__ == "__main__":
    main()
