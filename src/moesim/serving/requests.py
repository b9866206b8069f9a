"""Requests to serve: a trace file (CSV or Parquet) or a seeded generator (Poisson arrivals, length
distributions). Arrays, not objects, so a replay of 10,000 requests stays cheap.

A trace has one row per request and the columns ``arrival_s`` (seconds from the trace's start),
``prompt_tokens`` and ``output_tokens`` (integers ≥ 1); rows may come in any order (they are replayed by
arrival time, stable, and keep their row number as the request id). Length distributions are written
``fixed:N`` (or ``N``), ``uniform:LO:HI`` (integers, both included), ``lognormal:MEDIAN:SIGMA[:MAX]``
(rounded, at least 1) and ``trace:FILE[:COLUMN]`` (drawn with replacement from a trace column).

A trace may also have the columns ``prefix_id`` (any value naming a shared prompt prefix: a system prompt,
a conversation's history) and ``prefix_tokens`` (its length, an integer in [0, prompt_tokens]; 0: none):
the replica's prefix cache then serves those tokens once a request with that prefix has prefilled them.
Generated arrivals are ``poisson`` (exponential gaps) or ``gamma:CV``, gamma-distributed gaps of mean
1/rate and coefficient of variation CV (standard deviation / mean): CV = 1 is as random as Poisson, CV > 1
is bursty (arrivals bunch together with long quiet gaps), CV < 1 more regular (CV → 0: evenly spaced).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moesim.errors import MoesimError, input_error
from moesim.serving.config import DEFAULT_OUTPUT, DEFAULT_PROMPT

COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
PREFIX_COLUMNS = ("prefix_id", "prefix_tokens")
"""Optional trace columns, both or neither: a shared prompt prefix's name and length."""
ARRIVALS = ("poisson", "gamma:CV")
MAX_CV = 100.0
"""The largest coefficient of variation of gamma gaps (shape 1/CV² = 1e-4 already puts nearly every
request in a few bursts)."""
MAX_TOKENS = 10**7
"""The longest prompt or output a request may have (a KV cache far beyond any accelerator's memory)."""
MAX_REQUESTS = 10**6
"""The most requests one replay takes (a search replays four times as many to confirm a capacity)."""
MAX_ARRIVAL_S = 1e9
"""The latest arrival time (about 32 years): beyond it a step's duration vanishes in the time's rounding
(a float64 at 1e9 s resolves 0.1 µs; at 1e300 s a whole request would take no time)."""
DISTRIBUTIONS = ("fixed:N", "uniform:LO:HI", "lognormal:MEDIAN:SIGMA[:MAX]", "trace:FILE[:COLUMN]")


