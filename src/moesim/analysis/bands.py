"""Measured error bands: how far each backend's wall times lie from packet level, by family of runs.

A backend's error on one run is |backend / reference − 1|, the reference being the packet backend. What
decides that error is the run's *family* (``Family``): the TP all-reduce algorithm, whether its traffic
stays inside one server, and — for runs whose flows can carry congestion control — the network mode.
The band of a family is the ``QUANTILE`` (90th percentile) of the errors of its reference runs: nine runs
in ten of the family lie inside it. Each reference (the 192-run V4 Flash matrix at 4096 tokens, the
validation sets at 256 and 1024 tokens, each other model's packet runs) is measured apart and the largest
quantile kept, so the band holds at each scale and model. A family with fewer than ``MIN_FAMILY_RUNS`` runs in every reference has no stable 90th
percentile; it gets the larger of its worst run and the backend-wide band, so a small family is never
taken as better than the backend overall nor as better than its own worst run. A run of a family the
references do not hold gets the backend-wide band.

An ordering compares two runs (or two means of runs), and what decides it is the error of their *ratio*:
log(y_B / y_A) − log(p_B / p_A) = ε_B − ε_A with ε = log(backend / packet) per run. The errors of runs move
together (fluid's ring runs are mostly too fast), so that difference is smaller than two independent bands
added. The *paired bands* (``PairedBands``, ``measure_paired``) measure it: per pair of families, the
``QUANTILE`` of |ε_B − ε_A| over the pairs of one reference's runs taken at one scale (its token count),
again the largest over the references that hold at least ``MIN_FAMILY_RUNS`` runs of each family; per family
also the ``QUANTILE`` of |ε| of one run, for a run compared with a packet one (exact). A mean over many rows
errs less than one pair of runs; ``PairedBands.mean_factor`` (``confidence.calibrate_studies``) says by how
much.

The bands ship as ``references/error_bands.yaml``, written by ``python benchmarks/accuracy.py bands``
from the stored packet references (its header says which references, code and command produced it), and
are read by ``moesim.analysis.confidence`` to tell resolved orderings from unresolved ones.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import yaml

from moesim.errors import MoesimError, input_error
from moesim.system.spec import RunSpec

BANDS_FILE = "error_bands.yaml"
QUANTILE = 0.9
"""The share of a family's reference runs its band covers."""
MIN_FAMILY_RUNS = 10
"""Below this many reference runs a family's band is the larger of its worst run and the backend-wide band."""
ONE_SERVER, SERVERS = "one server", "servers"
ANY_NETWORK = "any"
"""The network of a family whose flows cannot carry congestion control (the mode changes nothing there)."""


@dataclass(frozen=True, order=True)
class Family:
    """What a backend's error depends on: TP all-reduce algorithm, where the traffic goes, network mode."""

    algorithm: str
    scope: str
    """``one server`` (every rank in one server) or ``servers`` (traffic crosses servers)."""
    network: str
    """The network mode, or ``any`` when no flow of the run can carry congestion control."""

    def label(self) -> str:
        where = "inside one server" if self.scope == ONE_SERVER else "between servers"
        return f"{self.algorithm}, {where}" + ("" if self.network == ANY_NETWORK else f", {self.network}")


@functools.lru_cache(maxsize=4096)
def family_of(spec: RunSpec) -> Family:
    """The family of a run (resolves its inputs: a run that cannot be prepared raises MoesimError)."""
    from moesim.system.run import prepare

    p = prepare(spec)
    servers = {p.topology.gpus[g].server for g in p.placement.rank_to_gpu}
    return Family(spec.algorithm, SERVERS if len(servers) > 1 else ONE_SERVER,
                  spec.network if p.cc_flows_possible() else ANY_NETWORK)


def row_spec(row: Mapping[str, Any]) -> RunSpec:
    """The RunSpec of a results row (its factor columns and ``overrides_json``)."""
    overrides = json.loads(row.get("overrides_json") or "{}")
    fields = {k: str(row[k]) for k in ("algorithm", "network", "backend") if row.get(k) is not None}
    return RunSpec(str(row["model"]), str(row["topology"]), str(row["strategy"]), **fields,
                   overrides=tuple(sorted((k, v) for k, v in overrides.items())))


def row_family(row: Mapping[str, Any]) -> Family | None:
    """The family of a results row; None when the row lacks a factor or its run cannot be resolved (a
    topology file that has moved): such a row gets its backend-wide band."""
    try:
        return family_of(row_spec(row))
    except (KeyError, ValueError, TypeError, MoesimError):
        return None


