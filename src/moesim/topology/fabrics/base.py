"""The external fabric that joins the servers' NICs: one variant per module, registered in FABRICS.

A fabric reads its own YAML section (strictly), writes it back, and adds its switches and cables to
a ``TopologyBuilder``. To add a fabric: one module with a frozen dataclass subclass of ``Fabric``,
decorated with ``@FABRICS.register(kind, description, reference)``, imported in ``__init__.py``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from moesim.errors import input_error
from moesim.registry import Registry

if TYPE_CHECKING:
    from moesim.topology.builder import TopologyBuilder


class Fabric(ABC):
    """An external network. ``nic_delay_s`` None means: the run's NIC–switch delay (IB 0.7 µs, RoCE 1 µs)."""

    kind: ClassVar[str]

    @classmethod
    @abstractmethod
    def from_dict(cls, data: Mapping[str, Any], source: str) -> Fabric:
        """Parse the YAML ``fabric`` section (``kind`` already checked); unknown keys are errors."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The YAML ``fabric`` section, ``kind`` first; ``from_dict(to_dict())`` gives back an equal fabric."""

    @abstractmethod
    def attach(self, builder: TopologyBuilder, server_nics: list[list[str]], nic_delay_s: float) -> None:
        """Add switches and cables joining ``server_nics[s]`` (the NIC node names of server s)."""

    @abstractmethod
    def size(self, num_servers: int, nics_per_server: int) -> tuple[int, int]:
        """(switches, cables) that ``attach`` adds for this many servers: checked against the builder's
        limits before anything is built."""

    def describe(self) -> str:
        return self.kind


FABRICS: Registry[type[Fabric]] = Registry("fabric")


def check_keys(data: Mapping[str, Any], allowed: tuple[str, ...], source: str, field: str) -> None:
    """Reject unknown keys with a message listing the allowed ones."""
    for key in data:
        if key not in allowed:
            raise input_error(source, f"{field}.{key}" if field else str(key), "unknown key", allowed)
