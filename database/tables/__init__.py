"""SQLAlchemy Core tables, one module per owner; the migrations in `database/migrations` create
them, and one test compares the migrated schema with these declarations."""