@dataclass(frozen=True, eq=False)
class Requests:
    """Requests in arrival order: ``arrival_s`` (float, non-decreasing), ``prompt_tokens`` and
    ``output_tokens`` (int64 ≥ 1), ``ids`` (the trace row or generation index of each); ``source``
    says where they came from (recorded with the results)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    ids: np.ndarray
    source: str
    prefix_id: np.ndarray | None = None
    """Per request the code of its shared prompt prefix (−1: none), or None when the requests have none."""
    prefix_tokens: np.ndarray | None = None
    """Per request the length of its prefix (0 with code −1)."""

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def offered_rate_rps(self) -> float:
        """Requests per second over the arrival span (n − 1 gaps; inf for one request)."""
        span = float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) > 1 else 0.0
        return (len(self) - 1) / span if span > 0 else math.inf

    def scaled(self, factor: float) -> Requests:
        """The same requests arriving ``factor`` times as fast (arrival times divided by ``factor``)."""
        if not 0 < factor < math.inf:
            raise MoesimError(f"requests: rate factor must be a finite number > 0, got {factor}")
        with np.errstate(over="ignore", under="ignore"):
            arrival = self.arrival_s / factor
        _check_arrivals(arrival, f"{self.source}, arrivals ×{factor:g}")
        return Requests(arrival, self.prompt_tokens, self.output_tokens, self.ids,
                        f"{self.source}, arrivals ×{factor:g}", self.prefix_id, self.prefix_tokens)

    def repeated(self, times: int) -> Requests:
        """The requests ``times`` times over, each copy arriving one mean gap after the previous copy's last
        arrival: a run as many times longer at the same rate and lengths (for a steady-state check)."""
        n = len(self)
        span = float(self.arrival_s[-1] - self.arrival_s[0]) if n > 1 else 0.0
        period = span + (span / (n - 1) if n > 1 else 0.0)
        copies = np.arange(times).repeat(n)
        tiled = [None if a is None else np.tile(a, times) for a in (self.prefix_id, self.prefix_tokens)]
        return Requests(np.tile(self.arrival_s, times) + copies * period, np.tile(self.prompt_tokens, times),
                        np.tile(self.output_tokens, times), np.tile(self.ids, times) + copies * (int(self.ids.max()) + 1),
                        f"{self.source}, ×{times} in a row", *tiled)

    def fingerprint(self) -> str:
        """sha256 of the arrays (what a replay reads), for result keys."""
        h = hashlib.sha256()
        extra = () if self.prefix_id is None else (self.prefix_id, self.prefix_tokens)
        for a in (self.arrival_s, self.prompt_tokens, self.output_tokens, self.ids, *extra):
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()


def _check_arrivals(arrival: np.ndarray, what: str, option: str = "requests", field: str = "arrival_s") -> None:
    """Arrival times must stay within MAX_ARRIVAL_S (and be finite)."""
    if len(arrival) and not float(arrival[-1]) <= MAX_ARRIVAL_S:
        raise input_error(option, field, f"{what}: the last request would arrive at {float(arrival[-1]):.3g} s, after "
                          f"{MAX_ARRIVAL_S:g} s (where a step's duration is lost to rounding)")


def _table(path: str | Path) -> dict[str, np.ndarray]:
    """The columns of a CSV or Parquet file, or of a pipe holding one (``--trace <(zcat t.csv.gz)``), as numpy
    arrays; one-line errors naming the file."""
    import pyarrow as pa

    p = Path(path)
    if p.is_dir():
        raise MoesimError(f"{p}: is a directory, not a trace file (CSV or Parquet)")
    if not p.exists():
        raise MoesimError(f"{p}: trace file not found")
    try:
        data: Any = p
        parquet = p.suffix.lower() == ".parquet"
        if not p.is_file():  # a pipe (--trace <(zcat t.csv.gz)): read once, whole, as Parquet needs to seek
            raw = p.read_bytes()
            data, parquet = pa.BufferReader(raw), parquet or raw[:4] == b"PAR1"
        if parquet:
            import pyarrow.parquet as pq

            table = pq.read_table(data)
        else:
            import pyarrow.csv as pcsv

            table = pcsv.read_csv(data)
    except (pa.ArrowInvalid, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MoesimError(f"{p}: cannot read the trace ({first})") from None
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}


def _integers(values: np.ndarray, source: str, column: str, low: int = 1) -> np.ndarray:
    """``values`` as int64 tokens in [``low``, MAX_TOKENS]; the first bad row is named."""
    try:
        as_float = values.astype(np.float64)
    except (TypeError, ValueError):
        raise input_error(source, column, "must hold numbers") from None
    bad = ~np.isfinite(as_float) | (as_float != np.round(as_float)) | (as_float < low) | (as_float > MAX_TOKENS)
    if bad.any():
        row = int(np.argmax(bad))
        raise input_error(source, f"{column} (row {row + 1})",
                          f"must be an integer in [{low}, {MAX_TOKENS}], got {values[row]!r}")
    return as_float.astype(np.int64)


def read_trace(path: str | Path) -> Requests:
    """The requests of a trace file (CSV with a header line, or Parquet), replayed by arrival time."""
    cols = _table(path)
    source = str(path)
    missing = [c for c in COLUMNS if c not in cols]
    if missing:
        raise input_error(source, missing[0], "missing column", COLUMNS)
    n = len(cols["arrival_s"])
    if n == 0:
        raise MoesimError(f"{source}: the trace has no requests")
    try:
        arrival = cols["arrival_s"].astype(np.float64)
    except (TypeError, ValueError):
        raise input_error(source, "arrival_s", "must hold numbers (seconds)") from None
    if n > MAX_REQUESTS:
        raise MoesimError(f"{source}: the trace has {n} requests; a replay takes at most {MAX_REQUESTS}")
    bad = ~np.isfinite(arrival) | (arrival < 0) | (arrival > MAX_ARRIVAL_S)
    if bad.any():
        row = int(np.argmax(bad))
        raise input_error(source, f"arrival_s (row {row + 1})",
                          f"must be a time in [0, {MAX_ARRIVAL_S:g}] s, got {cols['arrival_s'][row]!r}")
    prompt = _integers(cols["prompt_tokens"], source, "prompt_tokens")
    output = _integers(cols["output_tokens"], source, "output_tokens")
    order = np.argsort(arrival, kind="stable")
    prefix = _prefixes(cols, source, prompt)
    code, length = (None, None) if prefix is None else (prefix[0][order], prefix[1][order])
    return Requests(arrival[order], prompt[order], output[order], order.astype(np.int64), f"trace {Path(path).name}",
                    code, length)


def _prefixes(cols: dict[str, np.ndarray], source: str, prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(prefix code per row, −1 for none; prefix length) from the optional columns, or None without them."""
    given = [c for c in PREFIX_COLUMNS if c in cols]
    if not given:
        return None
    if len(given) == 1:
        missing = PREFIX_COLUMNS[1 - PREFIX_COLUMNS.index(given[0])]
        raise input_error(source, missing, f"missing column (given {given[0]}; the prefix columns go together)",
                          PREFIX_COLUMNS)
    length = _integers(cols["prefix_tokens"], source, "prefix_tokens", low=0)
    over = length > prompt
    if over.any():
        row = int(np.argmax(over))
        raise input_error(source, f"prefix_tokens (row {row + 1})",
                          f"must be at most prompt_tokens ({int(prompt[row])}), got {int(length[row])}")
    names = cols["prefix_id"]
    valid = np.array([v is not None and v == v for v in names.tolist()], dtype=bool)  # null and NaN: no prefix
    _, codes = np.unique(np.where(valid, names.astype(str), ""), return_inverse=True)
    has = valid & (length > 0)
    return np.where(has, codes, -1).astype(np.int64), np.where(has, length, 0).astype(np.int64)


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution (module docstring); ``text`` is how it was written."""

    text: str
    kind: str
    args: tuple[float, ...] = ()
    values: np.ndarray | None = None
    """``trace``: the column drawn from."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, int(self.args[0]), dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(int(self.args[0]), int(self.args[1]) + 1, size=n, dtype=np.int64)
        if self.kind == "lognormal":
            median, sigma, top = self.args
            draws = np.round(median * np.exp(sigma * rng.standard_normal(n)))
            return np.clip(draws, 1, top).astype(np.int64)
        assert self.values is not None
        return self.values[rng.integers(0, len(self.values), size=n)]


