"""How far single runs move under a few ns of start jitter, on each backend (research/fluid-accuracy.md).

    python research/jitter_spread.py 4/TP16EP2/ring_direct/roce_dcqcn 6/TP4EP8/ring_direct/ib_cc0 \
        [--tokens 256] [--jitter-s 1e-8] [--seeds 3] [--backends packet,fluid]

For each configuration (V4 Flash, topology/strategy/algorithm/mode) prints the wall time without jitter
and with ranks starting at seeded uniform draws in [0, jitter) (``start_jitter_s``, seeds 1..N,
docs/system.md), and the spread (max/min − 1) over all of them. A per-run error against a backend
whose own spread is larger than the error says little about either. Writes nothing.
"""

from __future__ import annotations

import argparse

from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec


def walls(cfg: str, backend: str, tokens: int, jitter_s: float, seeds: int) -> list[float]:
    """Wall times of ``cfg`` without jitter, then with seeds 1..``seeds``."""
    topology, strategy, algorithm, mode = cfg.split("/")
    out = []
    for seed in range(seeds + 1):
        over = (("tokens", tokens),) + ((("jitter_seed", seed), ("start_jitter_s", jitter_s)) if seed else ())
        spec = RunSpec("deepseek-v4-flash", topology, strategy, algorithm, mode, backend, tuple(sorted(over)))
        out.append(simulate_run(spec).wall_s)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="+", metavar="T/S/A/N")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--jitter-s", type=float, default=1e-8)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--backends", default="packet,fluid")
    args = ap.parse_args()
    for cfg in args.configs:
        for backend in args.backends.split(","):
            w = walls(cfg, backend, args.tokens, args.jitter_s, args.seeds)
            print(f"{cfg:32s} {backend:6s} no jitter {w[0]:.5f} s, jittered " + " ".join(f"{x:.5f}" for x in w[1:])
                  + f", spread {max(w) / min(w) - 1:6.1%}", flush=True)


if __name__ == "__main__":
    main()
