"""The placement study (``moesim sweep placement``): for every topology and strategy, the default mapping
against the best one the placement search finds, both run into one results store.

Each (topology, strategy) is searched once (``placement_search``, on the scoring backend); the searches'
outcomes are kept in ``DIR/placement_searches.json`` (written atomically after each search), so an
interrupted study resumes without searching again. The runs then go through the ordinary sweep runner:
two per pair, with the ``placement`` factor ``contiguous`` and the best mapping (one run when the default is
the best).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moesim.experiments.placement_search import SearchSpec, search_placement
from moesim.experiments.runner import SweepSummary, run_sweep
from moesim.fileio import atomic_write
from moesim.schema import default_of
from moesim.system.spec import RunSpec
from moesim.version import __version__

SEARCHES_FILE = "placement_searches.json"
STUDY_TOPOLOGIES = ("1", "2", "3", "4", "5", "6")
STUDY_STRATEGIES = ("TP2EP16", "TP4EP8", "TP8EP4", "TP16EP2")


@dataclass(frozen=True)
class PlacementStudy:
    """What the study runs: the pairs, how each is searched, and how the runs are simulated."""

    model: str = "deepseek-v4-flash"
    topologies: tuple[str, ...] = STUDY_TOPOLOGIES
    strategies: tuple[str, ...] = STUDY_STRATEGIES
    algorithm: str = default_of(RunSpec, "algorithm")
    network: str = "roce_dcqcn"
    search_backend: str = "flow"
    backend: str = default_of(RunSpec, "backend")
    evaluations: int = 16
    seed: int = 0
    overrides: tuple[tuple[str, Any], ...] = ()

    def search_key(self, topology: str, strategy: str) -> str:
        """The key of one search in the searches file: every input that changes its outcome."""
        return json.dumps([__version__, self.model, topology, strategy, self.algorithm, self.network,
                           self.search_backend, self.evaluations, self.seed, list(map(list, self.overrides))])


def _load(path: Path) -> dict[str, list[int]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def study_specs(study: PlacementStudy, out_dir: str | Path, executor: str = "local", workers: int | None = None,
                address: str | None = None, say: Callable[[str], None] | None = None) -> list[RunSpec]:
    """Search every pair not yet in the searches file, and return the study's runs (default, best)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / SEARCHES_FILE
    found = _load(path)
    specs: list[RunSpec] = []
    for topology in study.topologies:
        for strategy in study.strategies:
            key = study.search_key(topology, strategy)
            base = RunSpec(study.model, topology, strategy, study.algorithm, study.network, study.search_backend,
                           study.overrides)
            if key not in found:
                result = search_placement(SearchSpec(base, evaluations=study.evaluations, seed=study.seed,
                                                     rescore_backend=None),
                                          executor=executor, workers=workers, address=address)
                found[key] = list(result.best.rank_to_gpu)
                atomic_write(path, json.dumps(found, indent=1, sort_keys=True))
                if say is not None:
                    say(f"searched topology {topology} {strategy}: best {result.best.origin}, "
                        f"{100 * result.gain:.1f} % faster on {study.search_backend}")
            best = tuple(found[key])
            for placement in ("contiguous", ",".join(map(str, best))):
                if placement != "contiguous" and best == tuple(range(len(best))):
                    continue
                over = dict(study.overrides)
                over["placement"] = placement
                specs.append(RunSpec(study.model, topology, strategy, study.algorithm, study.network, study.backend,
                                     tuple(sorted(over.items()))))
    return specs


def run_placement_study(study: PlacementStudy, out_dir: str | Path, executor: str = "local",
                        workers: int | None = None, address: str | None = None, progress: str = "auto",
                        say: Callable[[str], None] | None = None, **sweep_options: Any) -> SweepSummary:
    """Search, then run the default and best mappings of every pair into the store in ``out_dir``."""
    specs: Sequence[RunSpec] = study_specs(study, out_dir, executor, workers, address, say)
    return run_sweep(specs, out_dir, executor=executor, workers=workers, address=address, progress=progress,
                     source="placement study", **sweep_options)