def parse_length(text: str, option: str, column: str) -> LengthDist:
    """A ``LengthDist`` from its text form; ``column`` is the trace column a bare ``trace:FILE`` draws from."""
    parts = str(text).strip().split(":")
    kind = parts[0].lower()

    def number(s: str, name: str, low: float, integer: bool = True) -> float:
        try:
            value = float(s)
        except ValueError:
            raise input_error(option, name, f"cannot read {s!r} as a number", DISTRIBUTIONS) from None
        if not math.isfinite(value) or value < low or value > MAX_TOKENS or (integer and value != int(value)):
            kind_text = "an integer" if integer else "a number"
            raise input_error(option, name, f"must be {kind_text} in [{low:g}, {MAX_TOKENS}], got {s}")
        return value

    if kind.isdigit() and len(parts) == 1:
        return LengthDist(text, "fixed", (number(parts[0], "N", 1),))
    if kind == "fixed" and len(parts) == 2:
        return LengthDist(text, "fixed", (number(parts[1], "N", 1),))
    if kind == "uniform" and len(parts) == 3:
        lo, hi = number(parts[1], "LO", 1), number(parts[2], "HI", 1)
        if hi < lo:
            raise input_error(option, "HI", f"must be ≥ LO ({lo:g}), got {hi:g}")
        return LengthDist(text, "uniform", (lo, hi))
    if kind == "lognormal" and len(parts) in (3, 4):
        median = number(parts[1], "MEDIAN", 1, integer=False)
        sigma = number(parts[2], "SIGMA", 0, integer=False)
        top = number(parts[3], "MAX", 1) if len(parts) == 4 else float(MAX_TOKENS)
        return LengthDist(text, "lognormal", (median, sigma, top))
    if kind == "trace" and len(parts) in (2, 3):
        path = parts[1]
        name = parts[2] if len(parts) == 3 else column
        cols = _table(path)
        if name not in cols:
            raise input_error(path, name, "missing column", sorted(cols))
        values = _integers(cols[name], path, name)
        if len(values) == 0:
            raise MoesimError(f"{path}: column '{name}' is empty")
        return LengthDist(text, "trace", values=values)
    raise input_error(option, "distribution", f"cannot read {text!r}", DISTRIBUTIONS)


