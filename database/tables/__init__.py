"""SQLAlchemy Core tables, one module per owner, all on one `METADATA`; the migrations in
`database/migrations` create them, and `tests/database/test_schema_matches_tables.py` compares
the migrated schema with `METADATA`."""

from database.tables import alerts, journal, metering, service
from database.tables.metadata import METADATA

__all__ = ["METADATA", "alerts", "journal", "metering", "service"]
