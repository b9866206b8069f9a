"""Up-front checking of every run and its input hash (the results-store key).

``plan_runs`` resolves each run's inputs with ``moesim.system.run.prepare`` before anything is
simulated, so an impossible combination (TP × EP ≠ the topology's GPUs, EP not dividing the experts,
a bad override) is reported at once. The input hash is a sha256 of the canonical RunSpec, the moesim
version and the resolved inputs (model spec — so an edited model file counts —, topology links,
network parameters, system settings): change any of them and the run is redone; otherwise a rerun
finds it in the store. Editing the simulator's code without changing the version is not seen (a
source tree changes all the time); each row records ``source_sha256`` (:func:`code_hash`) in its
parameters, and ``moesim sweep ... --rerun`` redoes everything.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moesim import __version__
from moesim.errors import MoesimError
from moesim.system.spec import RunSpec

# Code outside the simulation path: editing it does not change a result, so it does not re-run a sweep.
_NOT_SIMULATION = ("analysis", "experiments", "commands", "cli.py")


@dataclass(frozen=True)
class PlannedRun:
    """A run that passed the up-front checks. ``run_id`` is its input hash."""

    spec: RunSpec
    run_id: str


@functools.cache
def code_hash() -> str:
    """sha256 over the simulator's source and data files (provenance recorded with every row)."""
    import moesim

    root = Path(moesim.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if not path.is_file() or path.suffix not in (".py", ".yaml", ".yml", ".proto", ".json"):
            continue
        if rel.split("/")[0] in _NOT_SIMULATION or "__pycache__" in rel:
            continue
        h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


_TOPOLOGY_HASHES: dict[int, tuple[Any, str]] = {}


def _topology_hash(topology: Any) -> str:
    """Hash of a built topology's nodes, links, GPUs and metadata (cached per built instance)."""
    cached = _TOPOLOGY_HASHES.get(id(topology))
    if cached is not None and cached[0] is topology:
        return cached[1]
    text = repr((topology.nodes, topology.links, topology.gpus, topology.meta))
    digest = hashlib.sha256(text.encode()).hexdigest()
    _TOPOLOGY_HASHES[id(topology)] = (topology, digest)  # keeps the instance alive so its id stays unique
    return digest


def resolved_inputs(spec: RunSpec, diagnostics: bool = False) -> dict[str, Any]:
    """Everything a run's result depends on, as JSON-able data (raises MoesimError for an impossible run)."""
    from moesim.system.run import prepare

    model, layout, params, topology, _workload, settings, backend_cls, tokens = prepare(spec)
    return {
        "spec": json.loads(spec.key()),
        "version": __version__,
        "model": dataclasses.asdict(model),
        "layout": dataclasses.asdict(layout),
        "network": params.as_dict(),
        "topology": _topology_hash(topology),
        "system": dataclasses.asdict(settings),
        "backend": f"{backend_cls.__module__}.{backend_cls.__qualname__}",
        "tokens": tokens,
        "diagnostics": diagnostics,
    }


def input_hash(spec: RunSpec, diagnostics: bool = False) -> str:
    """sha256 (hex) of :func:`resolved_inputs` in canonical JSON."""
    text = json.dumps(resolved_inputs(spec, diagnostics), sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def run_label(spec: RunSpec) -> str:
    """A short human label: ``deepseek-v4-flash/1/TP2EP16/ring_direct/ib_cc0`` (+ backend, overrides)."""
    parts = [Path(spec.model).stem if "/" in spec.model else spec.model,
             Path(spec.topology).stem if "/" in spec.topology else spec.topology,
             spec.strategy, spec.algorithm, spec.network]
    label = "/".join(parts)
    if spec.backend != RunSpec.__dataclass_fields__["backend"].default:
        label += f" [{spec.backend}]"
    if spec.overrides:
        label += " " + ",".join(f"{k}={v}" for k, v in spec.overrides)
    return label


def plan_runs(specs: Sequence[RunSpec], diagnostics: bool = False, source: str = "matrix") -> list[PlannedRun]:
    """Check every run and hash its inputs; all impossible runs are reported in one error, before any runs."""
    planned: list[PlannedRun] = []
    failures: list[tuple[RunSpec, str]] = []
    for spec in specs:
        try:
            planned.append(PlannedRun(spec, input_hash(spec, diagnostics)))
        except MoesimError as exc:
            failures.append((spec, str(exc)))
    if failures:
        by_message = Counter(msg for _, msg in failures)
        examples = []
        for msg, count in by_message.most_common(3):
            first = next(s for s, m in failures if m == msg)
            examples.append(f"{run_label(first)}: {msg}" + (f" (and {count - 1} more like it)" if count > 1 else ""))
        more = len(by_message) - len(examples)
        raise MoesimError(
            f"{source}: {len(failures)} of {len(specs)} runs are impossible combinations, nothing was run; "
            + "; ".join(examples) + (f"; {more} other problems" if more > 0 else "")
            + " (change the levels or add an exclude entry)"
        )
    return planned
