"""moesim.analysis layer."""
