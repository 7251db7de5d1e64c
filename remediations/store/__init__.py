"""The remediation journal (SQLAlchemy; SQLite by default, PostgreSQL in production)."""

from remediations.store.records import (
    ActionRecord,
    AuditRecord,
    EngineState,
    IncidentRecord,
    NewAction,
)
from remediations.store.store import Store, TransitionRefused

__all__ = [
    "ActionRecord",
    "AuditRecord",
    "EngineState",
    "IncidentRecord",
    "NewAction",
    "Store",
    "TransitionRefused",
]
