"""Benchmark `moesim sweep run MATRIX --dry-run` on matrices of a million runs and more.

    python benchmarks/bench_dry_run.py [--runs 1000000,100000000] [--repeat 5]

Each matrix is a product of 2 models × 5 topologies × 4 strategies × 2 algorithms × 2 network modes
× N token counts × 10 jitter seeds (N sets the size), plus an include entry and two exclude entries,
so the count has to handle overlaps. Prints, per matrix, the run count and the medians of: reading the
matrix (``load_matrix``, which validates every level), counting and checking it (``check_matrix``),
and the whole command as a process (which adds the interpreter start and moesim's imports).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from moesim.experiments.inputs import check_matrix
from moesim.experiments.matrix import load_matrix

BASE_RUNS_PER_TOKEN = 2 * 5 * 4 * 2 * 2 * 10


def matrix_doc(runs: int) -> dict:
    tokens = list(range(1024, 1024 + max(1, runs // BASE_RUNS_PER_TOKEN)))
    return {
        "name": f"bench-{runs}",
        "factors": {"model": ["deepseek-v4-flash", "kimi-k3"], "topology": ["1", "2", "3", "4", "5"],
                    "strategy": ["TP2EP16", "TP16EP2", "TP4EP8", "TP8EP4"], "algorithm": ["ring_direct", "dbt_direct"],
                    "network": ["ib_cc0", "roce_dcqcn"], "tokens": tokens, "jitter_seed": list(range(1, 11))},
        "include": [{"topology": "6", "strategy": "TP2EP16", "jitter_seed": [11, 12]}],
        "exclude": [{"topology": "1", "tokens": tokens[: len(tokens) // 5]},
                    {"model": "kimi-k3", "network": "roce_dcqcn", "jitter_seed": 5}],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="1000000,100000000", help="comma-separated sizes of the base product")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{'base runs':>12} {'counted':>12} {'load_matrix':>12} {'check_matrix':>13} {'command':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for runs in (int(x) for x in args.runs.split(",")):
            path = Path(tmp) / f"m{runs}.yaml"
            path.write_text(yaml.safe_dump(matrix_doc(runs)))
            loads, checks, commands = [], [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                matrix = load_matrix(path)
                t1 = time.perf_counter()
                count = check_matrix(matrix)
                t2 = time.perf_counter()
                loads.append(t1 - t0)
                checks.append(t2 - t1)
                cmd = [sys.executable, "-c", "import sys; from moesim.cli import main; sys.argv[0] = 'moesim'; main()",
                       "sweep", "run", str(path), "--out", str(Path(tmp) / "unused"), "--dry-run"]
                t3 = time.perf_counter()
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                commands.append(time.perf_counter() - t3)
                assert f"{count} runs" in out, out
            print(f"{runs:>12,} {count:>12,} {statistics.median(loads):>11.3f}s {statistics.median(checks):>12.3f}s "
                  f"{statistics.median(commands):>8.2f}s")


if __name__ == "__main__":
    main()
