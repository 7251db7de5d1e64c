"""The fleet model and the metric catalog: what a FleetSnapshot holds."""
