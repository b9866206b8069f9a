"""moesim.network layer."""