@dataclass(frozen=True)
class Band:
    """One measured band: the relative error bound and how many reference runs it rests on."""

    band: float
    runs: int


FamilyPair = tuple[Family, Family]
"""Two families, the smaller first (``pair_key``)."""


def pair_key(a: Family, b: Family) -> FamilyPair:
    return (a, b) if a <= b else (b, a)


@dataclass(frozen=True)
class PairedBands:
    """One backend's bands in log terms: |ε| of one run (backend-wide and per family), and |ε_B − ε_A| of
    two runs of the backend (backend-wide and per pair of families); ε = log(backend / packet)."""

    single: Band
    families: Mapping[Family, Band]
    pair: Band
    """Backend-wide band of a pair of runs; ``runs`` counts the pairs."""
    pairs: Mapping[FamilyPair, Band]
    mean_factor: float = 1.0
    """What the band of two means is multiplied by: the ``QUANTILE`` of |realised error| / band over the
    comparisons of two means the references' orderings make (``confidence.calibrate_studies``)."""

    def one(self, family: Family | None) -> float:
        """The log band of one run against an exact one."""
        found = self.families.get(family) if family is not None else None
        return (found or self.single).band

    def two(self, a: Family | None, b: Family | None) -> float:
        """The log band of the ratio of two runs of this backend."""
        found = self.pairs.get(pair_key(a, b)) if a is not None and b is not None else None
        return (found or self.pair).band


@dataclass(frozen=True)
class BackendBands:
    """One backend's bands: backend-wide, per family, and its cost relative to the reference backend, with
    the paired bands orderings are judged by (None: not measured; the per-run bands then stand in)."""

    overall: Band
    families: Mapping[Family, Band] = field(default_factory=dict)
    relative_cost: float | None = None
    """Simulation time of this backend over that of the reference on the same runs (None: not measured)."""
    paired: PairedBands | None = None

    def band(self, family: Family | None) -> float:
        found = self.families.get(family) if family is not None else None
        return (found or self.overall).band

    def log_band(self, family: Family | None) -> float:
        """|ε| of one run: the paired section's, else log(1 + band) of the per-run band."""
        return self.paired.one(family) if self.paired is not None else math.log1p(self.band(family))


K = TypeVar("K", Family, tuple[Family, Family])
Errors = Sequence[tuple[Family | None, float]]
"""One reference's per-run errors of a backend: (family, backend / packet − 1)."""


def _quantile(errs: Sequence[float]) -> float:
    return float(np.quantile(np.abs(np.array(errs, dtype=float)), QUANTILE))


def _keyed(samples: Mapping[K, list[list[float]]], enough: Callable[[K, int], bool], overall: float) -> dict[K, Band]:
    """Per key, the largest ``QUANTILE`` of its samples over the references where ``enough(key, reference)``;
    a key no reference holds enough of gets the larger of its worst sample and ``overall``."""
    out = {}
    for key, per_ref in sorted(samples.items()):
        n = sum(len(s) for s in per_ref)
        big = [_quantile(s) for i, s in enumerate(per_ref) if s and enough(key, i)]
        out[key] = Band(max(big), n) if big else Band(max(max(max(s, default=0.0) for s in per_ref), overall), n)
    return out


def _by_family(references: Sequence[Errors]) -> dict[Family, list[list[float]]]:
    """Each family's errors, one list per reference."""
    out: dict[Family, list[list[float]]] = {}
    for i, r in enumerate(references):
        for fam, e in r:
            if fam is not None:
                out.setdefault(fam, [[] for _ in references])[i].append(e)
    return out


def measure(references: Sequence[Errors], relative_cost: float | None = None) -> BackendBands:
    """One backend's bands from its errors against each reference (a set of runs at one scale).

    Backend-wide and per family, the band is the largest ``QUANTILE`` over the references that hold at least
    ``MIN_FAMILY_RUNS`` runs of it, so it holds at each reference's scale; a family no reference holds that
    often gets the larger of its worst run (over all references) and the backend-wide band."""
    usable = [r for r in references if r]
    if not usable:
        raise MoesimError("error bands: no run of the backend matches a reference run")
    overall = Band(max(_quantile([e for _, e in r]) for r in usable), sum(len(r) for r in usable))
    per_ref = {f: [[abs(e) for e in s] for s in ss] for f, ss in _by_family(usable).items()}
    families = _keyed(per_ref, lambda f, i: len(per_ref[f][i]) >= MIN_FAMILY_RUNS, overall.band)
    return BackendBands(overall, families, relative_cost)


