"""moesim.workload layer."""
