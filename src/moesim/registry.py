"""A small named registry used by every pluggable kind (collectives, backends, CC algorithms, topologies).

Each variant lives in its own module and registers itself with a name, a one-line description and a
reference (paper, spec or source it follows), in the style of SimGrid's model registrations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from moesim.errors import MoesimError

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered variant."""

    name: str
    description: str
    reference: str
    obj: T


class Registry(Generic[T]):
    """Name → variant map for one pluggable kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}
        self._closed = ""

    def register(self, name: str, description: str, reference: str) -> Callable[[T], T]:
        """Decorator: ``@REGISTRY.register("ring", "one line", "ASTRA-sim Ring.cc")``."""

        def deco(obj: T) -> T:
            if self._closed:
                raise MoesimError(f"{self.kind} '{name}': cannot be registered now ({self._closed})")
            if name in self._entries:
                raise MoesimError(f"{self.kind} '{name}' registered twice")
            self._entries[name] = Entry(name, description, reference, obj)
            return obj

        return deco

    def close(self, reason: str) -> None:
        """Refuse later registrations with a MoesimError giving ``reason`` (for a registry whose entries
        something has already compiled or copied)."""
        self._closed = reason

    def get(self, name: str) -> T:
        return self.entry(name).obj

    def entry(self, name: str) -> Entry[T]:
        try:
            return self._entries[name]
        except KeyError:
            raise MoesimError(
                f"unknown {self.kind} '{name}' (allowed: {', '.join(sorted(self._entries))})"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(sorted(self._entries.values(), key=lambda e: e.name))

    def __contains__(self, name: object) -> bool:
        return name in self._entries
