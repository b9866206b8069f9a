"""CPU time of one decode step of a documented deployment (issue #51's target: DeepSeek-V3 EP144 on 18 servers,
fluid backend, within 30 s on 2 cores).

    python benchmarks/bench_decode_step.py [--only deepseek-online-decode] [--backend fluid] [--repeat 3]

Each repetition is a fresh ``python`` process that runs the deployment's ``moesim run`` (the RunSpec
``bench_deployments.spec_of`` builds from its arguments) and nothing else, so imports, workload generation
and loading the compiled kernels count, as they do for a user. The figure is that process's user + system CPU
seconds (on a shared machine the wall clock measures the neighbours too); the line also gives the run's wall time
to full precision (a change that keeps results must keep it bit for bit), its fast-forward mode and layers.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from bench_deployments import DEPLOYMENTS, spec_of  # the script's own directory is on sys.path

DEFAULT = "deepseek-online-decode"


def child(name: str, backend: str) -> None:
    """Run one deployment and print its result line as JSON (the parent measures this process's CPU)."""
    import dataclasses

    from moesim.system.run import simulate_run

    deployment = next(d for d in DEPLOYMENTS if d.name == name)
    result = simulate_run(dataclasses.replace(spec_of(deployment.args), backend=backend))
    params = result.parameters
    print(json.dumps({"wall_s": repr(float(result.wall_s)), "fast_forward_mode": params["fast_forward_mode"],
                      "fast_forwarded_layers": params["fast_forwarded_layers"]}))


def measure(name: str, backend: str) -> tuple[float, dict[str, object]]:
    """(user + system CPU seconds of a child process running the deployment once, its result line)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", name, "--backend", backend],
                         check=True, capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    decodes = [d.name for d in DEPLOYMENTS if d.phase == "decode"]
    ap.add_argument("--only", default=DEFAULT, help=f"comma-separated decode deployments (allowed: {', '.join(decodes)})")
    ap.add_argument("--backend", default="fluid")
    ap.add_argument("--repeat", type=int, default=1, help="processes per deployment; the median is printed")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.backend)
        return
    names = args.only.split(",")
    unknown = [n for n in names if n not in decodes]
    if unknown:
        ap.error(f"--only: unknown {', '.join(unknown)} (allowed: {', '.join(decodes)})")
    if args.repeat < 1:
        ap.error(f"--repeat: {args.repeat} (allowed: an integer >= 1)")
    print(f"{'deployment':<26} {'backend':<10} {'CPU s':>7} {'min':>7} {'max':>7}  wall_s (fast-forward)")
    for name in names:
        samples, line = [], {}
        for _ in range(args.repeat):
            cpu, line = measure(name, args.backend)
            samples.append(cpu)
        print(f"{name:<26} {args.backend:<10} {statistics.median(samples):7.1f} {min(samples):7.1f} {max(samples):7.1f}"
              f"  {line['wall_s']} ({line['fast_forward_mode']}, {line['fast_forwarded_layers']} layers)", flush=True)


if __name__ == "__main__":
    main()
