"""moesim.network: backends behind one interface, congestion control, and the study's network modes."""

from moesim.network import (  # noqa: F401  (each module registers its backend)
    analytical,
    flow,
    fluid,
    packet,
)
from moesim.network.base import BACKENDS, Flow, NetworkBackend
from moesim.network.params import NETWORK_MODES, REFERENCE_PRESETS, NetworkParams, network_mode

__all__ = ["BACKENDS", "Flow", "NetworkBackend", "NETWORK_MODES", "REFERENCE_PRESETS", "NetworkParams", "network_mode"]