def _pair_differences(scales: Sequence[Errors]) -> tuple[list[float], dict[FamilyPair, list[float]]]:
    """|ε_B − ε_A| of every pair of runs taken at one scale: all of them, and by pair of families."""
    every: list[float] = []
    by_pair: dict[FamilyPair, list[float]] = {}
    for runs in scales:
        logs = [(fam, math.log1p(e)) for fam, e in runs]
        for (fa, ea), (fb, eb) in itertools.combinations(logs, 2):
            d = abs(eb - ea)
            every.append(d)
            if fa is not None and fb is not None:
                by_pair.setdefault(pair_key(fa, fb), []).append(d)
    return every, by_pair


def measure_paired(references: Sequence[Sequence[Errors]]) -> PairedBands:
    """One backend's paired bands from its errors against each reference, a reference given as its scales
    (the runs at one token count): pairs are formed within a scale, so a ratio's error is that of two runs
    simulated alike. A family pair's band is the largest ``QUANTILE`` of |ε_B − ε_A| over the references that
    hold at least ``MIN_FAMILY_RUNS`` runs of each family, else the larger of its worst pair and the
    backend-wide pair band; |ε| of one run follows ``measure``'s rule."""
    usable = [[s for s in r if s] for r in references]
    usable = [r for r in usable if r]
    if not usable:
        raise MoesimError("error bands: no run of the backend matches a reference run")
    single = measure([[(f, math.log1p(e)) for s in r for f, e in s] for r in usable])
    runs = [Counter(f for s in r for f, _ in s) for r in usable]
    measured = [_pair_differences(r) for r in usable]
    overall = Band(max(_quantile(every) for every, _ in measured if every) if any(e for e, _ in measured) else 0.0,
                   sum(len(every) for every, _ in measured))
    per_ref: dict[FamilyPair, list[list[float]]] = {}
    for i, (_, by_pair) in enumerate(measured):
        for key, ds in by_pair.items():
            per_ref.setdefault(key, [[] for _ in usable])[i] += ds

    def enough(key: FamilyPair, i: int) -> bool:
        return min(runs[i].get(key[0], 0), runs[i].get(key[1], 0)) >= MIN_FAMILY_RUNS

    return PairedBands(single.overall, single.families, overall, _keyed(per_ref, enough, overall.band))


RowKey = tuple[str, Family | None]
"""What a run's error depends on: its backend and its family."""


def _portable(command: str) -> str:
    """``command`` with the folders given to ``--store``/``--out``/``--validation-store`` named DIR: the file's
    provenance says how to regenerate it, not where one machine kept its scratch runs."""
    return re.sub(r"(--store|--out|--validation-store)(=|\s+)\S+", r"\1 DIR", command)


