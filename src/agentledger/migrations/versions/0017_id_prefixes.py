"""Ids found by their prefix through an index on PostgreSQL too.

Revision ID: 0017
Revises: 0016

A short id (``Ledger.short_ids``, every id the command line and the viewer show) is the
shortest prefix that begins one id only, and a prefix given for an id is looked up the same
way. A prefix is a range of the ids in the order of their bytes, which is the order of
SQLite's primary key indexes; PostgreSQL's primary keys follow the database's collation,
in which a prefix need not be a range at all (most collations skip punctuation at first), so
each lookup read the whole table. ``conversations`` and ``agent_runs`` gain an index of their
``id`` in the ``"C"`` collation (bytes), on PostgreSQL only, which the lookups compare in.
Nothing else changes; SQLite is untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("conversations", "agent_runs")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f'CREATE INDEX {table}_id_prefixes ON {table} (id COLLATE "C")')


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f"DROP INDEX {table}_id_prefixes")
