"""Time the README's study command (`moesim sweep study`, default backend) and the same study on the flow
backend, each from a cold process into a fresh store: wall and CPU time (the process and its workers), peak
memory of the largest process, the ratio of the two studies, and from the store the simulation time per run
(total, median, 90th percentile, maximum) and the slowest runs with their work (fluid steps, engine events).

    python benchmarks/bench_study.py [--repeat 1] [--workers 2] [--backend fluid] [--models a,b] [--study modern]
                                     [--no-flow] [--store DIR ...] [--keep DIR]

``--no-flow`` skips the flow study; ``--study modern`` times `moesim sweep modern` (docs/modern-study.md)
instead. ``--store DIR`` runs nothing and prints the per-run figures of existing stores (e.g. one made before
a change). ``--keep DIR`` keeps each study's store as DIR/<backend> (e.g. for ``tools/compare_stores.py``;
the last repetition's). Extra arguments after ``--`` go to the sweep command unchanged. Prints one block per study and
repetition and the medians; writes nothing outside a temporary folder.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SLOWEST = 10


def simulation_lines(store: Path) -> list[str]:
    """Simulation time per run as stored (``sim_wallclock_s``: total, median, 90th percentile, maximum), the
    total over distinct simulations (runs with equal inputs share one) and the slowest runs with their fluid
    steps and engine events (``n/a`` in a store written before those columns)."""
    import duckdb

    con = duckdb.connect(str(store / "results.duckdb"), read_only=True)
    try:
        columns = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns "
                                             "WHERE table_name = 'runs'").fetchall()}
        work = [c if c in columns else "NULL" for c in ("fluid_steps", "engine_events")]
        rows = con.execute("SELECT model, topology, strategy, algorithm, network, sim_wallclock_s, input_hash, "
                           f"{', '.join(work)} FROM runs WHERE status = 'ok' "
                           "ORDER BY sim_wallclock_s DESC, run_id").fetchall()
    finally:
        con.close()
    if not rows:
        return ["  simulation: no successful runs in the store"]
    per_run = np.array([r[5] for r in rows])
    distinct = sum({r[6]: r[5] for r in rows}.values())
    out = [f"  simulation: {per_run.sum():.0f} s over {len(rows)} runs ({distinct:.0f} s in distinct simulations); "
           f"per run median {np.median(per_run):.2f} s, 90th percentile {np.percentile(per_run, 90):.2f} s, "
           f"maximum {per_run.max():.2f} s; the {SLOWEST} slowest runs (fluid steps, engine events):"]
    out += [f"    {r[5]:7.2f} s  {' / '.join(str(x) for x in r[:5])}  "
            f"({'n/a' if r[7] is None else r[7]}, {'n/a' if r[8] is None else r[8]})" for r in rows[:SLOWEST]]
    return out


def one(args: argparse.Namespace, backend: str, extra: list[str]) -> tuple[float, float, float, str, list[str]]:
    """Run the study once on ``backend`` ('' = the study's default): wall s, CPU s, peak RSS MiB, the
    command's summary line and the store's per-run lines."""
    with tempfile.TemporaryDirectory() as tmp:
        if args.keep:
            tmp = str(Path(args.keep) / (backend or "default"))
            shutil.rmtree(tmp, ignore_errors=True)
        cmd = [sys.executable, "-m", "moesim", "sweep", args.study, "--out", tmp, "--workers", str(args.workers),
               "--progress", "none"]
        if backend:
            cmd += ["--backend", backend]
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
    ap.add_argument("--no-flow", action="store_true", help="skip the flow-backend study (and the ratio)")
    ap.add_argument("--keep", default="", help="keep each study's store as KEEP/<backend> (the last repetition's)")
    ap.add_argument("--store", nargs="+", default=[], help="print the per-run figures of these stores; run nothing")
    args, extra = ap.parse_known_args()
    extra = [a for a in extra if a != "--"]
    if args.store:
        for store in args.store:
            print(store)
            print("\n".join(simulation_lines(Path(store))))
        return
    studies = [args.backend] + ([] if args.no_flow or args.backend == "flow" else ["flow"])
    walls: dict[str, list[float]] = {b: [] for b in studies}
    cpus: dict[str, list[float]] = {b: [] for b in studies}
    for i in range(args.repeat):
        for backend in studies:
            wall_s, cpu_s, rss_mib, summary, sim = one(args, backend, extra)
            walls[backend].append(wall_s)
            cpus[backend].append(cpu_s)
            print(f"[{i + 1}/{args.repeat}] {backend or 'default'} backend: wall {wall_s:.1f} s, CPU {cpu_s:.0f} s, "
                  f"peak RSS {rss_mib:.0f} MiB; {summary}")
            print("\n".join(sim))
    for backend in studies:
        wall, cpu = statistics.median(walls[backend]), statistics.median(cpus[backend])
        print(f"median of {args.repeat}, {backend or 'default'} backend: wall {wall:.1f} s ({wall / 60:.2f} min), "
              f"CPU {cpu:.0f} s on {args.workers} workers")
    if len(studies) == 2:
        default, flow = studies
        print(f"default / flow: wall {statistics.median(walls[default]) / statistics.median(walls[flow]):.2f}×, "
              f"CPU {statistics.median(cpus[default]) / statistics.median(cpus[flow]):.2f}×")


if __name__ == "__main__":
    main()
