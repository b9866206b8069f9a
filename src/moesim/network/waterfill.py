"""Max-min fair allocation by weighted progressive filling (Bertsekas & Gallager, Data Networks, 6.5).

Shared by the ``flow`` backend (uncapped) and the fluid kernel (each flow capped by its CC/window
offer). Flows are padded rows of link ids and per-link coefficients (wire bytes per payload byte); a
flow's first ``nfwd`` links carry its data, the rest its ACKs.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from moesim.network.jit import SOURCES_IN_CACHE_KEY, helper


@njit(cache=SOURCES_IN_CACHE_KEY)  # allocates: keeps numba's reference counting
def waterfill_capped(links, coefs, hops, nfwd, cap, demand_cap, rates, bottleneck):
    """Weighted progressive filling where flow f never exceeds ``demand_cap[f]`` (its CC/window rate).

    A flow's first ``nfwd[f]`` hops carry its data, the rest its ACKs. ACK bytes take link capacity but
    never freeze a flow: the NIC sends ACKs first and a switch's FIFO serves them as they arrive
    (docs/reference-semantics.md A.1, A.2), so a data stream is not held to the fair share of a link that
    only carries its ACKs (measured at packet level: docs/network.md).
    Writes rates and, per flow, the link that froze it (-1 when its own cap did)."""
    n, n_links = links.shape[0], cap.shape[0]
    waterfill_into(links, coefs, hops, nfwd, cap, demand_cap, rates, bottleneck, np.empty(n, dtype=np.bool_),
                   np.empty((3, n_links)), np.empty(n_links, dtype=np.bool_))


@helper
def waterfill_into(links, coefs, hops, nfwd, cap, demand_cap, rates, bottleneck, frozen, work, carries_data):
    """``waterfill_capped`` in caller-provided scratch (no allocation, for kernels compiled without
    reference counting): ``frozen`` (≥ n flows), ``work`` (3 × links) and ``carries_data`` (links)."""
    n, n_links = links.shape[0], cap.shape[0]
    frozen[:n] = False
    used, demand, level = work[0], work[1], work[2]
    used[:] = 0.0
    left = n
    while left > 0:
        demand[:] = 0.0
        carries_data[:] = False
        for f in range(n):
            if not frozen[f]:
                for h in range(hops[f]):
                    demand[links[f, h]] += coefs[f, h]
                for h in range(nfwd[f]):
                    carries_data[links[f, h]] = True
        x = np.inf
        for k in range(n_links):
            level[k] = max(cap[k] - used[k], 0.0) / demand[k] if carries_data[k] else np.inf
            if level[k] < x:
                x = level[k]
        # Every flow capped clearly below the lowest link level is frozen at its cap in one pass:
        # freezing a flow below a link's level only raises that level, so the order does not matter.
        # (One pass per distinct cap made this O(n²) when CC gives every flow its own rate.)
        below = 0
        for f in range(n):
            if not frozen[f] and demand_cap[f] * (1.0 + 1e-12) < x:
                frozen[f] = True
                rates[f] = demand_cap[f]
                bottleneck[f] = -1
                below += 1
                for h in range(hops[f]):
                    used[links[f, h]] += coefs[f, h] * rates[f]
        if below > 0:
            left -= below
            continue
        for f in range(n):
            if not frozen[f] and demand_cap[f] < x:
                x = demand_cap[f]
        threshold = x * (1.0 + 1e-12)
        for f in range(n):
            if frozen[f]:
                continue
            hit = -2
            for h in range(nfwd[f]):
                if level[links[f, h]] <= threshold:
                    hit = links[f, h]
                    break
            if hit == -2 and demand_cap[f] <= threshold:
                hit = -1
            if hit != -2:
                frozen[f] = True
                rates[f] = min(x, demand_cap[f])
                bottleneck[f] = hit
                left -= 1
                for h in range(hops[f]):
                    used[links[f, h]] += coefs[f, h] * rates[f]


def waterfill(links: np.ndarray, coefs: np.ndarray, hops: np.ndarray, nfwd: np.ndarray,
               cap: np.ndarray) -> np.ndarray:
    """Uncapped progressive filling over padded per-flow link rows (the flow backend's allocation)."""
    n = links.shape[0]
    rates = np.zeros(n)
    waterfill_capped(links, coefs, hops, nfwd, cap, np.full(n, np.inf), rates, np.zeros(n, dtype=np.int64))
    return rates


def max_min_rates(inc_flow: np.ndarray, inc_link: np.ndarray, inc_coef: np.ndarray, n_flows: int,
                  cap: np.ndarray) -> np.ndarray:
    """Weighted progressive filling: raise all unfrozen flows' rates together; when a link saturates,
    freeze the flows crossing it. Constraint per link l: Σ_f coef(f, l)·rate_f ≤ cap_l.

    The incidences are given as parallel arrays (flow index, link index, coefficient)."""
    hops = np.bincount(inc_flow, minlength=n_flows).astype(np.int64)
    width = max(int(hops.max()) if n_flows else 0, 1)
    links = np.zeros((n_flows, width), dtype=np.int64)
    coefs = np.zeros((n_flows, width))
    fill = np.zeros(n_flows, dtype=np.int64)
    for f, k, c in zip(inc_flow.tolist(), inc_link.tolist(), inc_coef.tolist(), strict=True):
        links[f, fill[f]] = k
        coefs[f, fill[f]] = c
        fill[f] += 1
    return waterfill(links, coefs, hops, hops, cap.astype(np.float64))
