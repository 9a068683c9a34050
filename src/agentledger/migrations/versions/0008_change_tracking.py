"""Change tracking: what changed since a given moment, for copies of the ledger kept in step.

Revision ID: 0008
Revises: 0007

An analytics copy of the ledger (``Analytics.open(url, cache=...)``) reads only what changed
since it last synced. For that, the tables it copies incrementally (``conversations``,
``conversation_messages``, ``agent_runs``, ``step_executions``, ``tool_executions``,
``context_compactions``) gain ``change_seq``, set by the database itself on every insert and
update (triggers: whoever writes, the library or a person with SQL, the stamp follows), and
``agentledger_deletions`` records every row deleted from them. ``agentledger_changes`` holds one
row: the ledger's own id (random, made here: a copy knows which ledger it belongs to) and, on
SQLite, the counter the stamps come from.

What a stamp is, per backend:

- SQLite has one writer at a time: the stamp is the counter, raised inside the writing
  transaction, so stamps grow in commit order. A reader that saw the counter at ``n`` has seen
  every row stamped ``n`` or less.
- PostgreSQL writes concurrently, and a sequence's numbers are not in commit order: the stamp is
  the writing transaction's id (``pg_current_xact_id()``, 64 bits, never wraps). A reader takes
  the ``xmin`` of its snapshot: every transaction below it has ended, so rows stamped below it
  are all visible, and the next read starts from there.

Rows already in the ledger keep ``change_seq`` NULL (nothing is rewritten; a copy made at an
older revision is rebuilt in full). ``execution_buffer_rows`` is not stamped: its rows live only
until their run commits, and a copy reads them whole. ``change_seq`` is not covered by the row
checksums. The downgrade drops it all: nothing of the ledger's own is lost.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = (
    "conversations",
    "conversation_messages",
    "agent_runs",
    "step_executions",
    "tool_executions",
    "context_compactions",
)
COLUMN = "change_seq"

_SQLITE_NEXT = "UPDATE agentledger_changes SET change_seq = change_seq + 1"
_SQLITE_STAMP = "(SELECT change_seq FROM agentledger_changes)"


def _sqlite_triggers(table: str) -> tuple[str, ...]:
    """Stamp a row after it is inserted or updated (unless the update set the stamp itself:
    the stamping update does, so it does not stamp again), and log a row deleted."""
    stamp = f"UPDATE {table} SET {COLUMN} = {_SQLITE_STAMP} WHERE rowid = new.rowid"
    return (
        f"""CREATE TRIGGER {table}_change_insert AFTER INSERT ON {table}
BEGIN
    {_SQLITE_NEXT};
    {stamp};
END""",
        f"""CREATE TRIGGER {table}_change_update AFTER UPDATE ON {table}
WHEN new.{COLUMN} IS old.{COLUMN}
BEGIN
    {_SQLITE_NEXT};
    {stamp};
END""",
        f"""CREATE TRIGGER {table}_change_delete AFTER DELETE ON {table}
BEGIN
    {_SQLITE_NEXT};
    INSERT INTO agentledger_deletions (table_name, row_id, {COLUMN})
    VALUES ('{table}', old.id, {_SQLITE_STAMP});
END""",
    )


_POSTGRESQL_FUNCTIONS = (
    f"""CREATE FUNCTION agentledger_stamp_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.{COLUMN} := pg_current_xact_id()::text::bigint;
    RETURN NEW;
END
$$""",
    f"""CREATE FUNCTION agentledger_log_deletion() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agentledger_deletions (table_name, row_id, {COLUMN})
    VALUES (TG_TABLE_NAME, OLD.id, pg_current_xact_id()::text::bigint);
    RETURN OLD;
END
$$""",
)


def _postgresql_triggers(table: str) -> tuple[str, ...]:
    return (
        f"CREATE TRIGGER {table}_change_stamp BEFORE INSERT OR UPDATE ON {table} "
        "FOR EACH ROW EXECUTE FUNCTION agentledger_stamp_change()",
        f"CREATE TRIGGER {table}_change_delete AFTER DELETE ON {table} "
        "FOR EACH ROW EXECUTE FUNCTION agentledger_log_deletion()",
    )


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.create_table(
        "agentledger_changes",
        sa.Column("ledger_id", sa.String(), nullable=False),
        sa.Column(COLUMN, sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("ledger_id", name=op.f("pk_agentledger_changes")),
    )
    new_id = "lower(hex(randomblob(16)))" if sqlite else "replace(gen_random_uuid()::text, '-', '')"
    op.execute(f"INSERT INTO agentledger_changes (ledger_id, {COLUMN}) VALUES ({new_id}, 0)")
    op.create_table(
        "agentledger_deletions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("table_name", sa.String(), nullable=False),
        sa.Column("row_id", sa.String(), nullable=False),
        sa.Column(COLUMN, sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agentledger_deletions")),
    )
    op.create_index(op.f("ix_agentledger_deletions_change_seq"), "agentledger_deletions", [COLUMN])
    for table in TABLES:
        op.add_column(table, sa.Column(COLUMN, sa.BigInteger(), nullable=True))
        op.create_index(op.f(f"ix_{table}_{COLUMN}"), table, [COLUMN])
    if not sqlite:
        for statement in _POSTGRESQL_FUNCTIONS:
            op.execute(statement)
    for table in TABLES:
        for statement in _sqlite_triggers(table) if sqlite else _postgresql_triggers(table):
            op.execute(statement)


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for table in reversed(TABLES):
        triggers = ("insert", "update", "delete") if sqlite else ("stamp", "delete")
        for trigger in triggers:
            on = "" if sqlite else f" ON {table}"
            op.execute(f"DROP TRIGGER {table}_change_{trigger}{on}")
    if not sqlite:
        op.execute("DROP FUNCTION agentledger_log_deletion()")
        op.execute("DROP FUNCTION agentledger_stamp_change()")
    for table in reversed(TABLES):
        op.drop_index(op.f(f"ix_{table}_{COLUMN}"), table_name=table)
        # ALTER TABLE ... DROP COLUMN in place (SQLite 3.35 and later), as 0003 does.
        op.execute(f"ALTER TABLE {table} DROP COLUMN {COLUMN}")
    op.drop_index(op.f("ix_agentledger_deletions_change_seq"), table_name="agentledger_deletions")
    op.drop_table("agentledger_deletions")
    op.drop_table("agentledger_changes")
