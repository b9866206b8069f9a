"""moesim.topology layer."""
