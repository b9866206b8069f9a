"""The interface every network backend offers the system layer (DESIGN.md), and their registry.

The event loop starts flows, asks for the time of the next completion and advances time; it never
knows which backend it drives. A flow completes when its sender holds the final acknowledgement
(REFERENCE_SEMANTICS.md A.1, "ASTRA completion semantics"). Times are seconds (float).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from moesim.network.params import NetworkParams
from moesim.registry import Registry
from moesim.topology.model import Topology


@dataclass(frozen=True)
class Flow:
    """A message between two GPUs. ``cc`` is False when the per-flow policy exempts it from congestion control."""

    flow_id: int
    src_gpu: int
    dst_gpu: int
    size_bytes: int
    cc: bool = True


class NetworkBackend(ABC):
    """Start flows, report the next completion time, advance to a time returning completed flow ids."""

    models_congestion_control = False
    """Whether congestion control (rates, ECN/CNPs, INT, PFC) changes this backend's results; a backend
    without it gives every network mode the same answer up to delays and header bytes, so comparisons
    between network modes made on it are not findings."""

    def __init__(self, topology: Topology, params: NetworkParams) -> None:
        self.topology = topology
        self.params = params

    @abstractmethod
    def start_flow(self, flow: Flow, now_s: float) -> None:
        """Inject ``flow`` at time ``now_s`` (never earlier than the last ``advance_to``)."""

    @abstractmethod
    def next_completion_s(self, horizon_s: float | None = None) -> float:
        """Time of the next backend event (a flow completion or an internal rate change) given the flows
        started so far; ``math.inf`` if none. A ``horizon_s`` (the engine's next own event, maybe
        ``math.inf``) promises that no flow starts before the earlier of it and the answer, so a backend
        may stop looking ahead there and need not keep a way back; ``None`` promises nothing."""

    @abstractmethod
    def advance_to(self, t_s: float) -> list[int]:
        """Advance to ``t_s`` and return the ids of flows completed at or before it, in completion order."""

    @property
    def active_flows(self) -> int:
        return 0

    def diagnostics(self) -> dict[str, Any]:
        """Optional per-run diagnostics (bytes per link, FCT records, PFC events, queue samples)."""
        return {}

    @property
    def random_draws(self) -> int:
        """Random numbers drawn so far (e.g. for ECN marks). Their state is not in ``flow_state``, so a
        layer that drew any is not known to repeat: layer fast-forward then never takes it as exact."""
        return 0

    flow_state_is_complete = True
    """False when ``flow_state`` only summarises what is in flight (queued packets are not in it): layer
    fast-forward then never takes two states with flows in flight as exactly equal."""

    def flow_state(self, now_s: float) -> dict[int, tuple[tuple[float, ...], tuple[float, ...]]] | None:
        """Per flow the backend still holds: (durations in s relative to ``now_s``, magnitudes such as
        bytes left and rate). Layer fast-forward compares these between layers; ``None`` means the
        backend cannot describe its in-flight state, so fast-forward only jumps while it is idle."""
        return {} if self.active_flows == 0 else None

    def shift_time(self, delta_s: float) -> None:
        """Move every absolute time the backend holds forward by ``delta_s`` (layer fast-forward)."""
        if self.active_flows:
            raise NotImplementedError(f"{type(self).__name__} cannot shift time with flows in flight")


BACKENDS: Registry[type[NetworkBackend]] = Registry("network backend")

INF = math.inf


def models_congestion_control(backend: str) -> bool:
    """Whether the registered backend ``backend`` models congestion control (unknown names: False)."""
    import moesim.network  # noqa: F401  (registers the built-in backends)

    return backend in BACKENDS and BACKENDS.get(backend).models_congestion_control


def congestion_control_backends() -> list[str]:
    """Names of the registered backends that model congestion control."""
    import moesim.network  # noqa: F401

    return [e.name for e in BACKENDS if e.obj.models_congestion_control]
