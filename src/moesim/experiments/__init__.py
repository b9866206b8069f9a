"""moesim.experiments layer."""
