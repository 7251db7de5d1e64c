"""`gpufleet doctor`: is this cluster ready for gpufleet, and what to fix when it is not."""
