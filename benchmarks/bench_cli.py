"""How fast the command line answers: median wall and CPU time of each command as a fresh process, and which
heavy packages it imports.

    python benchmarks/bench_cli.py [--repeat 7] [--run]

Prints one line per command: median wall seconds, median CPU seconds (user + system, the process and its
children), and the heavy packages it loaded (from ``python -X importtime``). ``python -c pass`` is the floor:
the interpreter's own start. On a busy machine compare CPU medians (wall time includes waiting for a core).
``--run`` adds a single flow-backend study run (the import cost a single simulation pays).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

COMMANDS: list[tuple[str, list[str]]] = [
    ("python -c pass", [sys.executable, "-c", "pass"]),
    ("moesim --version", [sys.executable, "-m", "moesim", "--version"]),
    ("moesim --help", [sys.executable, "-m", "moesim", "--help"]),
    ("moesim models list", [sys.executable, "-m", "moesim", "models", "list"]),
    ("moesim models show", [sys.executable, "-m", "moesim", "models", "show", "deepseek-v4-flash"]),
    ("moesim topology list", [sys.executable, "-m", "moesim", "topology", "list"]),
    ("moesim sweep study --dry-run", [sys.executable, "-m", "moesim", "sweep", "study", "--out", "unused",
                                      "--dry-run", "--preset", "smoke"]),
]
RUN = ("moesim run (flow, V4 Flash, topology 1)",
       [sys.executable, "-m", "moesim", "run", "--model", "deepseek-v4-flash", "--topology", "1", "--strategy",
        "TP2EP16", "--backend", "flow", "--progress", "none"])
HEAVY = ("numba", "numpy", "networkx", "pydantic", "rich", "yaml", "duckdb", "pyarrow", "pandas", "matplotlib",
         "google.protobuf", "scipy", "ray")


def measure(cmd: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def heavy_imports(cmd: list[str]) -> list[str]:
    """The HEAVY packages ``cmd`` imports."""
    res = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], capture_output=True, text=True, check=False)
    names = {line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    return [h for h in HEAVY if h in names]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--run", action="store_true", help="also time a single flow-backend run")
    ap.add_argument("--entry", default="moesim", help="the module run with -m (moesim.cli for older trees)")
    args = ap.parse_args()
    env_note = f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}" if os.environ.get("PYTHONPATH") else ""
    print(f"{sys.executable} {env_note}; {args.repeat} repeats; load average {os.getloadavg()[0]:.1f}")
    for label, cmd in COMMANDS + ([RUN] if args.run else []):
        cmd = [args.entry if a == "moesim" and i == 2 else a for i, a in enumerate(cmd)]
        measure(cmd)  # warm the file cache (and numba's on-disk cache for the run)
        samples = [measure(cmd) for _ in range(args.repeat)]
        wall = statistics.median(s[0] for s in samples)
        cpu = statistics.median(s[1] for s in samples)
        print(f"{label:42s} wall {wall:6.3f} s  CPU {cpu:6.3f} s  imports: {', '.join(heavy_imports(cmd)) or '-'}")


if __name__ == "__main__":
    main()
