"""The contract every network backend offers the system layer, its optional fast-forward capability, and
the registry of backends.

The event loop starts flows, asks for the time of the next completion and advances time; it never
knows which backend it drives. A flow completes when its sender holds the final acknowledgement
(docs/reference-semantics.md A.1, "Sender on ACK"). Times are seconds (float).

What a backend can do beyond the contract is declared once, in ``capabilities`` next to its
registration, so callers read a capability instead of probing methods or testing the backend's name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, runtime_checkable

from moesim.network.params import SECTIONS, NetworkParams
from moesim.registry import Registry
from moesim.topology.model import Topology

if TYPE_CHECKING:
    from moesim.network.diagnostics import DiagnosticsSpec

FlowState = dict[int, tuple[tuple[float, ...], tuple[float, ...]]]
"""Per flow a backend holds: (durations in s relative to now, magnitudes such as bytes left and rate)."""


class Flow(NamedTuple):
    """A message between two GPUs. ``cc`` is False when the per-flow policy exempts it from congestion control.
    (A named tuple: one is made per transfer, and a tuple is built several times faster than a frozen
    dataclass.)"""

    flow_id: int
    src_gpu: int
    dst_gpu: int
    size_bytes: int
    cc: bool = True


@dataclass(frozen=True)
class Capabilities:
    """What a backend does beyond the contract (declared by each backend class, read by callers)."""

    congestion_control: bool = False
    """It models congestion control: ``cc_mode`` and the CC parameters change its results."""
    diagnostic_tables: bool = False
    """Given a ``DiagnosticsSpec`` it records the requested tables (FCT, PFC, queue samples, port bytes)."""
    fast_forward_in_flight: bool = False
    """It implements ``FastForward`` with flows in flight (describes them and shifts them in time); every
    backend supports the idle case, so layer fast-forward without it only jumps while the network is idle."""
    sections: tuple[str, ...] = tuple(SECTIONS)
    """The ``NetworkParams`` sections it reads (by attribute name; with ``congestion_control`` it also
    reads the CC algorithm's own parameters). Runs differing only in other sections are one simulation
    (``moesim.network.params.effective_params``), so a backend must list every section it reads."""
    packet_level: bool = False
    """It simulates packets and a queue pair per message, so results that hang on packet order are in it:
    each message starting at line rate cuts the rate-controlled flows sharing its hop (docs/reference-runs.md S9)."""


@runtime_checkable
class FastForward(Protocol):
    """The optional capability layer fast-forward uses (docs/system.md): compare the network's state
    between layer starts, then move it in time. ``NetworkBackend`` implements it for an idle network;
    a backend declaring ``fast_forward_in_flight`` implements it with flows in flight."""

    flow_state_is_complete: bool
    """False when ``flow_state`` only summarises what is in flight (queued packets are not in it): two
    states with flows in flight are then never taken as exactly equal."""

    @property
    def active_flows(self) -> int:
        """Flows started and not yet reported complete."""
        ...

    @property
    def random_draws(self) -> int:
        """Random numbers drawn so far that can change results (e.g. ECN marks a CC algorithm reacts
        to). Their state is not in ``flow_state``, so a layer that drew any is not known to repeat."""
        ...

    def flow_state(self, now_s: float) -> FlowState | None:
        """Per flow the backend still holds: (durations in s relative to ``now_s``, magnitudes such as
        bytes left and rate); ``None`` when it cannot describe its flows in flight."""
        ...

    def shift_time(self, delta_s: float) -> None:
        """Move every absolute time the backend holds forward by ``delta_s``."""
        ...

    def next_completion_s(self, horizon_s: float | None = None) -> float:
        """As in ``NetworkBackend``."""
        ...


class NetworkBackend(ABC):
    """Start flows, report the next completion time, advance to a time returning completed flow ids.

    Every backend is built as ``cls(topology, params, diagnostics=None)``; ``diagnostics`` selects the
    tables of a backend with ``capabilities.diagnostic_tables`` and is ignored by the others.
    """

    capabilities: ClassVar[Capabilities] = Capabilities()
    steps: int = 0
    """Integration steps taken so far (a time-stepped backend's, e.g. the fluid one's; 0 for the others)."""

    def __init__(self, topology: Topology, params: NetworkParams,
                 diagnostics: DiagnosticsSpec | None = None) -> None:
        self.topology = topology
        self.params = params

    @abstractmethod
    def start_flow(self, flow: Flow, now_s: float) -> None:
        """Inject ``flow`` at time ``now_s`` (never earlier than the last ``advance_to``)."""

    def start_flows(self, flows: list[Flow], now_s: float) -> None:
        """Inject ``flows`` at ``now_s``, as ``start_flow`` on each in order would (a backend may do it faster)."""
        for flow in flows:
            self.start_flow(flow, now_s)

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
    @abstractmethod
    def active_flows(self) -> int:
        """Flows started and not yet reported complete."""

    def diagnostics(self) -> dict[str, Any]:
        """Per-run diagnostics (bytes per link, and the requested tables where the backend records them)."""
        return {}

    def parameters(self) -> dict[str, Any]:
        """Values the backend used beyond ``params`` (recorded with every result); none by default."""
        return {}

    # ---------------------------------------------------------------- FastForward, for an idle network
    flow_state_is_complete = True

    @property
    def random_draws(self) -> int:
        return 0

    def flow_state(self, now_s: float) -> FlowState | None:
        return {} if self.active_flows == 0 else None

    def shift_time(self, delta_s: float) -> None:
        if self.active_flows:
            raise NotImplementedError(f"{type(self).__name__} cannot shift time with flows in flight")


BACKENDS: Registry[type[NetworkBackend]] = Registry("network backend")


def models_congestion_control(backend: str) -> bool:
    """Whether the registered backend ``backend`` models congestion control (unknown names: False)."""
    import moesim.network  # noqa: F401  (registers the built-in backends)

    return backend in BACKENDS and BACKENDS.get(backend).capabilities.congestion_control


def congestion_control_backends() -> list[str]:
    """Names of the registered backends that model congestion control."""
    import moesim.network  # noqa: F401

    return [e.name for e in BACKENDS if e.obj.capabilities.congestion_control]
