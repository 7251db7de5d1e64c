"""The simulator's Kubernetes API server (the subset gpufleet and kubectl use)."""
