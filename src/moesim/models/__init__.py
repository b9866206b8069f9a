"""moesim.models layer."""
