"""Benchmark building and routing large topologies: time and peak memory against the number of links.

    python benchmarks/bench_topology.py [--gpus 1000,10000,100000] [--repeat 3]

The cluster is built-in topology 4's server (2 CPUs, 2 PCIe switches, 8 GPUs, 2 NICs) repeated over
GPUs / 8 servers on a leaf/spine fabric (16 servers per leaf, 8 spines). Each sample runs in a fresh
process and measures: ``gpu_count`` (the GPU count read from the spec, what ``prepare`` checks TP × EP
against before building), ``build`` (build_topology, which includes ``check_routes``), ``routes``
(the route sets from GPU 0 to every GPU, and from every GPU to the last, as ``moesim topology show``
needs), and the process's peak resident memory. Prints the median of ``--repeat`` samples per size and
the peak memory per directed link; memory linear in links shows as a flat bytes-per-link column.

The same two steps timed on server templates (2-core machine under load):
``gb200-nvl72:16`` (1,152 GPUs, 8,064 links) 0.3 s + 1.8 s, ``gb200-nvl72:64`` (4,608 GPUs) 1.4 s + 9.5 s,
``hgx-h100:1024`` (8,192 GPUs, 88,064 links) 1.7 s + 6.6 s, peak memory 133 MB.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

GPUS_PER_SERVER = 8


def cluster(num_gpus: int):  # noqa: ANN201 - a ClusterSpec, imported in the sample process only
    import dataclasses

    from moesim.topology import TOPOLOGIES, LeafSpine

    base = TOPOLOGIES.get("4")
    servers = -(-num_gpus // GPUS_PER_SERVER)
    fabric = LeafSpine(servers_per_leaf=16, spines=8, oversubscription=1.0, nic_bandwidth_bps=400e9)
    return dataclasses.replace(base, name=f"bench-{num_gpus}", num_servers=servers, fabric=fabric)


def sample(num_gpus: int) -> dict[str, float]:
    """One measurement in this process (called in a fresh subprocess by ``main``)."""
    from moesim.topology import build_topology

    spec = cluster(num_gpus)
    t0 = time.perf_counter()
    gpus = spec.num_gpus
    t1 = time.perf_counter()
    topo = build_topology(spec)
    t2 = time.perf_counter()
    last = topo.num_gpus - 1
    hops = sum(len(topo.routes(0, g)[0]) + len(topo.routes(g, last)[0]) for g in range(topo.num_gpus))
    t3 = time.perf_counter()
    assert gpus == topo.num_gpus and hops > 0
    return {"gpus": gpus, "links": len(topo.links), "gpu_count_s": t1 - t0, "build_s": t2 - t1,
            "routes_s": t3 - t2, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="1000,10000,100000", help="comma-separated GPU counts")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sample", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sample is not None:
        print(json.dumps(sample(args.sample)))
        return
    print(f"{'GPUs':>8} {'links':>9} {'gpu count':>10} {'build':>9} {'routes':>9} {'peak RSS':>10} {'B/link':>7}")
    for n in (int(x) for x in args.gpus.split(",")):
        runs = []
        for _ in range(args.repeat):
            out = subprocess.run([sys.executable, __file__, "--sample", str(n)], check=True, capture_output=True,
                                 text=True).stdout
            runs.append(json.loads(out))

        def med(key: str, runs: list[dict[str, float]] = runs) -> float:
            return statistics.median(r[key] for r in runs)

        links = runs[0]["links"]
        print(f"{int(runs[0]['gpus']):>8} {int(links):>9} {med('gpu_count_s') * 1e6:>8.1f}µs {med('build_s'):>8.2f}s "
              f"{med('routes_s'):>8.2f}s {med('peak_rss_bytes') / 2**20:>7.0f}MiB {med('peak_rss_bytes') / links:>7.0f}")


if __name__ == "__main__":
    main()
