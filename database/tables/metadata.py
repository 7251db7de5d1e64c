"""The one MetaData of gpufleet's database: every module of `database.tables` declares its tables
on it, so the union of all tables is one object (Alembic's `target_metadata`)."""

from sqlalchemy import MetaData

METADATA = MetaData()
