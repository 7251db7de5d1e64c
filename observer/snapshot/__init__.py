"""Snapshot building: collected columns -> one frozen FleetSnapshot."""
