"""The journal fixtures (SQLite and PostgreSQL, one schema per test) shared with the remediation
tests: metering lives in the same database."""

from tests.remediations.conftest import pg_url, store, store_url

__all__ = ["pg_url", "store", "store_url"]
