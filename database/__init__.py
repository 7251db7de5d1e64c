"""The database room: the engine, every migration and every table of gpufleet's one database.

The bottom of the house beside `observer/`: it imports nothing of gpufleet's, and every layer
that keeps state (the remediation journal, metering, alerts, the service's job runs) reads its
tables from `database.tables`.
"""
