"""moesim.network.cc layer."""
