"""How the network kernels (packet and fluid) are compiled: without reference counting, helpers
uncached, entry points cached.

Two numba facts shape this module:

* Every array view a kernel makes (a flow's state row ``st[f]``) and every call of a non-inlined
  function that takes arrays increments and decrements their reference counts with atomic
  instructions (~300 ns per call of the packet kernel's state tuple; 29 % of a fluid HPCC run's CPU
  before the fluid kernel dropped them). The kernels never allocate an array, so they are compiled
  without numba's runtime reference counting (``_nrt=False``: the arrays belong to the Python caller
  for the duration of the call), which makes views and such calls nearly free.
* A callee loaded from numba's cache is linked as object code and cannot be inlined, and numba keys
  a cache entry on the source of the entry point's own file only. So helpers are compiled with the
  entry point that uses them (no cache of their own) and the cache locator below adds a content
  hash of every network source file (this package, ``packet`` and ``cc``) to the entry's key, so an
  edit of any helper module recompiles the kernels.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from numba import njit

from moesim.network.cc.base import USE_NRT

_DIRS = (Path(__file__).resolve().parent, Path(__file__).resolve().parent / "packet",
         Path(__file__).resolve().parent / "cc")


def _sources_hash() -> str:
    h = hashlib.sha256()
    for d in _DIRS:
        for f in sorted(d.glob("*.py")):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _install_locator() -> bool:
    """Register a cache locator whose source stamp covers all kernel sources (False if numba changed)."""
    try:
        from numba.core import caching

        impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # type: ignore[attr-defined]
        base = caching._CacheLocator
    except (ImportError, AttributeError):  # pragma: no cover - numba internals moved
        return False
    stamp = _sources_hash()
    dirs = tuple(str(d) for d in _DIRS)

    class KernelSourcesLocator(base):  # type: ignore[misc,valid-type]
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def ensure_cache_path(self) -> None:
            self._inner.ensure_cache_path()

        def get_cache_path(self) -> str:
            return self._inner.get_cache_path()

        def get_source_stamp(self) -> object:
            return (self._inner.get_source_stamp(), stamp)

        def get_disambiguator(self) -> str:
            return self._inner.get_disambiguator()

        @classmethod
        def from_function(cls, py_func, py_file):  # type: ignore[no-untyped-def]
            if not str(Path(py_file).resolve().parent).startswith(dirs):
                return None
            for other in impl._locator_classes:
                if other is cls:
                    continue
                inner = other.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner)
            return None

    if not any(getattr(c, "__name__", "") == "KernelSourcesLocator" for c in impl._locator_classes):
        impl._locator_classes.insert(0, KernelSourcesLocator)
    return True


SOURCES_IN_CACHE_KEY = _install_locator()

helper = njit(_nrt=USE_NRT)  # type: ignore[call-overload]
"""Decorator for kernel helpers: compiled into the entry point that calls them."""

entry = njit(cache=True, _nrt=USE_NRT)  # type: ignore[call-overload]
"""Decorator for functions called from Python: cached, keyed on every kernel source file."""

inline_helper = njit(_nrt=USE_NRT, inline="always")  # type: ignore[call-overload]
"""For helpers with a single call site: numba pastes them into the caller (no call at all)."""
