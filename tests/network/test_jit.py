"""The numba internals ``moesim.network.jit`` relies on still work with the installed numba: these fail on
an upgrade that breaks them, before stale or slow kernels do (see the module's docstring)."""

from __future__ import annotations

import re

import numpy as np
from numba import njit

from moesim.network import jit
from moesim.network.fluid_kernel import fluid_run
from moesim.network.packet.kernel import run
from moesim.network.waterfill import waterfill_capped


def test_the_installed_numba_is_one_the_cache_locator_was_checked_against():
    low, high = jit.TESTED_NUMBA
    assert low <= jit.numba_version() <= high, (
        f"numba {jit.numba_version()} is outside {jit.TESTED_NUMBA}: check install_kernel_cache_locator "
        "against numba.core.caching, then widen TESTED_NUMBA")
    assert jit.SOURCES_IN_CACHE_KEY


def test_kernel_entry_points_are_cached_with_every_kernel_source_in_their_key():
    """The packet and fluid entry points (and the water-filling one) use the locator, whose source stamp
    carries the hash of all kernel sources, not only the entry's own file."""
    for dispatcher in (run, fluid_run, waterfill_capped):
        locator = jit.cache_locator(dispatcher)
        assert type(locator).__name__ == "KernelSourcesLocator"
        assert locator.get_source_stamp()[1] == jit.SOURCES_HASH


def test_the_sources_hash_covers_helper_modules_of_the_cc_and_packet_packages(tmp_path):
    for sub in ("", "packet", "cc"):
        (tmp_path / sub).mkdir(exist_ok=True)
        (tmp_path / sub / "m.py").write_text("x = 1\n")
    dirs = (tmp_path, tmp_path / "packet", tmp_path / "cc")
    before = jit.sources_hash(dirs)
    (tmp_path / "cc" / "m.py").write_text("x = 2\n")
    assert jit.sources_hash(dirs) != before
    assert set(jit.KERNEL_DIRS) == {jit.KERNEL_DIRS[0], jit.KERNEL_DIRS[0] / "packet", jit.KERNEL_DIRS[0] / "cc"}


def test_kernels_compile_without_reference_counting():
    """A helper that slices an array makes no reference-counting call, where plain njit code makes some."""
    def view_plus_one(a):
        b = a[1:]
        return b[0] + 1

    def llvm(fn) -> str:
        fn(np.zeros(3))
        return "\n".join(fn.inspect_llvm().values())

    assert jit.USE_NRT is False  # this numba takes _nrt=False
    assert "NRT_decref" in llvm(njit(view_plus_one))
    assert not re.search(r"NRT_(incref|decref)", llvm(jit.helper(view_plus_one)))


def test_compiled_for_is_the_overload_the_dispatcher_runs():
    """``compiled_for`` compiles (or finds) the overload for the arguments' types: calling it gives the
    dispatcher's result, and the dispatcher then compiles nothing new for those arguments."""
    @njit
    def weighted(x, w, state):
        return x * w + state[0].sum() + state[1]

    args = (2.0, 3, (np.arange(4.0), 1.5))
    fn = jit.compiled_for(weighted, *args)
    assert len(weighted.overloads) == 1
    assert fn(*args) == weighted(*args) == 2.0 * 3 + 6.0 + 1.5
    assert len(weighted.overloads) == 1
