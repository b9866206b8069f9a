"""Executors of a sweep: ``local`` (process pool, the default), ``ray`` (a Ray cluster), ``dask``."""

from moesim.experiments.executors import dask_cluster, local, ray_cluster  # noqa: F401  (register themselves)
from moesim.experiments.executors.base import DEFAULT_MAX_RETRIES, EXECUTORS, Executor

__all__ = ["DEFAULT_MAX_RETRIES", "EXECUTORS", "Executor"]
