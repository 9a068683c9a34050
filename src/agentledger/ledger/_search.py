"""Full-text search over conversation messages.

SQLite: the FTS5 table ``conversation_messages_fts`` holds its own copy of each message's text,
keyed by message id and kept in step by triggers (revision 0002 says why it is not an
external-content table keyed by rowid). PostgreSQL: a GIN index over the text's tsvector.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import text
from sqlalchemy.sql.expression import TextualSelect

from ..values import Message
from ._rows import message_of
from .tables import conversation_messages


class SearchHit(BaseModel):
    """A conversation message that matched a search."""

    model_config = ConfigDict(frozen=True)

    conversation_id: str
    section: str
    seq: int
    run_id: str | None
    message: Message


_COLUMNS = ", ".join(f"m.{c.name}" for c in conversation_messages.columns)


def search_statement(
    dialect: str, query: str, conversation_id: str | None, limit: int
) -> tuple[TextualSelect, dict[str, Any]] | None:
    """The statement finding the messages that match every word of ``query``, best matches
    first, and its parameters; ``None`` when ``query`` holds no word."""
    words = re.findall(r"\w+", query)
    if not words:
        return None
    within = conversation_id is not None
    if dialect == "sqlite":
        sql = (
            f"SELECT {_COLUMNS} FROM conversation_messages_fts f "
            "JOIN conversation_messages m ON m.id = f.message_id "
            "WHERE conversation_messages_fts MATCH :match "
            + ("AND f.conversation_id = :conversation_id " if within else "")
            + "ORDER BY f.rank, m.seq LIMIT :limit"
        )
        match = " ".join(f'"{w}"' for w in words)
    else:
        sql = (
            f"SELECT {_COLUMNS} FROM conversation_messages m "
            "WHERE to_tsvector('simple', m.content) @@ plainto_tsquery('simple', :match) "
            + ("AND m.conversation_id = :conversation_id " if within else "")
            + "ORDER BY ts_rank(to_tsvector('simple', m.content), "
            "plainto_tsquery('simple', :match)) DESC, m.seq LIMIT :limit"
        )
        match = " ".join(words)
    typed = text(sql).columns(*conversation_messages.columns)  # JSON and times decoded
    return typed, {"match": match, "conversation_id": conversation_id, "limit": limit}


def hit_of(row: Any) -> SearchHit:
    return SearchHit(
        conversation_id=row["conversation_id"],
        section=row["section"],
        seq=row["seq"],
        run_id=row["run_id"],
        message=message_of(row),
    )
