"""Full-text search over conversation messages.

SQLite: the FTS5 table ``conversation_messages_fts`` holds its own copy of each message's text,
keyed by message id and kept in step by triggers (revision 0002 says why it is not an
external-content table keyed by rowid). PostgreSQL: a GIN index over the tsvector of the
first 100,000 characters of the text (revision 0011 says why).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..errors import UsageError
from ..values import Message
from ._rows import message_of
from ._scope import EVERYTHING, Scope
from ._sql import Reads, columns, in_scope, scope_params


class SearchHit(BaseModel):
    """A conversation message that matched a search."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    conversation_id: str
    section: str
    seq: int
    run_id: str | None
    message: Message


POSTGRESQL_SEARCHED_CHARACTERS = 100_000
"""How much of each message PostgreSQL's full-text index covers (revision 0011 says why)."""
_INDEXED = f"to_tsvector('simple', left(m.content, {POSTGRESQL_SEARCHED_CHARACTERS}))"
"""The expression of the GIN index ``conversation_messages_fts``: the same, so it is used."""

MAX_SEARCH_WORDS = 1_000
"""The most different words one search takes. A message must hold every word, each a term of
the full-text query: SQLite's FTS5 slows down with each term a message holds (a query of a
megabyte of words it holds takes minutes) and PostgreSQL refuses a tsquery past its size
limit. Repeated words count once."""


def search(
    reads: Reads, query: str, conversation_id: str | None, limit: int, scope: Scope = EVERYTHING
) -> list[SearchHit]:
    """The messages that match every word of ``query``, best matches first, in the
    conversations of ``scope`` (and of ``conversation_id``, a full id, if given)."""
    words = search_words(query)
    if not words:
        return []
    within = "AND m.conversation_id = :conversation_id " if conversation_id is not None else ""
    within += in_scope(scope, "c")
    joined = "" if scope.everything else "JOIN conversations c ON c.id = m.conversation_id "
    selected = f"SELECT {columns('conversation_messages', 'm')} "
    if reads.dialect == "sqlite":
        sql = (
            f"{selected}FROM conversation_messages_fts f "
            f"JOIN conversation_messages m ON m.id = f.message_id {joined}"
            f"WHERE conversation_messages_fts MATCH :match {within}"
            "ORDER BY f.rank, m.seq LIMIT :limit"
        )
        match = " ".join(f'"{w}"' for w in words)
    else:
        sql = (
            f"{selected}FROM conversation_messages m {joined}"
            f"WHERE {_INDEXED} @@ plainto_tsquery('simple', :match) "
            f"{within}ORDER BY ts_rank({_INDEXED}, "
            "plainto_tsquery('simple', :match)) DESC, m.seq LIMIT :limit"
        )
        match = " ".join(words)
    params = {"match": match, "conversation_id": conversation_id, "limit": limit}
    rows = reads.rows(sql, {**params, **scope_params(scope)}, "conversation_messages")
    return [hit_of(row) for row in rows]


def search_words(query: str) -> list[str]:
    """The words of ``query``, each once, in order: every other character (FTS5's and
    tsquery's operators, quotes, SQL, NUL) only separates words, so no query is syntax."""
    words = list(dict.fromkeys(re.findall(r"\w+", query)))
    if len(words) > MAX_SEARCH_WORDS:
        raise UsageError(
            f"the search holds {len(words):,} different words, more than the "
            f"{MAX_SEARCH_WORDS:,} one search takes: search for the few that matter (a "
            "message must hold every one)"
        )
    return words


def hit_of(row: Any) -> SearchHit:
    return SearchHit(
        conversation_id=row["conversation_id"],
        section=row["section"],
        seq=row["seq"],
        run_id=row["run_id"],
        message=message_of(row),
    )
