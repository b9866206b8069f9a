"""Serving figures from a replay: per request TTFT, TPOT and end-to-end latency; percentiles, throughput,
goodput under an SLO, and Little's law as a check of the replay's own bookkeeping.

TTFT = first token − arrival; TPOT = (finish − first token) / (output tokens − 1), the mean time per
output token after the first (undefined for one output token: such a request meets any TPOT limit);
E2E = finish − arrival. A request meets the SLO when its TTFT and TPOT are within the limits given.

Rates come from a steady-state window, so a short run's warm-up (an empty system) and drain (no new
arrivals) do not bias them: the window runs from the end of the warm-up to the last arrival. The warm-up
lasts WARMUP_FRACTION of the arrivals, and at least WARMUP_E2E mean E2E latencies (the system holds λ·E2E
requests in steady state; a warm-up shorter than the time a request stays leaves it emptier than that,
and completions in the window then lag arrivals although the rate is sustainable), but at most
WARMUP_MAX_FRACTION of the arrivals (an overloaded run's E2E grows with its length); ``warmup_truncated``
says it was cut there: the run is short for the time a request stays, or overloaded. Over the window,
the achieved arrival rate is the arrivals in the window (its first included, its end excluded) per
second, throughput the completions (finish in the window) per second, and goodput the completions that
met the SLO per second (DistServe's goodput, Zhong et al., OSDI 2024, counted on
completions), so goodput ≤ throughput by construction. A run is *sustained* when throughput is within
SUSTAIN_TOLERANCE of the achieved arrival rate and queueing does not grow: the mean TTFT of the window's
last quarter of arrivals exceeds that of its first quarter by at most SUSTAIN_TOLERANCE seconds per second
of arrivals between them (an overload of a fraction x of the capacity makes the wait grow by about x s/s),
over a window of at least MIN_WINDOW_REQUESTS arrivals. A run too short for a window is not sustained.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from moesim.errors import input_error
from moesim.serving.replay import ReplayResult
from moesim.serving.requests import Requests
from moesim.topology.units import parse_time_s

PERCENTILES = (50, 90, 99)
WARMUP_FRACTION = 0.2
"""Share of the arrivals (the first ones) left out of the steady-state window: the system fills up."""
WARMUP_E2E = 2.0
"""The warm-up lasts at least this many mean E2E latencies from the first arrival."""
WARMUP_MAX_FRACTION = 0.5
"""The warm-up never takes more than this share of the arrivals."""
MIN_WINDOW_REQUESTS = 20
"""Fewer arrivals in the window measure no rate worth calling sustained."""
SUSTAIN_TOLERANCE = 0.05
"""A run sustains its arrival rate when throughput ≥ (1 − this) × the achieved arrival rate and the mean
TTFT grows by at most this many seconds per second over the window."""


def parse_duration_s(text: str | float, option: str) -> float:
    """``1s``, ``50ms``, ``200us`` or a number of seconds, as seconds (> 0), read as every duration with a unit
    is (``moesim.topology.units``); a one-line error naming ``option`` otherwise."""
    value = parse_time_s(text, option, "duration")
    if not (math.isfinite(value) and value > 0):
        raise input_error(option, "duration", f"must be a finite time > 0, got {text!r}")
    return value


@dataclass(frozen=True)
class Slo:
    """Latency limits a request must meet; None: no limit on that figure."""

    ttft_s: float | None = None
    tpot_s: float | None = None

    @property
    def given(self) -> bool:
        return self.ttft_s is not None or self.tpot_s is not None

    def met(self, ttft: np.ndarray, tpot: np.ndarray) -> np.ndarray:
        ok = np.ones(len(ttft), dtype=bool)
        if self.ttft_s is not None:
            ok &= ttft <= self.ttft_s
        if self.tpot_s is not None:
            ok &= np.isnan(tpot) | (tpot <= self.tpot_s)
        return ok


def request_table(requests: Requests, result: ReplayResult, slo: Slo) -> pa.Table:
    """One row per request: its id, lengths, where it ran, its times and latencies, whether it met the SLO."""
    ttft = result.first_token_s - requests.arrival_s
    e2e = result.finish_s - requests.arrival_s
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(requests.output_tokens > 1, (result.finish_s - result.first_token_s)
                        / (requests.output_tokens - 1), math.nan)
    columns: dict[str, Any] = {
        "request": requests.ids, "arrival_s": requests.arrival_s, "prompt_tokens": requests.prompt_tokens,
        "output_tokens": requests.output_tokens, "replica": result.replica, "decode_replica": result.decode_replica,
        "scheduled_s": result.scheduled_s, "first_token_s": result.first_token_s, "finish_s": result.finish_s,
        "kv_sent_s": result.transfer_start_s, "kv_transfer_s": result.transfer_end_s - result.transfer_start_s,
        "ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "slo_met": slo.met(ttft, tpot),
    }
    for name, values in (("dp_rank", result.rank), ("cached_tokens", result.cached_tokens),
                         ("preemptions", result.preemptions)):
        if values is not None:  # only where the feature is on: other runs keep their tables
            columns[name] = values
    return pa.table(columns)


def _stats(name: str, values: np.ndarray) -> dict[str, float | None]:
    finite = values[np.isfinite(values)]
    if len(finite) == 0:
        return {f"{name}_mean_s": None, **{f"{name}_p{p}_s": None for p in PERCENTILES}}
    out: dict[str, float | None] = {f"{name}_mean_s": float(finite.mean())}
    for p, v in zip(PERCENTILES, np.percentile(finite, PERCENTILES), strict=True):
        out[f"{name}_p{p}_s"] = float(v)
    return out


def window(arrival: np.ndarray, finish: np.ndarray, ttft: np.ndarray,
           met: np.ndarray | None) -> dict[str, Any]:
    """The steady-state figures of a run (module docstring): its window, achieved arrival rate,
    throughput, goodput (None without an SLO), the TTFT growth over the window and whether it is sustained.
    ``arrival`` is non-decreasing (requests in arrival order)."""
    n = len(arrival)
    warm = float(arrival[0] + WARMUP_E2E * (finish - arrival).mean()) if n else 0.0
    wanted = max(int(WARMUP_FRACTION * n), int(np.searchsorted(arrival, warm)))
    k = min(wanted, int(WARMUP_MAX_FRACTION * n))
    start, end = (float(arrival[k]), float(arrival[-1])) if n else (0.0, 0.0)
    out: dict[str, Any] = {"window_start_s": start, "window_end_s": end, "window_requests": max(n - 1 - k, 0),
                           "warmup_truncated": wanted > k,
                           "achieved_rate_rps": None, "throughput_rps": None, "goodput_rps": None,
                           "window_attainment": None, "ttft_growth": None, "sustained": False}
    length = end - start
    if not (length > 0 and math.isfinite(length)):
        return out  # every window request arrived at once: no rate to measure
    done = (finish > start) & (finish <= end)
    out["achieved_rate_rps"] = (n - 1 - k) / length
    out["throughput_rps"] = int(done.sum()) / length
    if met is not None:
        out["goodput_rps"] = int((done & met).sum()) / length
        out["window_attainment"] = float((done & met).sum() / done.sum()) if done.any() else 0.0
    quarter = max((n - 1 - k) // 4, 1)
    first, last = slice(k, k + quarter), slice(n - 1 - quarter, n - 1)
    gap = float(arrival[last].mean() - arrival[first].mean())
    if gap > 0:
        out["ttft_growth"] = float(ttft[last].mean() - ttft[first].mean()) / gap
    out["sustained"] = bool(n - 1 - k >= MIN_WINDOW_REQUESTS
                            and out["throughput_rps"] >= (1 - SUSTAIN_TOLERANCE) * out["achieved_rate_rps"]
                            and out["ttft_growth"] is not None and out["ttft_growth"] <= SUSTAIN_TOLERANCE)
    return out


def aggregates(table: pa.Table, result: ReplayResult, slo: Slo, gpus: int,
               offered_rate_rps: float | None = None) -> dict[str, Any]:
    """The run's figures (module docstring) with Little's law: ``mean_in_system`` (the replay's own time
    average of requests present) against ``λ × mean E2E`` with λ = n over the run's span (first arrival to
    last finish). ``offered_rate_rps``: the arrival rate the requests were drawn at (default: n − 1 over
    the arrival span)."""
    arrival = table.column("arrival_s").to_numpy()
    finish = table.column("finish_s").to_numpy()
    e2e = table.column("e2e_s").to_numpy()
    n = len(arrival)
    span = float(finish.max() - arrival.min()) if n else 0.0
    met = table.column("slo_met").to_numpy(zero_copy_only=False)
    if offered_rate_rps is None and n > 1 and arrival.max() > arrival.min():
        offered_rate_rps = (n - 1) / float(arrival.max() - arrival.min())
    attainment = float(met.mean()) if n and slo.given else None  # no SLO: no attainment, no goodput
    steady = window(arrival, finish, table.column("ttft_s").to_numpy(), met if slo.given else None)
    done = (finish > steady["window_start_s"]) & (finish <= steady["window_end_s"])
    length = steady["window_end_s"] - steady["window_start_s"]
    out_tokens = int(table.column("output_tokens").to_numpy()[done].sum())
    record: dict[str, Any] = {
        "requests": n, "duration_s": span, "offered_rate_rps": offered_rate_rps, **steady,
        "output_tokens_per_s": out_tokens / length if steady["throughput_rps"] is not None else None,
        "slo_ttft_s": slo.ttft_s, "slo_tpot_s": slo.tpot_s, "slo_attainment": attainment,
    }
    record["goodput_per_gpu_rps"] = record["goodput_rps"] / gpus if record["goodput_rps"] is not None else None
    for name in ("ttft", "tpot", "e2e"):
        record.update(_stats(name, table.column(f"{name}_s").to_numpy(zero_copy_only=False)))
    transfer = table.column("kv_transfer_s").to_numpy(zero_copy_only=False)
    record.update(_stats("kv_transfer", transfer))
    record["mean_in_system"] = result.area / span if span > 0 else None
    record["little_lambda_w"] = (n / span) * float(e2e.mean()) if span > 0 else None
    record["gpus"] = gpus
    record["steps"] = int(sum(result.steps))
    record["utilization"] = [b / span if span > 0 else None for b in result.busy_s]
    record["kv_capacity_tokens"] = list(result.kv_capacity_tokens)
    if result.cached_tokens is not None or result.preemptions is not None:
        record["prefill_tokens"] = result.prefill_tokens
    if result.cached_tokens is not None:
        record["cached_tokens"] = int(result.cached_tokens.sum())
    if result.preemptions is not None:
        record["preemptions"] = int(result.preemptions.sum())
    return record
