"""Scheduled job kinds (registered in gpufleet.service.registry)."""
