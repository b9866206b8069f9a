"""Measured error bands: how far each backend's wall times lie from packet level, by family of runs.

A backend's error on one run is |backend / reference − 1|, the reference being the packet backend. What
decides that error is the run's *family* (``Family``): the TP all-reduce algorithm, whether its traffic
stays inside one server, and — for runs whose flows can carry congestion control — the network mode.
The band of a family is the ``QUANTILE`` (90th percentile) of the errors of its reference runs: nine runs
in ten of the family lie inside it. Each reference (the 192-run V4 Flash matrix at 4096 tokens, the
validation sets at 256 and 1024 tokens) is measured apart and the larger quantile kept, so the band holds
at each scale. A family with fewer than ``MIN_FAMILY_RUNS`` runs in every reference has no stable 90th
percentile; it gets the larger of its worst run and the backend-wide band, so a small family is never
taken as better than the backend overall nor as better than its own worst run. A run of a family the
references do not hold gets the backend-wide band.

The bands ship as ``references/error_bands.yaml``, written by ``python benchmarks/accuracy.py bands``
from the stored packet references (its header says which references, code and command produced it), and
are read by ``moesim.analysis.confidence`` to tell resolved orderings from unresolved ones.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class BackendBands:
    """One backend's bands: backend-wide, per family, and its cost relative to the reference backend."""

    overall: Band
    families: Mapping[Family, Band] = field(default_factory=dict)
    relative_cost: float | None = None
    """Simulation time of this backend over that of the reference on the same runs (None: not measured)."""

    def band(self, family: Family | None) -> float:
        found = self.families.get(family) if family is not None else None
        return (found or self.overall).band


Errors = Sequence[tuple[Family | None, float]]
"""One reference's per-run errors of a backend: (family, backend / packet − 1)."""


def _quantile(errs: Sequence[float]) -> float:
    return float(np.quantile(np.abs(np.array(errs, dtype=float)), QUANTILE))


def measure(references: Sequence[Errors], relative_cost: float | None = None) -> BackendBands:
    """One backend's bands from its errors against each reference (a set of runs at one scale).

    Backend-wide and per family, the band is the largest ``QUANTILE`` over the references that hold at least
    ``MIN_FAMILY_RUNS`` runs of it, so it holds at each reference's scale; a family no reference holds that
    often gets the larger of its worst run (over all references) and the backend-wide band."""
    usable = [r for r in references if r]
    if not usable:
        raise MoesimError("error bands: no run of the backend matches a reference run")
    overall = Band(max(_quantile([e for _, e in r]) for r in usable), sum(len(r) for r in usable))
    per_ref: dict[Family, list[list[float]]] = {}
    for i, r in enumerate(usable):
        for fam, e in r:
            if fam is not None:
                per_ref.setdefault(fam, [[] for _ in usable])[i].append(abs(e))
    families = {}
    for fam, samples in sorted(per_ref.items()):
        n = sum(len(s) for s in samples)
        big = [_quantile(s) for s in samples if len(s) >= MIN_FAMILY_RUNS]
        families[fam] = Band(max(big), n) if big else Band(max(max(max(s, default=0.0) for s in samples),
                                                               overall.band), n)
    return BackendBands(overall, families, relative_cost)


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
        p = self.provenance
        return (f"A row's band is the {QUANTILE:.0%} quantile of its backend's error against {self.reference} level "
                f"in its family (TP all-reduce algorithm, inside or between servers, network mode): "
                + "; ".join(parts) + f". Measured on {p.get('date', '?')} at commit {str(p.get('commit', '?'))[:12]} "
                f"by `{p.get('command', '?')}` ({BANDS_FILE}).")

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


def bands_yaml(bands: ErrorBands) -> str:
    """The YAML text of ``bands`` (bands rounded to 0.01 %), its provenance first."""
    data = {"provenance": dict(bands.provenance), "reference_backend": bands.reference,
            "statistic": f"per backend and family: the largest {QUANTILE:.0%} quantile of |backend / "
                         f"{bands.reference} - 1| over the references with at least {MIN_FAMILY_RUNS} runs of it; "
                         "otherwise the larger of its worst run and the backend-wide band",
            "backends": {name: {"relative_cost": None if b.relative_cost is None else float(f"{b.relative_cost:.2g}"),
                                "band": round(b.overall.band, 4), "runs": b.overall.runs,
                                "families": [_family_dict(f, fb) for f, fb in b.families.items()]}
                         for name, b in bands.backends.items()}}
    head = ("# Measured error bands of the backends against packet level (moesim.analysis.bands).\n"
            "# Written by `python benchmarks/accuracy.py bands`; do not edit by hand.\n")
    return head + yaml.safe_dump(data, sort_keys=False, width=110, default_flow_style=None)


def _number(src: str, where: str, value: Any) -> float:
    if not isinstance(value, int | float) or value < 0:
        raise input_error(src, where, f"must be a number >= 0, got {value!r}")
    return float(value)


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
        fams = {}
        for i, f in enumerate(b.get("families") or []):
            try:
                fam = Family(str(f["algorithm"]), str(f["scope"]), str(f["network"]))
            except (KeyError, TypeError):
                raise input_error(src, f"{where}.families[{i}]", "needs algorithm, scope, network, band, runs") from None
            fams[fam] = Band(_number(src, f"{where}.families[{i}].band", f.get("band")), int(f.get("runs") or 0))
        cost = b.get("relative_cost")
        backends[str(name)] = BackendBands(Band(_number(src, f"{where}.band", b.get("band")), int(b.get("runs") or 0)),
                                           fams, None if cost is None else _number(src, f"{where}.relative_cost", cost))
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


def row_bands(table: pa.Table, bands: ErrorBands) -> list[float | None]:
    """Each row's relative error band (0 for reference-backend rows; None for a backend without bands)."""
    if "backend" not in table.column_names:
        return [None] * table.num_rows
    rows = table.to_pylist()
    return [bands.band(str(r["backend"]), row_family(r) if r["backend"] != bands.reference else None) for r in rows]
