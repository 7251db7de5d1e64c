"""Scheduled remediation jobs' domain logic: diagnose and return, maintenance windows, and the
gated propose/execute both use. The service (gpufleet.service) only schedules and calls them."""
