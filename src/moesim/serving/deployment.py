"""A serving deployment: which replicas run on which servers of a cluster, with which split.

Colocated, the cluster's servers hold ``servers / replica servers`` identical replicas, each serving
prefill and decode. Disaggregated (DistServe, Splitwise), the first ``P`` servers hold prefill replicas
and the next ``D`` servers decode replicas, each side with its own split. A replica runs on whole
servers, and its step costs are simulated on a cluster of its own size built from the same server
template and fabric (``hgx-h100:4`` → a 2-server replica on ``hgx-h100:2``; ``star:N`` → ``star:k``):
its collectives see only its own traffic. Other topologies (the study's, YAML files) hold one replica.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol, cast, overload

from moesim.errors import MoesimError
from moesim.system.run import check_override
from moesim.system.spec import RunSpec
from moesim.topology.catalog import parse_topology, star_hosts
from moesim.workload.layout import ParallelLayout

ROLES = BOTH, PREFILL, DECODE = ("both", "prefill", "decode")
"""What a replica serves: everything (colocated), only prefills, only decode steps (disaggregated)."""


class _HasRun(Protocol):
    @property
    def run(self) -> RunSpec: ...


class OfRun:
    """A read-only attribute that is the same field of the object's ``run`` (its RunSpec template):
    ``topology = OfRun()`` makes ``obj.topology`` ``obj.run.topology``."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> OfRun: ...
    @overload
    def __get__(self, obj: _HasRun, owner: type | None = None) -> str: ...

    def __get__(self, obj: _HasRun | None, owner: type | None = None) -> OfRun | str:
        return self if obj is None else cast(str, getattr(obj.run, self.name))


@dataclass(frozen=True)
class ReplicaKind:
    """Everything a replica's step costs depend on: the run of one step on the replica's own cluster."""

    run: RunSpec
    """The step runs' template: the replica's own cluster (``sub_topology``), its split, the deployment's
    run factors and overrides."""

    topology = OfRun()
    strategy = OfRun()

    @property
    def dp_ranks(self) -> int:
        """Attention ranks of a data-parallel-attention split (``DP<d>EP<e>``: d), else 1: each holds its own
        requests and KV cache, and a step's grid run carries that many ranks' equal batches."""
        layout = ParallelLayout.parse(self.strategy)
        if layout.dp_attention and layout.tp > 1:
            raise MoesimError(f"serve: strategy {self.strategy}: data-parallel attention is served with one GPU per "
                              f"attention rank (DP<n>EP<n>, e.g. DP{layout.ep}EP{layout.ep}); TP inside a rank is "
                              "not (its step grid has batches of 1 and 2 sequences per rank)")
        return layout.dp if layout.dp_attention else 1

    def spec(self, **step: Any) -> RunSpec:
        """The RunSpec of one step (``tokens=T`` for a prefill pass; ``phase="decode", batch=B,
        context_tokens=C`` for a decode step) with the deployment's overrides."""
        return dataclasses.replace(self.run, overrides=tuple(sorted((dict(self.run.overrides) | step).items())))


@dataclass(frozen=True)
class Replica:
    """One replica: its role, kind and the cluster GPUs it occupies (contiguous, server-major)."""

    index: int
    role: str
    kind: ReplicaKind
    gpus: tuple[int, ...]


def cluster_shape(topology: str) -> tuple[int, int]:
    """(servers, GPUs per server) of a topology name or file, without building it."""
    ref = parse_topology(topology)
    return ref.servers, ref.gpus_per_server


def sub_topology(topology: str, servers: int) -> str:
    """The name of a cluster of ``servers`` servers of ``topology``'s kind (template and fabric kept)."""
    ref = parse_topology(topology)
    if servers != ref.servers and star_hosts(topology) is not None and servers < 2:
        raise MoesimError(f"topology {topology}: a replica of one host cannot be simulated on its own "
                          "(star:N takes N ≥ 2); use replicas of 2 or more GPUs")
    return ref.with_servers(servers).name


def _servers_of(strategy: str, topology: str, source: str) -> int:
    """How many whole servers a replica of ``strategy`` takes on ``topology``."""
    _, per_server = cluster_shape(topology)
    gpus = ParallelLayout.parse(strategy).num_ranks
    if gpus % per_server:
        raise MoesimError(f"{source}: strategy {strategy}: a replica takes whole servers; {gpus} GPUs is not a "
                          f"multiple of the {per_server} GPUs per server of {topology}")
    return gpus // per_server


