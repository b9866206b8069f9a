"""moesim: simulate distributed Mixture-of-Experts inference before buying hardware."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("moesim")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+src"

__all__ = ["__version__"]
