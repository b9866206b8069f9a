"""Serving figures from a replay: per request TTFT, TPOT and end-to-end latency; percentiles, throughput,
goodput under an SLO, and Little's law as a check of the replay's own bookkeeping.

TTFT = first token − arrival; TPOT = (finish − first token) / (output tokens − 1), the mean time per
output token after the first (undefined for one output token: such a request meets any TPOT limit);
E2E = finish − arrival. A request meets the SLO when its TTFT and TPOT are within the limits given.
Throughput is completions per second of the run's span, first arrival to last finish (as vLLM's benchmark
counts it, the drain included). Goodput is the arrival rate times the share of requests that meet the SLO
(DistServe, Zhong et al., OSDI 2024): the rate of SLO-meeting requests the deployment takes on, which a
finite run's drain does not dilute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import pyarrow as pa

from moesim.errors import input_error
from moesim.serving.replay import ReplayResult
from moesim.serving.requests import Requests

PERCENTILES = (50, 90, 99)
TIME_UNITS = {"s": 0, "ms": -3, "us": -6, "µs": -6, "ns": -9}


def parse_duration_s(text: str | float, option: str) -> float:
    """``1s``, ``50ms``, ``200us`` or a number of seconds, as seconds (> 0)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
    else:
        raw = str(text).strip().lower()
        unit = next((u for u in sorted(TIME_UNITS, key=len, reverse=True) if raw.endswith(u)), "")
        try:
            value = float(Decimal(raw[: len(raw) - len(unit)].strip()).scaleb(TIME_UNITS[unit] if unit else 0))
        except (InvalidOperation, ValueError):
            raise input_error(option, "duration", f"cannot read {text!r} (write e.g. 1s, 50ms)",
                              TIME_UNITS) from None
    if not (math.isfinite(value) and value > 0):
        raise input_error(option, "duration", f"must be > 0, got {text!r}")
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
    return pa.table(columns)


def _stats(name: str, values: np.ndarray) -> dict[str, float | None]:
    finite = values[np.isfinite(values)]
    if len(finite) == 0:
        return {f"{name}_mean_s": None, **{f"{name}_p{p}_s": None for p in PERCENTILES}}
    out: dict[str, float | None] = {f"{name}_mean_s": float(finite.mean())}
    for p, v in zip(PERCENTILES, np.percentile(finite, PERCENTILES), strict=True):
        out[f"{name}_p{p}_s"] = float(v)
    return out


def aggregates(table: pa.Table, result: ReplayResult, slo: Slo, gpus: int,
               offered_rate_rps: float | None = None) -> dict[str, Any]:
    """The run's figures (module docstring) with Little's law: ``mean_in_system`` (the replay's own time
    average of requests present) against ``arrival_rate_rps × mean E2E``. ``offered_rate_rps``: the
    arrival rate the requests were drawn at (default: n − 1 over the arrival span)."""
    arrival = table.column("arrival_s").to_numpy()
    finish = table.column("finish_s").to_numpy()
    e2e = table.column("e2e_s").to_numpy()
    n = len(arrival)
    span = float(finish.max() - arrival.min()) if n else 0.0
    met = table.column("slo_met").to_numpy(zero_copy_only=False)
    out_tokens = int(table.column("output_tokens").to_numpy().sum())
    if offered_rate_rps is None and n > 1 and arrival.max() > arrival.min():
        offered_rate_rps = (n - 1) / float(arrival.max() - arrival.min())
    attainment = float(met.mean()) if n and slo.given else None  # no SLO: no attainment, no goodput
    record: dict[str, Any] = {
        "requests": n, "duration_s": span, "offered_rate_rps": offered_rate_rps,
        "throughput_rps": n / span if span > 0 else None,
        "output_tokens_per_s": out_tokens / span if span > 0 else None,
        "slo_ttft_s": slo.ttft_s, "slo_tpot_s": slo.tpot_s, "slo_attainment": attainment,
        "goodput_rps": offered_rate_rps * attainment if offered_rate_rps is not None and attainment is not None
        else None,
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
    return record
