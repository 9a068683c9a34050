"""Full-text search over conversation messages and over the trace (each tool execution's
arguments and result).

SQLite: the FTS5 tables ``conversation_messages_fts`` and ``tool_executions_fts`` hold their own
copy of the text, keyed by the row's id and kept in step by triggers (revision 0002 says why they
are not external-content tables keyed by rowid). PostgreSQL: GIN indexes over the tsvector of
the first 100,000 characters of the text (revisions 0011 and 0013 say why).

A query's words are matched whole, or as prefixes when a ``*`` follows them (``Lis*``); every
other character only separates words, so no query is syntax.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from .._values import Message, ToolExecution
from ..errors import UsageError
from ._row_mapping import message_of, tool_execution_of
from ._scope import EVERYTHING, Scope
from ._sql import Reads, columns, in_scope, scope_params, select_rows
from .checksums import check_row


class SearchHit(BaseModel):
    """A conversation message that matched a search."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    conversation_id: str
    section: str
    seq: int
    run_id: str | None
    message: Message


class TraceHit(BaseModel):
    """A tool execution whose arguments or result matched a search: a hit in the trace of the
    run ``run_id``, in the conversation ``conversation_id``."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    conversation_id: str
    run_id: str
    step_index: int
    tool_execution: ToolExecution


POSTGRESQL_SEARCHED_CHARACTERS = 100_000
"""How much of each message PostgreSQL's full-text index covers (revision 0011 says why)."""
_INDEXED = f"to_tsvector('simple', left(m.content, {POSTGRESQL_SEARCHED_CHARACTERS}))"
"""The expression of the GIN index ``conversation_messages_fts``: the same, so it is used."""
_TRACE_INDEXED = (
    "to_tsvector('simple', left(coalesce(t.arguments::text, '') || ' ' || t.result, "
    f"{POSTGRESQL_SEARCHED_CHARACTERS}))"
)
"""The expression of the GIN index ``tool_executions_fts`` (revision 0013)."""


@dataclass(frozen=True)
class _Index:
    """A table's full-text index: FTS5's table of its text on SQLite, the expression of its
    GIN index on PostgreSQL."""

    table: str
    alias: str
    fts: str
    """The FTS5 table, and its column naming the row (``fts.key``)."""
    key: str
    indexed: str
    """The GIN index's expression: a search matches the same, so that it is used."""
    order: str
    """How hits of the same rank are ordered."""

    def matching(
        self, dialect: str, terms: list[Term], joined: str, within: str
    ) -> tuple[str, dict[str, Any]]:
        """The select of every column of the rows matching ``terms`` (joined to ``joined``,
        kept to the conditions ``within``), best first, and its parameters (but ``:limit``)."""
        selected, a = f"SELECT {columns(self.table, self.alias)} ", self.alias
        if dialect == "sqlite":
            sql = (
                f"{selected}FROM {self.fts} f JOIN {self.table} {a} ON {a}.id = f.{self.key} "
                f"{joined}WHERE {self.fts} MATCH :match {within}"
                f"ORDER BY f.rank, {self.order} LIMIT :limit"
            )
            return sql, {"match": _fts5_query(terms)}
        tsquery, params = _tsquery(terms)
        sql = (
            f"{selected}FROM {self.table} {a} {joined}WHERE {self.indexed} @@ {tsquery} "
            f"{within}ORDER BY ts_rank({self.indexed}, {tsquery}) DESC, {self.order} LIMIT :limit"
        )
        return sql, params


_MESSAGES = _Index(
    "conversation_messages", "m", "conversation_messages_fts", "message_id", _INDEXED, "m.seq"
)
_TRACE = _Index(
    "tool_executions", "t", "tool_executions_fts", "tool_execution_id", _TRACE_INDEXED,
    "t.started_at, t.id",
)  # fmt: skip

MAX_SEARCH_WORDS = 1_000
"""The most different words one search takes. A message must hold every word, each a term of
the full-text query: SQLite's FTS5 slows down with each term a message holds (a query of a
megabyte of words it holds takes minutes) and PostgreSQL refuses a tsquery past its size
limit. Repeated words count once."""


class Term(NamedTuple):
    """A word of a query, and whether it is a prefix (``Lis*``)."""

    word: str
    prefix: bool


def search_terms(query: str) -> list[Term]:
    """The words of ``query``, each once, in order, each a prefix when a ``*`` follows it:
    every other character (FTS5's and tsquery's operators, quotes, SQL, NUL) only separates
    words, so no query is syntax."""
    terms = list(dict.fromkeys(Term(w, bool(star)) for w, star in _TERM.findall(query)))
    if len(terms) > MAX_SEARCH_WORDS:
        raise UsageError(
            f"the search holds {len(terms):,} different words, more than the "
            f"{MAX_SEARCH_WORDS:,} one search takes: search for the few that matter (a "
            "message must hold every one)"
        )
    return terms


_TERM = re.compile(r"(\w+)(\*?)")


def search(
    reads: Reads, query: str, conversation_id: str | None, limit: int, scope: Scope = EVERYTHING
) -> list[SearchHit]:
    """The messages that match every word of ``query``, best matches first, in the
    conversations of ``scope`` (and of ``conversation_id``, a full id, if given)."""
    terms = search_terms(query)
    if not terms:
        return []
    within = "AND m.conversation_id = :conversation_id " if conversation_id is not None else ""
    within += in_scope(scope, "c")
    joined = "" if scope.everything else "JOIN conversations c ON c.id = m.conversation_id "
    sql, matched = _MESSAGES.matching(reads.dialect, terms, joined, within)
    params = {**matched, "conversation_id": conversation_id, "limit": limit}
    rows = reads.rows(sql, {**params, **scope_params(scope)}, "conversation_messages")
    return [hit_of(row) for row in rows]


