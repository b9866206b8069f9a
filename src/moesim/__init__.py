"""moesim: simulate distributed Mixture-of-Experts inference before buying hardware.

The Python API (``moesim.api``, docs/api.md)::

    import moesim

    result = moesim.run(model="deepseek-v4-flash", topology="1", strategy="TP2EP16")
    result.wall_s, result.to_dict(), result.ranks          # ranks: a pandas DataFrame
    summary = moesim.sweep("my_matrix.yaml", out="results/mine")
    runs = moesim.load_results("results/mine")             # a pandas DataFrame, one row per run
    topo = moesim.load_topology("3"); model = moesim.load_model("deepseek-v4-flash")
    served = moesim.serve("deepseek-v4-flash", "hgx-h100:4", "TP4EP8", rate=20)   # per-request DataFrames

Names are loaded on first use (PEP 562), so ``import moesim`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from moesim.api import (
        RunOutput,
        ServeOutput,
        load_model,
        load_results,
        load_topology,
        place,
        run,
        serve,
        serve_search,
        sweep,
    )

__all__ = ["RunOutput", "ServeOutput", "__version__", "load_model", "load_results", "load_topology", "place", "run",
           "serve", "serve_search", "sweep"]

_API = {"RunOutput", "ServeOutput", "load_model", "load_results", "load_topology", "place", "run", "serve",
        "serve_search", "sweep"}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from moesim.version import __version__

        globals()[name] = __version__
        return __version__
    if name in _API:
        from moesim import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'moesim' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