def parse_arrivals(text: str, option: str = "--arrivals") -> float:
    """The coefficient of variation of the arrival gaps written ``poisson`` (1) or ``gamma:CV``."""
    parts = str(text).strip().lower().split(":")
    if parts == ["poisson"]:
        return 1.0
    if parts[0] == "gamma" and len(parts) == 2:
        try:
            cv = float(parts[1])
        except ValueError:
            cv = math.nan
        if not 0 < cv <= MAX_CV:
            raise input_error(option, "CV", f"must be a number in (0, {MAX_CV:g}], got {parts[1]!r}")
        return cv
    raise input_error(option, "arrivals", f"cannot read {text!r}", ARRIVALS)


def poisson(rate_rps: float, count: int, prompt: LengthDist, output: LengthDist, seed: int = 0,
            cv: float | None = None) -> Requests:
    """``count`` requests with exponential gaps of mean 1/``rate_rps`` (the first arrives after one gap) and
    lengths drawn from ``prompt`` and ``output``. One generator seeded with ``seed`` draws the unit gaps,
    then the prompts, then the outputs, so the same seed at another rate gives the same requests with
    arrival times scaled (common random numbers for rate sweeps). With ``cv``, the gaps are gamma-distributed,
    shape 1/cv² and scale cv²/rate (mean 1/rate, coefficient of variation cv; cv = 1 is the exponential)."""
    if not (isinstance(rate_rps, int | float) and math.isfinite(rate_rps) and rate_rps > 0):
        raise input_error("--rate", "rate", f"must be a positive number of requests per second, got {rate_rps!r}")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_REQUESTS:
        raise input_error("--requests", "requests", f"must be an integer in [1, {MAX_REQUESTS}], got {count!r}")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0, count) if cv is None else rng.gamma(1 / cv**2, cv**2, count)
    with np.errstate(over="ignore", under="ignore"):
        arrival = np.cumsum(gaps) / rate_rps
    _check_arrivals(arrival, f"{count} requests at {rate_rps:g}/s", "--rate", "rate")
    prompts = prompt.sample(rng, count)
    outputs = output.sample(rng, count)
    kind = "poisson" if cv is None else f"gamma cv {cv:g}"
    return Requests(arrival, prompts, outputs, np.arange(count, dtype=np.int64),
                    f"{kind} {rate_rps:g}/s, prompt {prompt.text}, output {output.text}, seed {seed}")


def make_requests(trace: str | Path | None = None, rate_rps: float | None = None, count: int = 1000,
                  prompt: str = DEFAULT_PROMPT, output: str = DEFAULT_OUTPUT, seed: int = 0,
                  arrivals: str = "poisson") -> Requests:
    """The requests of a command line or API call: a trace file, or ``count`` arrivals at ``rate_rps``
    (``arrivals``: ``poisson`` or ``gamma:CV``)."""
    if trace is not None and rate_rps is not None:
        raise MoesimError("requests: give a trace (--trace) or a rate (--rate), not both")
    if trace is not None:
        return read_trace(trace)
    if rate_rps is None:
        raise MoesimError("requests: give a trace (--trace FILE) or an arrival rate (--rate R requests/s)")
    cv = None if str(arrivals).strip().lower() == "poisson" else parse_arrivals(arrivals)
    return poisson(rate_rps, count, parse_length(prompt, "--prompt", "prompt_tokens"),
                   parse_length(output, "--output", "output_tokens"), seed, cv)
