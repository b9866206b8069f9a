"""What a run costs on a refine's target backend, estimated before it runs (``moesim refine --budget``).

A packet-level simulation spends its time on packet events and on the engine's work per rank and layer
(compute nodes, collective plans), both in the layers it does not fast-forward:

    seconds = simulated_share × (rank_layer_s × ranks × layers + hop_s × packet_hops)

* ``packet_hops``: the static traffic of the run's collectives (``moesim.system.traffic``: the bytes each
  algorithm sends, laid on the routes) summed over links, over the packet payload: known without simulating.
* ``simulated_share``: the share of layers not fast-forwarded, taken from the stored row being redone (its
  ``params_json``): the run on the target fast-forwards about as the same run did on the cheaper backend.
* ``rank_layer_s`` and ``hop_s``: measured on this machine by two calibration runs timed in CPU seconds (the
  same configuration at two token counts: the same layers, different packets), kept per machine and code in
  ``$XDG_CACHE_HOME/moesim/run-cost.json``, and turned into wall seconds by how busy the CPUs are when the
  plan is made (``contention``). Once the store holds rows on the target backend, ``hop_s`` is
  taken from them, per family of ``moesim.analysis.bands`` (so the estimate follows the refine's first runs).

On the 192 packet runs of the V4 Flash matrix the model is within 2× for most runs; a run whose fast-forward
fails on packet level though it held on the cheaper backend, or whose fabric pauses often, costs more
(``python benchmarks/accuracy.py refine-cost`` prints the distribution; docs/analysis.md).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from moesim.analysis.bands import Family, family_of, row_spec
from moesim.errors import MoesimError
from moesim.system.spec import RunSpec

CALIBRATION = (("deepseek-v4-flash", "2", "TP2EP16", "ring_direct", "roce_dcqcn"), (64, 512))
"""The calibration runs: one configuration at two token counts (about 0.6 and 2 s on packet level), after an
untimed warm-up run that loads (or compiles) the kernels."""
WARM_UP_TOKENS = 64
CACHE_FORMAT = "hop_s,rank_layer_s"
"""Part of the cache key: what the two cached numbers are."""


@dataclass(frozen=True)
class Work:
    """A run's work before fast-forward: data packets × links crossed, its ranks and layers."""

    packet_hops: float
    ranks: int
    layers: int

    @property
    def rank_layers(self) -> int:
        return self.ranks * self.layers


@functools.lru_cache(maxsize=4096)
def work(spec: RunSpec) -> Work:
    """The packet-hops of ``spec``'s whole run without fast-forward (module docstring), from its static traffic."""
    from moesim.system.run import prepare
    from moesim.system.traffic import workload_traffic

    p = prepare(spec)
    workload = p.workload()
    traffic = workload_traffic(workload, p.topology, p.placement.rank_to_gpu)
    layers = 1 + max((n.layer for g in workload.graphs for n in g.nodes), default=0)
    return Work(float(traffic.link_bytes.sum()) / p.params.transport.packet_payload_bytes, workload.num_ranks,
                max(layers, 1))


@functools.lru_cache(maxsize=4096)
def family(spec: RunSpec) -> Family:
    """``moesim.analysis.bands.family_of``, kept per spec: a refine plans again after each round."""
    return family_of(spec)


def simulated_share(row: Mapping[str, Any], layers: int) -> float:
    """The share of a stored run's layers that its simulation did not fast-forward (1 when not recorded)."""
    try:
        skipped = int(json.loads(row.get("params_json") or "{}").get("fast_forwarded_layers") or 0)
    except (ValueError, TypeError, AttributeError):
        skipped = 0
    return max(layers - skipped, 1) / layers


@dataclass(frozen=True)
class CostModel:
    """Seconds per packet-hop (per family, and over all) and per rank and simulated layer, on this machine."""

    hop_s: float
    rank_layer_s: float
    source: str
    """Where the figures come from, as the plan states it."""
    families: Mapping[Family, float] = field(default_factory=dict)

    def estimate_s(self, family: Family | None, w: Work, share: float) -> float:
        hop_s = self.families.get(family, self.hop_s) if family is not None else self.hop_s
        return share * (self.rank_layer_s * w.rank_layers + hop_s * w.packet_hops)


def _cache_file() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "moesim" / "run-cost.json"


def _cache_key(backend: str) -> str:
    from moesim.experiments.inputs import code_hash

    return f"{backend} {platform.node()} {code_hash()[:16]} {CACHE_FORMAT}"