@dataclass(frozen=True)
class ErrorBands:
    """Every backend's bands against the ``reference`` backend, with where they came from."""

    reference: str
    backends: Mapping[str, BackendBands]
    provenance: Mapping[str, Any] = field(default_factory=dict)

    def band(self, backend: str, family: Family | None) -> float | None:
        """The relative error band of a run of ``backend`` in ``family``: 0 on the reference backend, None
        for a backend without measured bands."""
        if backend == self.reference:
            return 0.0
        b = self.backends.get(backend)
        return None if b is None else b.band(family)

    def log_band(self, backend: str, family: Family | None) -> float:
        """|ε| of one run of ``backend`` in ``family`` against packet level: 0 on the reference backend and
        on a backend without measured bands (its rows count as exact)."""
        b = self.backends.get(backend) if backend != self.reference else None
        return 0.0 if b is None else b.log_band(family)

    def pair_band(self, a: RowKey, b: RowKey) -> float:
        """The log band of the ratio of two runs, each given as (backend, family): the paired band of their
        families when both come from one backend with paired bands; otherwise their ``log_band``s added (one
        of them 0 for a reference run: a ratio to an exact run carries the other run's error alone)."""
        if a[0] == b[0] and a[0] != self.reference:
            own = self.backends.get(a[0])
            if own is not None and own.paired is not None:
                return own.paired.two(a[1], b[1])
        return self.log_band(*a) + self.log_band(*b)

    def mean_factor(self, backend: str) -> float:
        """``PairedBands.mean_factor`` of ``backend`` (1 without paired bands)."""
        b = self.backends.get(backend)
        return 1.0 if b is None or b.paired is None else b.paired.mean_factor

    def exactness(self, backend: str) -> tuple[int, float]:
        """Sort key, most exact first: the reference, then the backends by their backend-wide band, then
        backends without measured bands."""
        if backend == self.reference:
            return (0, 0.0)
        b = self.backends.get(backend)
        return (1, b.overall.band) if b is not None else (2, 0.0)

    def describe(self, backends: Sequence[str]) -> str:
        """One sentence: what a band is, the bands of ``backends`` and where they were measured."""
        parts = []
        for name in backends:
            b = self.backends.get(name)
            if name == self.reference:
                parts.append(f"{name} 0 (the reference)")
            elif b is None:
                parts.append(f"{name} not measured (its rows count as exact)")
            elif not b.families:
                parts.append(f"{name} {100 * b.overall.band:.1f} % (one band for every family)")
            else:
                lo, hi = min(f.band for f in b.families.values()), max(f.band for f in b.families.values())
                parts.append(f"{name} {100 * lo:.1f}–{100 * hi:.1f} % by family")
        paired = []
        for name in backends:
            pb = self.backends[name].paired if name in self.backends else None
            if pb is not None and pb.pairs:
                lo, hi = (math.expm1(f(x.band for x in pb.pairs.values())) for f in (min, max))
                paired.append(f"{name} {100 * lo:.1f}–{100 * hi:.1f} % (× {pb.mean_factor:.2f} for two means)")
        p = self.provenance
        return (f"A row's band is the {QUANTILE:.0%} quantile of its backend's error against {self.reference} level "
                f"in its family (TP all-reduce algorithm, inside or between servers, network mode): "
                + "; ".join(parts) + "." + (f" An ordering is judged by the error of its ratio, whose paired band is "
                                            f"the {QUANTILE:.0%} quantile of the difference of two runs' log errors "
                                            "by pair of families: " + "; ".join(paired) + "." if paired else "")
                + f" Measured on {p.get('date', '?')} at commit {str(p.get('commit', '?'))[:12]} "
                f"by `{_portable(str(p.get('command', '?')))}` ({BANDS_FILE}).")

    def cost_factor(self, source: str, target: str) -> float | None:
        """Simulation time on ``target`` over that on ``source`` for the same run (None: not measured)."""
        def cost(name: str) -> float | None:
            return 1.0 if name == self.reference else (self.backends[name].relative_cost
                                                       if name in self.backends else None)

        s, t = cost(source), cost(target)
        return None if s is None or t is None or s <= 0 else t / s


def _family_dict(fam: Family, b: Band) -> dict[str, Any]:
    return {"algorithm": fam.algorithm, "scope": fam.scope, "network": fam.network, "band": round(b.band, 4),
            "runs": b.runs}


def _paired_dict(p: PairedBands) -> dict[str, Any]:
    return {"band": round(p.single.band, 4), "runs": p.single.runs,
            "families": [_family_dict(f, fb) for f, fb in p.families.items()],
            "pair_band": round(p.pair.band, 4), "pairs_count": p.pair.runs, "mean_factor": round(p.mean_factor, 4),
            "pairs": [{"a": [a.algorithm, a.scope, a.network], "b": [b.algorithm, b.scope, b.network],
                       "band": round(pb.band, 4), "pairs": pb.runs} for (a, b), pb in p.pairs.items()]}


def bands_yaml(bands: ErrorBands) -> str:
    """The YAML text of ``bands`` (bands rounded to 0.01 %), its provenance first."""
    def backend(b: BackendBands) -> dict[str, Any]:
        out = {"relative_cost": None if b.relative_cost is None else float(f"{b.relative_cost:.2g}"),
               "band": round(b.overall.band, 4), "runs": b.overall.runs,
               "families": [_family_dict(f, fb) for f, fb in b.families.items()]}
        return out if b.paired is None else {**out, "paired": _paired_dict(b.paired)}

    data = {"provenance": dict(bands.provenance), "reference_backend": bands.reference,
            "statistic": f"per backend and family: the largest {QUANTILE:.0%} quantile of |backend / "
                         f"{bands.reference} - 1| over the references with at least {MIN_FAMILY_RUNS} runs of it; "
                         "otherwise the larger of its worst run and the backend-wide band",
            "paired_statistic": f"with e = log(backend / {bands.reference}) per run: per family the same rule on |e| "
                                "(band, families), and per pair of families the largest "
                                f"{QUANTILE:.0%} quantile of |e_B - e_A| over the pairs of runs at one token count, "
                                f"over the references with at least {MIN_FAMILY_RUNS} runs of each family; "
                                "otherwise the larger of its worst pair and the backend-wide pair band (pair_band)",
            "backends": {name: backend(b) for name, b in bands.backends.items()}}
    head = ("# Measured error bands of the backends against packet level (moesim.analysis.bands).\n"
            "# Written by `python benchmarks/accuracy.py bands`; do not edit by hand.\n")
    return head + yaml.safe_dump(data, sort_keys=False, width=110, default_flow_style=None)


