"""CPU time of the packet backend on a fixed set of V4 Flash study runs, and their bit-identity.

    python benchmarks/bench_packet.py [--runs all|quick|T/STRATEGY/ALGO/NET,...] [--repeat N]
                                      [--baseline-rev REV | --baseline-src DIR] [--tokens N]

Each run is simulated in a fresh process (the kernel is loaded, or compiled, before the clock starts)
and reports the process CPU time of the run, the kernel's share (CPU time inside the compiled loop),
events per data packet, kernel ns per event and the run's wall time (simulated seconds), which at the
study's 4096 tokens is compared to the bit with the stored matrix (benchmarks/reference/
packet_v4_flash.parquet). With ``--baseline-rev REV`` the tree at git revision REV of the repository it
is run from (``git archive``, no worktree is touched) runs each configuration too, alternately with the
current tree so that both see the same load; it then prints per run the median CPU times and their
ratio. ``--baseline-src DIR`` compares against a ``src`` directory on disk instead (e.g. a patched copy
for an ablation: research/packet-event-cost.md). Exits non-zero when the trees (or repeats) give
different wall times; a run whose stored wall time differs in both trees is reported, not failed (the
matrix predates the tree).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "benchmarks" / "reference" / "packet_v4_flash.parquet"
MODEL = "deepseek-v4-flash"

RUNS = (  # topology/strategy/algorithm/network: every network mode, ring and DBT, 5-25 s of CPU each
    "6/TP4EP8/ring_direct/ib_cc0",
    "6/TP2EP16/dbt_direct/ib_cc0",
    "2/TP2EP16/ring_direct/ib_hpcc",
    "1/TP2EP16/ring_direct/roce_dcqcn",
    "1/TP2EP16/ring_direct/roce_hpcc",
    "2/TP2EP16/dbt_direct/ib_cc0",
    "2/TP2EP16/dbt_direct/roce_dcqcn",
)
QUICK = RUNS[:3]


def child(run: str, tokens: int | None) -> None:
    """Simulate one run in this process and print one JSON line (called in a subprocess)."""
    from moesim import api
    from moesim.network.packet import backend as packet_backend

    created: list[object] = []
    init = packet_backend.PacketBackend.__init__

    def recording_init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        init(self, *args, **kwargs)
        created.append(self)

    packet_backend.PacketBackend.__init__ = recording_init  # type: ignore[method-assign]
    kernel_cpu = [0.0]
    kernel_run = packet_backend.run

    def timed_run(*args):  # type: ignore[no-untyped-def]
        t0 = time.thread_time()
        try:
            return kernel_run(*args)
        finally:
            kernel_cpu[0] += time.thread_time() - t0

    packet_backend.run = timed_run  # type: ignore[assignment]
    topo, strategy, algorithm, network = run.split("/")
    overrides: dict[str, Any] = {} if tokens is None else {"tokens": tokens}
    api.run(MODEL, 6, "TP2EP16", "dbt_direct", "ib_cc0", "packet", tokens=64)  # loads/compiles the kernel
    created.clear()
    kernel_cpu[0] = 0.0
    c0, w0 = time.process_time(), time.perf_counter()
    out = api.run(MODEL, topo, strategy, algorithm, network, "packet", **overrides)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    stats = [b.stats() for b in created]  # type: ignore[attr-defined]
    print(json.dumps({
        "run": run, "wall_s": out.wall_s.hex(), "cpu_s": cpu, "elapsed_s": wall,
        "kernel_s": kernel_cpu[0], "events": sum(s["events"] for s in stats),
        "data_packets": sum(s["data_packets"] for s in stats),
    }))


def measure(src: Path, run: str, tokens: int | None) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", run]
    if tokens is not None:
        cmd += ["--tokens", str(tokens)]
    env = dict(os.environ, PYTHONPATH=str(src))
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        sys.exit(f"bench_packet: run {run} failed with the tree at {src}:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def stored_walls() -> dict[str, float]:
    import pyarrow.parquet as pq

    t = pq.read_table(MATRIX, columns=["topology", "strategy", "algorithm", "network", "wall_s"]).to_pylist()
    return {f"{r['topology']}/{r['strategy']}/{r['algorithm']}/{r['network']}": r["wall_s"] for r in t}


def export_rev(rev: str, into: Path) -> Path:
    """The ``src`` tree of git revision ``rev`` unpacked under ``into`` (git archive: no worktree touched)."""
    tar = into / "src.tar"
    with tar.open("wb") as f:
        subprocess.run(["git", "archive", rev, "src"], stdout=f, check=True)  # the repository of the cwd
    with tarfile.open(tar) as tf:
        tf.extractall(into, filter="data")
    return into / "src"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="all", help="all, quick (the first three) or a comma-separated list")
    ap.add_argument("--repeat", type=int, default=1)
    baseline = ap.add_mutually_exclusive_group()
    baseline.add_argument("--baseline-rev", default=None, help="git revision to compare against (e.g. main)")
    baseline.add_argument("--baseline-src", default=None, type=Path,
                          help="a src directory to compare against (e.g. a patched copy for an ablation)")
    ap.add_argument("--tokens", type=int, default=None, help="tokens per run (default: the study's 4096)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.tokens)
        return
    runs = RUNS if args.runs == "all" else QUICK if args.runs == "quick" else tuple(args.runs.split(","))
    stored = stored_walls() if args.tokens is None else {}
    trees = {"current": ROOT / "src"}
    with tempfile.TemporaryDirectory(prefix="bench_packet_") as tmp:
        if args.baseline_rev:
            trees = {"baseline": export_rev(args.baseline_rev, Path(tmp)), **trees}
        elif args.baseline_src:
            if not (args.baseline_src / "moesim" / "__init__.py").is_file():
                sys.exit(f"bench_packet: --baseline-src {args.baseline_src}: not a src directory (no moesim package)")
            trees = {"baseline": args.baseline_src.resolve(), **trees}
        failed = False
        ratios = []
        print(f"{'run':34s} " + " ".join(f"{name + ' CPU s (kernel)':>26s}" for name in trees)
              + "  ratio  events/pkt  ns/event  wall s (simulated)")
        for run in runs:
            samples: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
            for _ in range(args.repeat):
                for name, src in trees.items():
                    samples[name].append(measure(src, run, args.tokens))
            cpu = {name: statistics.median(float(s["cpu_s"]) for s in ss) for name, ss in samples.items()}
            kern = {name: statistics.median(float(s["kernel_s"]) for s in ss) for name, ss in samples.items()}
            cur = samples["current"][-1]
            walls = {float.fromhex(str(s["wall_s"])) for ss in samples.values() for s in ss}
            same = len(walls) == 1  # every sample of every tree
            wall = min(walls)
            failed |= not same
            verdict = ("identical" if same else f"DIFFER {sorted(walls)}") + (
                "" if run not in stored else ", = stored" if stored[run] == wall and same
                else f", stored {stored[run]!r} differs")
            ratio = cpu["baseline"] / cpu["current"] if "baseline" in cpu else float("nan")
            if "baseline" in cpu:
                ratios.append(ratio)
            ev, pk = int(cur["events"]), int(cur["data_packets"])
            if "baseline" in samples and int(samples["baseline"][-1]["events"]) != ev:  # e.g. an ablation
                verdict += f", baseline {int(samples['baseline'][-1]['events']) / max(pk, 1):.2f} events/pkt"
            print(f"{run:34s} " + " ".join(f"{cpu[name]:18.2f} ({kern[name]:5.2f})" for name in trees)
                  + f"  {ratio:5.2f}  {ev / max(pk, 1):10.2f}  {kern['current'] * 1e9 / max(ev, 1):8.1f}  "
                  + f"{wall!r}  {verdict}", flush=True)
        if ratios:
            print(f"median ratio baseline/current CPU: {statistics.median(ratios):.2f} (per run: "
                  + ", ".join(f"{r:.2f}" for r in ratios) + ")")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
