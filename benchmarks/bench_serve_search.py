"""Speed of ``moesim serve search`` with a cold step-cost cache: 4 splits × 3 server counts × 2 modes.

    python benchmarks/bench_serve_search.py [--servers 4,8,16] [--requests 4000] [--table FILE] [-- EXTRA...]

Runs the command a user would run to pick a DeepSeek V4 Flash deployment on H100 servers (docs/serving.md):

    moesim serve search --model deepseek-v4-flash --topology hgx-h100:4 --servers 4,8,16 \\
        --slo-ttft 1s --slo-tpot 50ms --json --cache <empty folder>

with the default splits (the study's four: TP2EP16, TP4EP8, TP8EP4, TP16EP2, each on 4 servers), both modes
(colocated; disaggregated over every prefill:decode division that fits), 4000 Poisson requests of the default
lengths, the fluid backend and the default workers (one per CPU). The cache is a fresh temporary folder, so every
step is simulated. It prints the wall and CPU time (this process's children: the command and its workers), the
step simulations and cache hits, and where the time went: filling the step costs (moesim runs of every grid
step) and the capacity searches (the serving simulator's replays, in ``--workers`` processes), with the CPU
seconds of each candidate's search summed by mode and server count. ``--table FILE``
writes the search's result table (each candidate's capacity, goodput and limit, in rank order) as JSON, to
compare two versions bit for bit. Arguments after ``--`` go to the command.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TABLE_KEYS = ("best", "mode", "strategy", "prefill_strategy", "topology", "disaggregate", "gpus", "capacity_rps",
              "goodput_per_gpu_rps", "upper_bound_found", "conservative", "rates_tried", "limited_by")
"""A candidate's row of the result table: what must not change when the search gets faster."""


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_by_type(candidates: list[dict]) -> dict[str, list[float]]:
    """Each candidate's search CPU seconds (the command's ``search_cpu_s``) by mode and server count."""
    out: dict[str, list[float]] = {}
    for c in sorted(candidates, key=lambda c: (c["mode"], c["gpus"])):
        out.setdefault(f"{c['mode']} on {c['topology']}", []).append(c["search_cpu_s"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default="4,8,16")
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--table", type=Path, help="write the result table to this JSON file")
    ap.add_argument("extra", nargs="*", help="more options of moesim serve search (after --)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        cache, result = Path(work) / "cache", Path(work) / "result.json"
        command = [sys.executable, "-m", "moesim", "serve", "search", "--model", "deepseek-v4-flash", "--topology",
                   "hgx-h100:4", "--servers", args.servers, "--requests", str(args.requests), "--slo-ttft", "1s",
                   "--slo-tpot", "50ms", "--json", "--cache", str(cache), *args.extra]
        print("$ moesim " + " ".join(command[3:]), flush=True)
        cpu0, t0 = children_cpu_s(), time.monotonic()
        with result.open("w") as stdout:  # a file, not a pipe: the JSON outgrows a pipe's buffer while stderr is read
            proc = subprocess.Popen(command, stdout=stdout, stderr=subprocess.PIPE, text=True)
            assert proc.stderr is not None
            for line in proc.stderr:  # progress: step costs, then one line per candidate as its search ends
                print(f"[{time.monotonic() - t0:7.1f} s] {line}", end="", file=sys.stderr, flush=True)
            if proc.wait() != 0:
                sys.exit(f"moesim serve search failed (exit {proc.returncode})")
        wall, cpu = time.monotonic() - t0, children_cpu_s() - cpu0
        out = result.read_text()
    data = json.loads(out)
    fill = data["step_costs"]
    searching = data["elapsed_s"] - fill["elapsed_s"]
    candidates = data["candidates"]
    print(f"{len(candidates)} candidates ({len(data['skipped'])} combinations left out), {args.requests} requests "
          f"per rate tried (confirmations {10 * args.requests})")
    print(f"wall {wall:.1f} s ({wall / 60:.2f} min), CPU {cpu:.1f} s (command and its workers)")
    print(f"step costs: {fill['steps']} steps, {fill['simulated']} simulated, {fill['cached']} cache hits, "
          f"{fill['elapsed_s']:.1f} s")
    modes = [c["mode"] for c in candidates]
    print(f"capacity searches (the serving simulator's replays): {searching:.1f} s for {modes.count('colocated')} "
          f"colocated and {modes.count('disaggregated')} disaggregated candidates; start-up and output "
          f"{wall - data['elapsed_s']:.1f} s")
    for label, group in cpu_by_type(candidates).items():
        print(f"  {label}: {len(group)} candidates, CPU {sum(group):.1f} s, {sum(group) / len(group):.1f} s each "
              f"({min(group):.1f}–{max(group):.1f})")
    if args.table is not None:
        rows = [{k: c[k] for k in TABLE_KEYS} for c in candidates]
        args.table.write_text(json.dumps(rows, indent=1, sort_keys=True, default=repr) + "\n")
        print(f"result table: {args.table}")


if __name__ == "__main__":
    main()
