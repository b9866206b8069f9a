"""moesim.system layer."""
