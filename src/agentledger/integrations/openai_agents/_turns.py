"""A branch's turns, to choose one to branch from, as the SDK's ``AdvancedSQLiteSession``
lists and searches them: each begins with a user message of the branch, numbered from 1.

Everything here runs in a worker thread (the session's async methods hand it over).
"""

from __future__ import annotations

import json
import re
from datetime import UTC
from typing import Any

from ..._agents_sdk_items import text_of
from ...errors import UsageError
from ._branches import SQLITE_TIME, create, find, user_turns
from ._view import BranchedSession, Entry

PREVIEW = 100
"""The characters of a user message ``get_conversation_turns`` shows in ``content``."""


def listed(session: BranchedSession, branch_id: str | None) -> list[dict[str, Any]]:
    """The branch's turns: ``turn``, ``content`` (its first characters), ``full_content``,
    ``timestamp``, ``can_branch``."""
    return [_described(session, n, e, PREVIEW) for n, e in _numbered(session, branch_id)]


def containing(
    session: BranchedSession, search_term: str, branch_id: str | None
) -> list[dict[str, Any]]:
    """The branch's turns whose user message holds ``search_term`` (ASCII letters in either
    case, as SQLite's ``LIKE`` the SDK searches with matches them)."""
    pattern = re.compile(re.escape(search_term), re.IGNORECASE | re.ASCII)
    return [
        _described(session, n, entry, None)
        for n, entry in _numbered(session, branch_id)
        if pattern.search(text_of(entry.item))
    ]


def create_from_content(session: BranchedSession, search_term: str, branch_name: str | None) -> str:
    """Branch from the first turn of the current branch whose user message holds
    ``search_term``."""
    found = containing(session, search_term, None)
    if not found:
        raise UsageError(
            f"no user message of branch {session._branch.id!r} holds {search_term!r}: "
            "get_conversation_turns() lists them"
        )
    return create(session, found[0]["turn"], branch_name)


def _numbered(session: BranchedSession, branch_id: str | None) -> list[tuple[int, Entry]]:
    branch = session._branch if branch_id is None else find(session, branch_id)
    return list(enumerate(user_turns(session._entries(branch.conversation_id)), start=1))


def _described(
    session: BranchedSession, turn: int, entry: Entry, preview: int | None
) -> dict[str, Any]:
    content = entry.item.get("content", "")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if preview is not None and len(text) > preview:
        text = text[:preview] + "..."
    added = session.ledger.run(entry.run_id).started_at.astimezone(UTC)  # its run's start
    return {
        "turn": turn,
        "content": text,
        "full_content": content,
        "timestamp": added.strftime(SQLITE_TIME),
        "can_branch": True,
    }
