"""moesim.system.collectives layer."""
