"""One decode step of a ``moesim run --trace`` broken down by operation: per node name, the median time of one
occurrence on a rank (the main model's layers outnumber an MTP draft layer's), occurrences per MoE layer, and
the MoE layer's median period (successive first dispatches).

    python research/decode_breakdown.py TRACE.json [--rank 0]

Reads the Chrome trace moesim writes (``--trace``); fast-forwarded layers are summarised in the trace and
left out here, so the figures are those of the layers simulated in full. Prints, writes nothing.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from statistics import median


def breakdown(events: list[dict], rank: int) -> tuple[dict[str, tuple[float, float]], float]:
    """(node name → (median µs per occurrence, occurrences per MoE layer)), median MoE-layer period in µs."""
    spans = [e for e in events if e.get("ph") == "X" and e.get("pid") == rank and "layer" in e.get("args", {})]
    moe_layers = sorted({e["args"]["layer"] for e in spans if e["name"] == "ep_dispatch"})
    durations: dict[str, list[float]] = defaultdict(list)
    for e in spans:
        if e["args"]["layer"] in moe_layers:
            durations[e["name"]].append(float(e["dur"]))
    table = {name: (median(d), len(d) / len(moe_layers)) for name, d in sorted(durations.items())}
    starts = sorted(min(float(e["ts"]) for e in spans if e["name"] == "ep_dispatch" and e["args"]["layer"] == layer)
                    for layer in moe_layers)
    gaps = [b - a for a, b, la, lb in zip(starts, starts[1:], moe_layers, moe_layers[1:], strict=False) if lb == la + 1]
    return table, median(gaps) if gaps else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--rank", type=int, default=0)
    args = ap.parse_args()
    with open(args.trace) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    table, period = breakdown(events, args.rank)
    print(f"{'node':<26} {'µs each':>9} {'per layer':>9} {'µs per layer':>12}")
    for name, (us, count) in table.items():
        print(f"{name:<26} {us:9.1f} {count:9.2f} {us * count:12.1f}")
    print(f"MoE layer period (first dispatch to first dispatch): {period:.1f} µs")


if __name__ == "__main__":
    main()
