"""gpufleet: observability and SRE automation for Kubernetes GPU fleets (composition root)."""

__version__ = "0.1.0"
