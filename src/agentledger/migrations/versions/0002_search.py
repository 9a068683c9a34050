"""Full-text search over conversation messages (``Ledger.search``).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Full-text search over conversation messages. SQLite: an FTS5 table holding its own copy of
# the text, keyed by message id and kept in step by triggers (an external-content table keyed
# by rowid would drift whenever VACUUM or a batch migration renumbers the rowids of a table
# whose primary key is text). PostgreSQL: a GIN index over the text's tsvector.
_SQLITE_SEARCH = (
    """CREATE VIRTUAL TABLE conversation_messages_fts USING fts5(
    content, message_id UNINDEXED, conversation_id UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 2')""",
    """CREATE TRIGGER conversation_messages_fts_insert AFTER INSERT ON conversation_messages
BEGIN
    INSERT INTO conversation_messages_fts (content, message_id, conversation_id)
    VALUES (new.content, new.id, new.conversation_id);
END""",
    """CREATE TRIGGER conversation_messages_fts_delete AFTER DELETE ON conversation_messages
BEGIN
    DELETE FROM conversation_messages_fts WHERE message_id = old.id;
END""",
    """CREATE TRIGGER conversation_messages_fts_update
AFTER UPDATE OF content ON conversation_messages
BEGIN
    UPDATE conversation_messages_fts SET content = new.content WHERE message_id = old.id;
END""",
)
_POSTGRESQL_SEARCH = (
    "CREATE INDEX conversation_messages_fts ON conversation_messages "
    "USING gin (to_tsvector('simple', content))",
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in _SQLITE_SEARCH:
            op.execute(statement)
        op.execute(
            "INSERT INTO conversation_messages_fts (content, message_id, conversation_id) "
            "SELECT content, id, conversation_id FROM conversation_messages ORDER BY rowid"
        )
    else:
        for statement in _POSTGRESQL_SEARCH:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER conversation_messages_fts_{trigger}")
        op.execute("DROP TABLE conversation_messages_fts")
    else:
        op.execute("DROP INDEX conversation_messages_fts")
