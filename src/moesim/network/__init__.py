"""moesim.network: backends behind one interface, congestion control, and the study's network modes."""

from moesim.network import (
    flow,  # noqa: F401  (registers "flow" and "analytical")
    fluid,  # noqa: F401  (registers "fluid")
    packet,  # noqa: F401  (registers "packet")
)
from moesim.network.base import BACKENDS, Flow, NetworkBackend
from moesim.network.params import NETWORK_MODES, REFERENCE_PRESETS, NetworkParams, network_mode

__all__ = ["BACKENDS", "Flow", "NetworkBackend", "NETWORK_MODES", "REFERENCE_PRESETS", "NetworkParams", "network_mode"]
