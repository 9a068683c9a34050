"""PostgreSQL's full-text index covers the first 100,000 characters of each message.

Revision ID: 0011
Revises: 0010

The GIN index of revision 0002 was over ``to_tsvector('simple', content)``, and PostgreSQL
refuses a tsvector of more than 1 MB: a message of a few megabytes of varied words (a pasted
log, a document) could not be inserted at all, so the user's message was lost with a driver
error. The index is now over ``left(content, 100000)``, whose tsvector stays well under that
limit whatever the text (at most about 5.5 bytes per character), and ``Ledger.search`` matches
the same expression. A message is stored whole, whatever its length; on PostgreSQL, search
finds words in its first 100,000 characters. SQLite's FTS5 table has no such limit and does not
change.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEX = (
    "CREATE INDEX conversation_messages_fts ON conversation_messages "
    "USING gin (to_tsvector('simple', {content}))"
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX conversation_messages_fts")
        op.execute(_INDEX.format(content="left(content, 100000)"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX conversation_messages_fts")
        op.execute(_INDEX.format(content="content"))
