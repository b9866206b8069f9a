"""The installed moesim's version, in a module of its own so that no layer imports the package façade."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def _version() -> str:
    try:
        return version("moesim")
    except PackageNotFoundError:  # running from a source tree without installation
        return "0.0.0+src"


__version__ = _version()
