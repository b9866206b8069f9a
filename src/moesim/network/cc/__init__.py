"""Congestion-control algorithms as pure per-flow state machines (one module each), and their registry.

Each algorithm module registers itself on import; the line below is the registry's list of modules.
"""

from moesim.network.cc import dcqcn, dctcp, hpcc, none, timely  # noqa: F401  (registration)
from moesim.network.cc.base import CC_ALGORITHMS, CcAlgorithm, FlowCc, algorithm_for_mode

__all__ = ["CC_ALGORITHMS", "CcAlgorithm", "FlowCc", "algorithm_for_mode"]
