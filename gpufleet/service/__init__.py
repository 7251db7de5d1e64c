"""The long-running service behind `gpufleet run`: scheduler, scheduled jobs, leader election,
health and self-telemetry. `gpufleet.commands.run` is its command line; this package its parts."""
