"""The revisions, one module each, oldest first (Alembic loads them by their file names)."""
