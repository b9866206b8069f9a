"""Time the README's study command (`moesim sweep study`, default backend) from a cold process into a
fresh store: wall time, CPU time of the process and its workers, peak memory of the largest process, and from
the store the simulation time per run (total, median, 90th percentile) and the slowest runs.

    python benchmarks/bench_study.py [--repeat 1] [--workers 2] [--backend fluid] [--models a,b] [--study modern]

``--study modern`` times `moesim sweep modern` (docs/modern-study.md) instead. Extra arguments after ``--``
go to the sweep command unchanged. Prints one line per repetition
and the medians; writes nothing outside a temporary folder.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SLOWEST = 15


def simulation_lines(store: Path) -> list[str]:
    """Simulation time per run as stored (``sim_wallclock_s``: total, median, 90th percentile), the total over
    distinct simulations (runs with equal inputs share one) and the slowest runs."""
    import duckdb

    con = duckdb.connect(str(store / "results.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT model, topology, strategy, algorithm, network, sim_wallclock_s, input_hash FROM runs "
                           "WHERE status = 'ok' ORDER BY sim_wallclock_s DESC, run_id").fetchall()
    finally:
        con.close()
    per_run = np.array([r[5] for r in rows])
    distinct = sum({r[6]: r[5] for r in rows}.values())
    out = [f"  simulation: {per_run.sum():.0f} s over {len(rows)} runs ({distinct:.0f} s in distinct simulations); "
           f"per run median {np.median(per_run):.2f} s, 90th percentile {np.percentile(per_run, 90):.2f} s; "
           f"the {SLOWEST} slowest runs:"]
    out += [f"    {r[5]:7.2f} s  {' / '.join(str(x) for x in r[:5])}" for r in rows[:SLOWEST]]
    return out


def one(args: argparse.Namespace, extra: list[str]) -> tuple[float, float, float, str, list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "moesim", "sweep", args.study, "--out", tmp, "--workers", str(args.workers),
               "--progress", "none"]
        if args.backend:
            cmd += ["--backend", args.backend]
        if args.models:
            cmd += ["--models", args.models]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        done = subprocess.run(cmd + extra, capture_output=True, text=True)
        wall_s = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr}")
        cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        summary = next((ln for ln in done.stdout.splitlines() if " runs:" in ln), "")
        return wall_s, cpu_s, after.ru_maxrss / 1024, summary, simulation_lines(Path(tmp))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--backend", default="", help="default: the study's default backend")
    ap.add_argument("--models", default="", help="comma-separated model keys (default: the four study models)")
    ap.add_argument("--study", default="study", choices=("study", "modern"), help="which built-in sweep to time")
    args, extra = ap.parse_known_args()
    extra = [a for a in extra if a != "--"]
    walls, cpus = [], []
    for i in range(args.repeat):
        wall_s, cpu_s, rss_mib, summary, sim = one(args, extra)
        walls.append(wall_s)
        cpus.append(cpu_s)
        print(f"[{i + 1}/{args.repeat}] wall {wall_s:.1f} s, CPU {cpu_s:.0f} s, peak RSS {rss_mib:.0f} MiB; {summary}")
        print("\n".join(sim))
    print(f"median of {args.repeat}: wall {statistics.median(walls):.1f} s ({statistics.median(walls) / 60:.2f} min), "
          f"CPU {statistics.median(cpus):.0f} s on {args.workers} workers")


if __name__ == "__main__":
    main()
