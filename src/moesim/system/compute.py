"""Roofline compute timing (ASTRA-sim ``Roofline.cc``; docs/reference-semantics.md B.6)."""

from __future__ import annotations

from moesim.workload.graph import Node


def roofline_time_s(node: Node, peak_flops: float, mem_bw_bytes_per_s: float, roofline: bool = True) -> float:
    """max(FLOPs/peak, bytes/bandwidth), truncated to whole ns as the reference does.

    With roofline on, a node that moves no bytes is skipped (zero time); with it off, the node's
    recorded duration is replayed (1 ns when zero), as in ASTRA-sim.
    """
    if not roofline:
        return max(node.duration_ns, 1) * 1e-9
    if node.bytes_moved <= 0 or node.flops <= 0:
        return node.bytes_moved / mem_bw_bytes_per_s if node.flops <= 0 and node.bytes_moved > 0 else 0.0
    intensity = node.flops / node.bytes_moved
    perf = min(mem_bw_bytes_per_s * intensity, peak_flops)
    return int(node.flops / perf * 1e9) * 1e-9
