"""How the network kernels (packet and fluid) and the CC state machines are compiled: without reference
counting, helpers uncached, entry points cached with a key that covers every kernel source file.

Two numba facts shape this module:

* Every array view a kernel makes (a flow's state row ``st[f]``) and every call of a non-inlined
  function that takes arrays increments and decrements their reference counts with atomic
  instructions (~300 ns per call of the packet kernel's state tuple; 29 % of a fluid HPCC run's CPU
  before the fluid kernel dropped them). The kernels never allocate an array, so they are compiled
  without numba's runtime reference counting (``_nrt=False``: the arrays belong to the Python caller
  for the duration of the call), which makes views and such calls nearly free.
* A callee loaded from numba's cache is linked as object code and cannot be inlined, and numba keys
  a cache entry on the source of the entry point's own file only. So helpers are compiled with the
  entry point that uses them (no cache of their own), and ``install_kernel_cache_locator`` adds a
  content hash of every network source file (this package, ``packet`` and ``cc``) to the entry's key,
  so an edit of any helper module recompiles the kernels.

Both use numba internals (a private ``njit`` option, the cache's locator list). They are confined to
the two functions below, each checked against numba at import and by ``tests/network/test_jit.py``,
which fails when a numba upgrade breaks either, instead of letting it silently run stale kernels.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numba
from numba import njit

KERNEL_DIRS = (Path(__file__).resolve().parent, Path(__file__).resolve().parent / "packet",
               Path(__file__).resolve().parent / "cc")
"""The directories whose Python files make up the kernels (their contents key the disk cache)."""

TESTED_NUMBA = ((0, 59), (0, 68))
"""The numba releases (major, minor; inclusive) whose caching internals the cache locator was checked
against. Outside them the locator is not installed and entry points are not cached on disk."""


def numba_version() -> tuple[int, int]:
    major, minor = numba.__version__.split(".")[:2]
    return int(major), int(minor)


def _refcount_free_supported() -> bool:
    """Whether numba still takes the private ``_nrt=False`` option (compile without reference counting)."""
    try:
        njit(_nrt=False)(lambda x: x + 1)(1)  # type: ignore[call-overload]
    except Exception:  # pragma: no cover - numba dropped the private option: correct but slower
        return False
    return True


def sources_hash(dirs: tuple[Path, ...] = KERNEL_DIRS) -> str:
    """sha256 over the names and contents of every ``*.py`` file in ``dirs``."""
    h = hashlib.sha256()
    for d in dirs:
        for f in sorted(d.glob("*.py")):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()


SOURCES_HASH = sources_hash()
"""Content hash of every kernel source file, part of each cached entry point's key."""


def install_kernel_cache_locator() -> bool:
    """Register, once, a numba cache locator for functions of the kernel source directories whose source
    stamp is numba's own (file time and size) plus ``SOURCES_HASH``. It wraps the locator numba would
    pick, so cache files stay where numba puts them.

    Uses ``numba.core.caching.CacheImpl._locator_classes`` and ``_CacheLocator``: only for numba in
    ``TESTED_NUMBA``; returns False (nothing installed) for another version or if they moved."""
    if not TESTED_NUMBA[0] <= numba_version() <= TESTED_NUMBA[1]:
        return False
    try:
        from numba.core import caching

        impl = caching.CacheImpl
        base = caching._CacheLocator
        classes: list[Any] = impl._locator_classes
    except (ImportError, AttributeError):  # pragma: no cover - internals moved within a tested release
        return False
    if any(getattr(c, "__name__", "") == "KernelSourcesLocator" for c in classes):
        return True
    dirs = tuple(str(d) for d in KERNEL_DIRS)

    class KernelSourcesLocator(base):  # type: ignore[misc,valid-type]
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def ensure_cache_path(self) -> None:
            self._inner.ensure_cache_path()

        def get_cache_path(self) -> str:
            return self._inner.get_cache_path()

        def get_source_stamp(self) -> object:
            return (self._inner.get_source_stamp(), SOURCES_HASH)

        def get_disambiguator(self) -> str:
            return self._inner.get_disambiguator()

        @classmethod
        def from_function(cls, py_func, py_file):  # type: ignore[no-untyped-def]
            if not str(Path(py_file).resolve().parent).startswith(dirs):
                return None
            for other in classes:
                if other is cls:
                    continue
                inner = other.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner)
            return None

    classes.insert(0, KernelSourcesLocator)
    return True


def cache_locator(dispatcher: Any) -> Any:
    """The cache locator numba uses for a cached ``entry`` function (numba's ``_cache._impl.locator``),
    or None when it is not cached: what the tests check the locator above against."""
    impl = getattr(getattr(dispatcher, "_cache", None), "_impl", None)
    return getattr(impl, "locator", None)


USE_NRT = not _refcount_free_supported()
"""False: compiled without numba's reference counting (the kernels never allocate)."""

SOURCES_IN_CACHE_KEY = install_kernel_cache_locator()
"""True when entry points are cached with ``SOURCES_HASH`` in their key; else they are not cached."""

helper = njit(_nrt=USE_NRT)  # type: ignore[call-overload]
"""Decorator for kernel helpers and CC functions: compiled into the entry point that calls them."""

entry = njit(cache=SOURCES_IN_CACHE_KEY, _nrt=USE_NRT)  # type: ignore[call-overload]
"""Decorator for functions called from Python: cached, keyed on every kernel source file."""

inline_helper = njit(_nrt=USE_NRT, inline="always")  # type: ignore[call-overload]
"""For helpers with a single call site: numba pastes them into the caller (no call at all)."""


def python_twin(fn: Any) -> Any:
    """A twin of a ``helper``-compiled function for callers in Python, cached like an entry point (the
    kernels inline the original)."""
    return njit(cache=SOURCES_IN_CACHE_KEY, _nrt=USE_NRT)(fn.py_func)  # type: ignore[call-overload]


def compiled_for(dispatcher: Any, *args: Any) -> Any:
    """The compiled function ``dispatcher`` runs for arguments of the types of ``args`` (compiled, or loaded
    from the cache, on first use). Calling it skips the dispatcher's typing of every argument on every
    call (about 45 µs for the fluid kernels' state tuple of ~50 arrays, against ~10 µs to unbox it);
    the caller must keep passing arguments of these types."""
    return dispatcher.compile(tuple(dispatcher.typeof_pyval(a) for a in args))
