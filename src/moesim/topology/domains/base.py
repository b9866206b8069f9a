"""GPU interconnect domains: the GPU ↔ GPU network inside a server (NVLink/NVSwitch, Infinity Fabric).

A domain is declared once per server template (YAML ``server.gpu_domain``) and expands into devices
and ``nvlink`` cables when the server is instantiated. Traffic between two GPUs of one domain takes
the domain's links (``Topology.routes``). To add a domain kind: one module with a frozen dataclass
subclass of ``GpuDomain``, decorated with ``@GPU_DOMAINS.register(kind, description, reference)``,
imported in ``__init__.py``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from moesim.errors import input_error
from moesim.registry import Registry
from moesim.topology.fabrics.base import check_keys
from moesim.topology.model import NodeKind
from moesim.topology.units import format_bandwidth, format_delay, parse_bandwidth_bps, parse_delay_s

if TYPE_CHECKING:
    from moesim.topology.builder import CableSpec

DOMAIN_KEYS = ("kind", "bandwidth", "delay")


class GpuDomain(ABC):
    """A GPU ↔ GPU interconnect: ``bandwidth_bps`` per direction of each of its cables, ``delay_s`` one way."""

    kind: ClassVar[str]
    bandwidth_bps: float
    delay_s: float

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str) -> GpuDomain:
        """Parse the YAML ``server.gpu_domain`` section (``kind`` already checked); unknown keys are errors."""
        check_keys(data, DOMAIN_KEYS, source, "server.gpu_domain")
        for key in ("bandwidth", "delay"):
            if key not in data:
                raise input_error(source, f"server.gpu_domain.{key}", "missing", DOMAIN_KEYS)
        return cls(parse_bandwidth_bps(data["bandwidth"], source, "server.gpu_domain.bandwidth"),  # type: ignore[call-arg]
                   parse_delay_s(data["delay"], source, "server.gpu_domain.delay"))

    def to_dict(self) -> dict[str, Any]:
        """The YAML section, ``kind`` first; ``from_dict(to_dict())`` gives back an equal domain."""
        return {"kind": self.kind, "bandwidth": format_bandwidth(self.bandwidth_bps),
                "delay": format_delay(self.delay_s)}

    @abstractmethod
    def devices(self) -> dict[str, NodeKind]:
        """Devices the domain adds to each server (name → kind)."""

    @abstractmethod
    def cables(self, gpus: tuple[str, ...]) -> tuple[CableSpec, ...]:
        """The domain's cables among ``gpus`` (template GPU names) and its own devices."""

    @abstractmethod
    def describe(self) -> str:
        """One line for listings, e.g. "NVSwitch, 3600 Gbps per GPU"."""


GPU_DOMAINS: Registry[type[GpuDomain]] = Registry("GPU domain")