def search_trace(
    reads: Reads, query: str, conversation_id: str | None, limit: int, scope: Scope = EVERYTHING
) -> list[TraceHit]:
    """The tool executions whose arguments and result together hold every word of ``query``,
    best matches first, in the runs of ``scope`` (and of the conversation ``conversation_id``,
    a full id, if given)."""
    terms = search_terms(query)
    if not terms:
        return []
    within = "AND r.conversation_id = :conversation_id " if conversation_id is not None else ""
    within += in_scope(scope, "r")  # a run has its conversation's tenant and owner
    joined = "JOIN agent_runs r ON r.id = t.run_id "
    sql, matched = _TRACE.matching(reads.dialect, terms, joined, within)
    params = {**matched, "conversation_id": conversation_id, "limit": limit}
    tools = reads.rows(sql, {**params, **scope_params(scope)}, "tool_executions")
    conversations = _conversations_of(reads, {t["run_id"] for t in tools})
    return [
        TraceHit.model_construct(  # of rows checked as they were read
            conversation_id=conversations[t["run_id"]],
            run_id=t["run_id"],
            step_index=t["step_index"],
            tool_execution=tool_execution_of(t),
        )
        for t in tools
    ]


def search_hits(
    reads: Reads,
    query: str,
    conversation_id: str | None,
    limit: int,
    scope: Scope,
    *,
    trace: bool,
) -> list[SearchHit | TraceHit]:
    """``Ledger.search``: the messages that match, best first; with ``trace``, then the tool
    executions that match, best first (up to ``limit`` of each)."""
    hits: list[SearchHit | TraceHit] = [*search(reads, query, conversation_id, limit, scope)]
    if trace:
        hits += search_trace(reads, query, conversation_id, limit, scope)
    return hits


def _conversations_of(reads: Reads, run_ids: set[str]) -> dict[str, str]:
    """The conversation of each of the runs ``run_ids``, from their rows (each checked against
    its checksum)."""
    if not run_ids:
        return {}
    named = {f"run{n}": run_id for n, run_id in enumerate(sorted(run_ids))}
    sql = select_rows("agent_runs") + f"WHERE id IN ({', '.join(':' + k for k in named)})"
    found = {}
    for row in reads.rows(sql, named, "agent_runs"):
        check_row("agent_runs", row)
        found[row["id"]] = row["conversation_id"]
    return found


def _fts5_query(terms: list[Term]) -> str:
    """FTS5's query of ``terms``: each a phrase, every one required, a prefix marked ``*``."""
    return " ".join(f'"{term.word}"' + ("*" if term.prefix else "") for term in terms)


def _tsquery(terms: list[Term]) -> tuple[str, dict[str, Any]]:
    """PostgreSQL's tsquery of ``terms`` as SQL, and its parameters: the whole words as
    ``plainto_tsquery`` reads them, and the prefixes as lexemes matched by their beginning."""
    words = [term.word for term in terms if not term.prefix]
    prefixes = [term.word for term in terms if term.prefix]
    parts, params = [], {}
    if words:
        parts.append("plainto_tsquery('simple', :match)")
        params["match"] = " ".join(words)
    if prefixes:
        parts.append("to_tsquery('simple', :prefixes)")
        params["prefixes"] = " & ".join(f"'{word}':*" for word in prefixes)
    return "(" + " && ".join(parts) + ")", params


def search_snippet(text: str, query: str, width: int) -> str:
    """``text`` on one line (each run of whitespace one space), cut to at most ``width``
    characters centred on the first word of ``query`` it holds, found as a search finds it
    (whole, or its beginning for ``word*``; case and accents aside): what a list of hits
    shows of each. A cut end is marked ``…``; without such a word, the text's beginning."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    found = _first_match(flat, search_terms(query))
    start, length = found if found is not None else (0, 0)
    start = min(max(0, start - (width - length) // 2), len(flat) - width)
    piece = flat[start : start + width]
    if start + width < len(flat):
        piece = _whole_words(piece[:-1], keep="start") + "…"
    if start > 0:
        piece = "…" + _whole_words(piece[1:], keep="end")
    return piece


def _whole_words(piece: str, *, keep: str) -> str:
    """``piece`` without the word a cut split at its other end (kept whole if it is the only
    word): a snippet shows whole words."""
    if " " not in piece.strip():
        return piece
    if keep == "start":
        return piece.rsplit(" ", 1)[0].rstrip()
    return piece.split(" ", 1)[1].lstrip()


def _first_match(text: str, terms: list[Term]) -> tuple[int, int] | None:
    """Where in ``text`` the first word matching one of ``terms`` is, and its length."""
    wanted = [(_folded(term.word), term.prefix) for term in terms]
    for word in _WORD.finditer(text):
        folded = _folded(word.group())
        if any(folded.startswith(w) if prefix else folded == w for w, prefix in wanted):
            return word.start(), len(word.group())
    return None


_WORD = re.compile(r"\w+")


def _folded(word: str) -> str:
    """``word`` as the full-text indexes compare it: case folded, accents removed."""
    return "".join(c for c in unicodedata.normalize("NFKD", word.casefold()) if not _mark(c))


def _mark(character: str) -> bool:
    return unicodedata.combining(character) != 0


def hit_of(row: Any) -> SearchHit:
    return SearchHit.model_construct(  # of a row checked as it was read
        conversation_id=row["conversation_id"],
        section=row["section"],
        seq=row["seq"],
        run_id=row["run_id"],
        message=message_of(row),
    )