@dataclass(frozen=True, init=False)
class Deployment:
    """The deployment of one model on one cluster. ``disaggregate`` = (prefill servers, decode servers),
    None for colocated replicas; ``prefill_strategy`` is the prefill side's split (default the run's)."""

    run: RunSpec
    """The step runs' template: the model, the whole cluster, the decode side's split (every replica's,
    colocated), and the run factors and overrides every step shares."""
    disaggregate: tuple[int, int] | None = None
    prefill_strategy: str | None = None

    def __init__(self, run: RunSpec | str, topology: str | None = None, strategy: str | None = None, *,
                 disaggregate: tuple[int, int] | None = None, prefill_strategy: str | None = None,
                 **factors: Any) -> None:
        """``Deployment(RunSpec(...), disaggregate=...)``, or the template's fields given one by one:
        ``Deployment(model, topology, strategy, backend="flow", ...)`` (RunSpec's defaults for the rest)."""
        if not isinstance(run, RunSpec):
            if topology is None or strategy is None:
                raise MoesimError("Deployment: give a RunSpec, or a model, a topology and a strategy")
            run = RunSpec(run, topology, strategy, **factors)
        elif topology is not None or strategy is not None or factors:
            raise MoesimError("Deployment: a RunSpec template already holds the run's fields")
        for key, _ in run.overrides:
            if key in ("tokens", "phase", "batch", "context_tokens", "decode_steps", "placement"):
                raise MoesimError(f"--set {key}: set by the serving simulator for each step; leave it out")
        # checked and in canonical form (lists as tuples): the overrides key the step-cost grids
        run = dataclasses.replace(run, strategy=ParallelLayout.parse(run.strategy).name, overrides=tuple(
            (k, check_override(k, v, "--set")) for k, v in run.overrides))
        given = dict(run.overrides)
        if given.get("overlap", "none") != "none" or "micro_batches" in given:
            raise MoesimError(f"--set {'overlap' if 'overlap' in given else 'micro_batches'}: serving does not model "
                              "two-batch overlap: its steps go down to one prompt token and one decoding sequence, "
                              "which do not split into micro-batches, and a step's cost is interpolated over that "
                              "whole range; compare overlaps on single passes with moesim run --set overlap=two-batch")
        object.__setattr__(self, "run", run)
        object.__setattr__(self, "disaggregate", disaggregate)
        object.__setattr__(self, "prefill_strategy", None if prefill_strategy is None
                           else ParallelLayout.parse(prefill_strategy).name)

    model = OfRun()
    topology = OfRun()
    strategy = OfRun()
    backend = OfRun()

    @property
    def mode(self) -> str:
        return "colocated" if self.disaggregate is None else "disaggregated"

    @property
    def prefill_split(self) -> str:
        return self.prefill_strategy or self.strategy

    def kind(self, strategy: str, servers: int) -> ReplicaKind:
        return ReplicaKind(dataclasses.replace(self.run, topology=sub_topology(self.topology, servers),
                                               strategy=strategy))

    def replicas(self) -> tuple[Replica, ...]:
        """Every replica with its GPUs; a one-line error when the split does not fill the servers."""
        total, per_server = cluster_shape(self.topology)
        source = f"deployment {self.label()}"
        if self.disaggregate is None:
            sides = [(BOTH, self.strategy, 0, total)]
        else:
            p, d = self.disaggregate
            if p < 1 or d < 1 or p + d != total:
                raise MoesimError(f"{source}: --disaggregate {p}:{d} must split the {total} servers of "
                                  f"{self.topology} into prefill:decode servers, each at least 1")
            sides = [(PREFILL, self.prefill_split, 0, p), (DECODE, self.strategy, p, d)]
        out: list[Replica] = []
        for role, strategy, first, servers in sides:
            size = _servers_of(strategy, self.topology, source)
            if servers % size:
                side = "" if role == BOTH else f"{role} "
                raise MoesimError(f"{source}: strategy {strategy} takes {size} servers per replica, which does not "
                                  f"divide the {servers} {side}servers")
            kind = self.kind(strategy, size)
            gpus = size * per_server
            for k in range(servers // size):
                start = (first + k * size) * per_server
                out.append(Replica(len(out), role, kind, tuple(range(start, start + gpus))))
        return tuple(out)

    @property
    def num_gpus(self) -> int:
        servers, per_server = cluster_shape(self.topology)
        return servers * per_server

    def label(self) -> str:
        if self.disaggregate is None:
            return f"{self.strategy} colocated on {self.topology}"
        p, d = self.disaggregate
        return f"{self.prefill_split} prefill ×{p} : {self.strategy} decode ×{d} servers on {self.topology}"

    def as_dict(self) -> dict[str, Any]:
        """The run template's fields, then ``disaggregate``, ``prefill_strategy`` and ``mode`` (flat: the
        serving store's columns and the result keys)."""
        return {**dataclasses.asdict(self.run), "overrides": dict(self.run.overrides), "disaggregate":
                self.disaggregate, "prefill_strategy": self.prefill_strategy, "mode": self.mode}
