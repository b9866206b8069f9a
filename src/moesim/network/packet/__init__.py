"""moesim.network.packet layer."""