def calibrate(backend: str, announce: Callable[[str], object] | None = None) -> tuple[float, float]:
    """(hop_s, rank_layer_s) of ``backend`` on this machine from the two calibration runs (the model through
    both of their times), cached per machine and code."""
    from moesim.fileio import atomic_write
    from moesim.system.run import prepare, simulate_prepared

    path, key = _cache_file(), _cache_key(backend)
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    hit = cached.get(key) if isinstance(cached, dict) else None
    if isinstance(hit, list) and len(hit) == 2:
        return float(hit[0]), float(hit[1])
    if announce is not None:
        announce(f"measuring the cost of a {backend} run on this machine (two calibration runs, once per machine "
                 "and code version)")
    config, tokens = CALIBRATION
    points = []
    for tok in (WARM_UP_TOKENS, *tokens):
        spec = RunSpec(*config, backend=backend, overrides=(("tokens", tok),))
        p = prepare(spec)
        t0 = time.process_time()  # CPU time: a machine busy with other work at this moment does not skew it
        sim = simulate_prepared(p)
        elapsed = time.process_time() - t0
        w = work(spec)
        share = max(w.layers - sim.fast_forwarded_layers, 1) / w.layers
        points.append((w.rank_layers * share, w.packet_hops * share, elapsed))
    (r1, h1, t1), (r2, h2, t2) = points[1:]
    det = r1 * h2 - r2 * h1  # t = rank_layer_s × r + hop_s × h through both points (Cramer's rule)
    hop_s = (r1 * t2 - r2 * t1) / det if det else t2 / h2
    if hop_s <= 0:  # timing noise: all of it per packet-hop
        hop_s = t2 / h2
    rank_layer_s = max((t1 - hop_s * h1) / r1, 0.0)
    mine = f"{backend} {platform.node()} "  # this machine's older entries (other code) are dropped
    cached = {k: v for k, v in cached.items() if not k.startswith(mine)} if isinstance(cached, dict) else {}
    cached[key] = [hop_s, rank_layer_s]
    try:
        atomic_write(path, json.dumps(cached, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass  # an unwritable cache only costs the calibration again
    return hop_s, rank_layer_s


def contention(cpu_s: float = 0.2) -> float:
    """Wall seconds per CPU second of a busy loop now (1 on an idle core; 2 when the cores are shared by twice
    as many busy processes): turns the calibration's CPU seconds into the wall time a run takes at present."""
    w0, c0 = time.perf_counter(), time.process_time()
    n = 0
    while time.process_time() - c0 < cpu_s:
        n += sum(range(1000))
    return max((time.perf_counter() - w0) / (time.process_time() - c0), 1.0)


@dataclass(frozen=True)
class Measured:
    """A stored run on the target backend: its family, work, the simulated share the plan would have assumed
    for it, and its measured seconds."""

    family: Family
    work: Work
    share: float
    seconds: float


def measured_rows(rows: Iterable[Mapping[str, Any]], backend: str) -> list[Measured]:
    """The successful rows on ``backend`` with a measured simulation time. Each one's share is the one a plan
    assumes: that of a row of the same run on another backend when the store has one (the row it was refined
    from), else its own. Rows that cannot be prepared any more (e.g. of a removed model file) are left out."""
    rows = list(rows)
    other = {replace(row_spec(r), backend=backend).key(): r for r in rows if r.get("backend") != backend}
    out = []
    for r in rows:
        if r.get("backend") != backend or r.get("status") not in (None, "ok") or not r.get("sim_wallclock_s"):
            continue
        spec = row_spec(r)
        try:
            w = work(spec)
            fam = family(spec)
        except MoesimError:
            continue
        out.append(Measured(fam, w, simulated_share(other.get(spec.key(), r), w.layers), float(r["sim_wallclock_s"])))
    return out


def cost_model(backend: str, rows: Iterable[Mapping[str, Any]],
               announce: Callable[[str], object] | None = None, where: str = "this store") -> CostModel:
    """The cost model of ``backend`` on this machine: the cost per rank and layer from the calibration (times
    the present ``contention``); per packet-hop from the store's rows on ``backend`` (per family, and over all for the other families: their
    seconds over their packet-hops, so the sum over many runs comes out right, and a family whose
    fast-forward fails more often on ``backend`` costs more), else from the calibration. ``where`` names the
    rows' origin in the model's ``source``."""
    busy = contention()
    hop_s, rank_layer_s = (busy * x for x in calibrate(backend, announce))
    found = measured_rows(rows, backend)
    if not found:
        return CostModel(hop_s, rank_layer_s, f"{backend} cost calibrated on this machine"
                         + (f", {busy:.1f}x for the CPUs busy now" if busy >= 1.05 else ""))

    def per_hop(ms: list[Measured]) -> float:
        spent = sum(max(m.seconds - rank_layer_s * m.work.rank_layers * m.share, 0.0) for m in ms)
        return spent / max(sum(m.work.packet_hops * m.share for m in ms), 1.0)

    per: dict[Family, list[Measured]] = {}
    for m in found:
        per.setdefault(m.family, []).append(m)
    return CostModel(per_hop(found), rank_layer_s, f"{backend} cost measured from {len(found)} {backend} "
                     f"run{'s' if len(found) > 1 else ''} of {where}", {f: per_hop(v) for f, v in per.items()})