def _number(src: str, where: str, value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise input_error(src, where, f"must be a number >= 0, got {value!r}")
    return float(value)


def _families(src: str, where: str, items: Any) -> dict[Family, Band]:
    if not isinstance(items, list):
        raise input_error(src, where, "must be a list of {algorithm, scope, network, band, runs}")
    fams = {}
    for i, f in enumerate(items):
        try:
            fam = Family(str(f["algorithm"]), str(f["scope"]), str(f["network"]))
        except (KeyError, TypeError):
            raise input_error(src, f"{where}[{i}]", "needs algorithm, scope, network, band, runs") from None
        fams[fam] = Band(_number(src, f"{where}[{i}].band", f.get("band")), int(f.get("runs") or 0))
    return fams


def _family_list(src: str, where: str, value: Any) -> Family:
    if not isinstance(value, list) or len(value) != 3 or not all(isinstance(v, str) for v in value):
        raise input_error(src, where, f"must be [algorithm, scope, network], got {value!r}")
    return Family(*value)


def _parse_paired(src: str, where: str, p: Any) -> PairedBands:
    if not isinstance(p, dict):
        raise input_error(src, where, "must be a mapping with band, runs, families, pair_band, pairs_count, pairs")
    pairs = {}
    items = p.get("pairs") or []
    if not isinstance(items, list):
        raise input_error(src, f"{where}.pairs", "must be a list of {a, b, band, pairs}")
    for i, x in enumerate(items):
        at = f"{where}.pairs[{i}]"
        if not isinstance(x, dict):
            raise input_error(src, at, "must be a mapping {a, b, band, pairs}")
        key = pair_key(_family_list(src, f"{at}.a", x.get("a")), _family_list(src, f"{at}.b", x.get("b")))
        pairs[key] = Band(_number(src, f"{at}.band", x.get("band")), int(x.get("pairs") or 0))
    return PairedBands(Band(_number(src, f"{where}.band", p.get("band")), int(p.get("runs") or 0)),
                       _families(src, f"{where}.families", p.get("families") or []),
                       Band(_number(src, f"{where}.pair_band", p.get("pair_band")), int(p.get("pairs_count") or 0)),
                       pairs, _number(src, f"{where}.mean_factor", p.get("mean_factor", 1.0)))


def parse_bands(text: str, src: str) -> ErrorBands:
    """Read the YAML of ``bands_yaml`` (one-line errors naming the field)."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or not isinstance(data.get("backends"), dict):
        raise input_error(src, "backends", "required: a mapping of backend name to its bands")
    backends = {}
    for name, b in data["backends"].items():
        where = f"backends.{name}"
        if not isinstance(b, dict):
            raise input_error(src, where, "must be a mapping")
        cost = b.get("relative_cost")
        paired = None if b.get("paired") is None else _parse_paired(src, f"{where}.paired", b["paired"])
        backends[str(name)] = BackendBands(Band(_number(src, f"{where}.band", b.get("band")), int(b.get("runs") or 0)),
                                           _families(src, f"{where}.families", b.get("families") or []),
                                           None if cost is None else _number(src, f"{where}.relative_cost", cost),
                                           paired)
    return ErrorBands(str(data.get("reference_backend", "packet")), backends, data.get("provenance") or {})


@functools.cache
def load_bands(path: str | None = None) -> ErrorBands:
    """The error bands of ``path``, or the packaged ``references/error_bands.yaml``."""
    if path is None:
        text = resources.files("moesim.analysis").joinpath("references", BANDS_FILE).read_text("utf-8")
        return parse_bands(text, BANDS_FILE)
    p = Path(path)
    if not p.is_file():
        raise MoesimError(f"{p}: error bands file not found")
    return parse_bands(p.read_text(encoding="utf-8"), str(p))


def row_keys(table: pa.Table, bands: ErrorBands) -> list[RowKey]:
    """Each row's (backend, family); the family is None on reference-backend rows (exact) and on rows
    without a backend column (backend "")."""
    if "backend" not in table.column_names:
        return [("", None)] * table.num_rows
    return [(str(r["backend"]), row_family(r) if r["backend"] != bands.reference else None)
            for r in table.to_pylist()]


def row_bands(table: pa.Table, bands: ErrorBands) -> list[float | None]:
    """Each row's relative error band (0 for reference-backend rows; None for a backend without bands)."""
    return [None if not backend else bands.band(backend, fam) for backend, fam in row_keys(table, bands)]
