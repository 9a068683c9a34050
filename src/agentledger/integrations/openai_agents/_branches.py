"""A session's branches, as the SDK's ``AdvancedSQLiteSession`` names them: a branch from a
turn is a fork of the session's conversation.

The session's own conversation is the branch ``main``. ``create_branch_from_turn(n)`` makes
a conversation of its own for the new branch (id ``<session id>/branch/<branch id>``) whose
metadata names what it was forked from: the conversation of the branch it was made from, how
many of that conversation's runs it had seen, and the user message that begins turn ``n``.
Nothing is copied: the branch begins with the items of those runs before that message, read
from where they are, and its own runs follow. A session's runs commit in order and a
completed run never changes, so what a branch was forked with never changes either, whatever
is later added to, popped from or cleared in the branch it came from.

``delete_branch`` records a run in the branch's conversation saying so: the branch leaves
the session's listings, usage and switching, its rows stay (what a user said and was shown is
never lost, and branches forked from it still begin with what they shared), and its id is not
given again, as the SDK reserves it.

Everything here runs in a worker thread (the session's async methods hand it over).
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from pydantic import JsonValue

from ..._agents_sdk_items import BRANCH_DELETED_KEY, BRANCH_KEY, FORKED_FROM_KEY, SESSION_KEY
from ...errors import UsageError
from ...ledger import Conversation
from ._view import MAIN, Branch, BranchedSession, Entry

SQLITE_TIME = "%Y-%m-%d %H:%M:%S"
"""The form of the SDK's times (SQLite's ``CURRENT_TIMESTAMP``, in UTC)."""


def conversation_id_of(session: BranchedSession, branch_id: str) -> str:
    if branch_id == MAIN:
        return session.session_id
    return f"{session.session_id}/branch/{branch_id}"


def forked_with(
    session: BranchedSession, conversation: Conversation, *, every_item: bool
) -> list[Entry]:
    """The items a branch's conversation was forked with (none for ``main``)."""
    fork = (conversation.metadata_ or {}).get(FORKED_FROM_KEY)
    if not isinstance(fork, dict):
        return []
    source, runs = str(fork["conversation"]), fork["runs"]
    entries = session._entries(
        source, every_item=every_item, runs=runs if isinstance(runs, int) else 0
    )
    keys = [e.key for e in entries]
    return entries[: keys.index(fork["before"])] if fork["before"] in keys else entries


def user_turns(entries: list[Entry]) -> list[Entry]:
    """The user messages of a branch's items, one per turn: turn ``n`` begins with the
    ``n``-th (as the SDK numbers a branch's turns)."""
    return [e for e in entries if e.item.get("role") == "user"]


def live(session: BranchedSession) -> list[tuple[Branch, Conversation]]:
    """The session's branches that were not deleted, with their conversations, oldest
    first."""
    found = session.ledger.conversations(metadata={SESSION_KEY: session.session_id})
    branches = []
    for conversation in sorted(found, key=lambda c: (c.created_at, c.id)):
        name = (conversation.metadata_ or {}).get(BRANCH_KEY, MAIN)
        branch = Branch(str(name), conversation.id)
        if conversation.id == conversation_id_of(session, branch.id) and not _deleted(
            session, branch
        ):
            branches.append((branch, conversation))
    return branches


def _deleted(session: BranchedSession, branch: Branch) -> bool:
    runs = session._runs(branch.conversation_id)
    return any((r.metadata_ or {}).get(BRANCH_DELETED_KEY) for r in runs)


def find(session: BranchedSession, branch_id: str) -> Branch:
    """The branch ``branch_id`` of the session; :class:`UsageError` when it has none."""
    if branch_id == MAIN:
        return Branch(MAIN, session.session_id)
    for branch, _ in live(session):
        if branch.id == branch_id:
            return branch
    raise UsageError(
        f"the session {session.session_id!r} has no branch {branch_id!r}: list_branches() "
        "lists those it has"
    )


def entries_of(session: BranchedSession, branch_id: str) -> list[Entry]:
    return session._entries(find(session, branch_id).conversation_id)


def create(session: BranchedSession, turn_number: int, branch_name: str | None) -> str:
    """Fork the current branch before its turn ``turn_number`` into a new branch, and switch
    the session to it."""
    if branch_name is not None and not branch_name.strip():
        raise UsageError("a branch name must have a visible character: give one, or None")
    current = session._branch
    seen = len(session._runs(current.conversation_id))  # first: the items read are theirs
    turns = user_turns(session._entries(runs=seen))
    if not 1 <= turn_number <= len(turns):
        raise UsageError(
            f"turn {turn_number} of branch {current.id!r} has no user message to branch "
            f"from: the branch has {len(turns)} turn(s), numbered from 1"
        )
    fork: dict[str, JsonValue] = {
        "conversation": current.conversation_id,
        "runs": seen,
        "before": turns[turn_number - 1].key,
        "turn": turn_number,
    }
    branch_id = branch_name or _new_name(session, turn_number)
    conversation_id = _reserve(session, branch_id, fork)
    session._branch = Branch(branch_id, conversation_id)
    return branch_id


def _new_name(session: BranchedSession, turn_number: int) -> str:
    """A branch id no branch of the session has had, as the SDK makes one up."""
    base = f"branch_from_turn_{turn_number}_{int(session.ledger.clock().timestamp())}"
    name, suffix = base, 1
    while session._conversation(conversation_id_of(session, name)) is not None:
        suffix += 1
        name = f"{base}_{suffix}"
    return name


def _reserve(session: BranchedSession, branch_id: str, fork: dict[str, JsonValue]) -> str:
    """The new branch's conversation. Its id is the branch's, so a branch id is taken once
    in a session, whoever takes it: the database refuses a second conversation of that id."""
    conversation_id = conversation_id_of(session, branch_id)
    taken = UsageError(
        f"the branch id {branch_id!r} has been used in session {session.session_id!r}: "
        "choose another (a deleted branch's id is not given again)"
    )
    if branch_id == MAIN or session._conversation(conversation_id) is not None:
        raise taken
    metadata: dict[str, Any] = {
        SESSION_KEY: session.session_id,
        BRANCH_KEY: branch_id,
        FORKED_FROM_KEY: fork,
    }
    try:
        session.ledger.create_conversation(conversation_id=conversation_id, metadata=metadata)
    except Exception as exc:
        if session._conversation(conversation_id) is not None:  # another handle took it first
            raise taken from exc
        raise
    return conversation_id


def delete(session: BranchedSession, branch_id: str, force: bool) -> None:
    """Take the branch out of the session, as the SDK's ``delete_branch`` refuses and
    allows it."""
    if not branch_id or not branch_id.strip():
        raise UsageError("delete_branch needs the id of a branch: list_branches() lists them")
    if branch_id == MAIN:
        raise UsageError("the branch 'main' is the session's own: it cannot be deleted")
    branch = find(session, branch_id)
    if branch == session._branch:
        if not force:
            raise UsageError(
                f"the branch {branch_id!r} is the current one: switch to another first, or "
                "pass force=True (which switches to 'main')"
            )
        session._branch = find(session, MAIN)
    session._record({BRANCH_DELETED_KEY: True}, conversation_id=branch.conversation_id)


def others(session: BranchedSession) -> list[str]:
    """The conversations of the session's branches but ``main`` (``clear_session`` deletes
    them)."""
    return [branch.conversation_id for branch, _ in live(session) if branch.id != MAIN]


def listed(session: BranchedSession) -> list[dict[str, Any]]:
    """The session's branches as the SDK's ``list_branches`` describes them."""
    described = []
    for branch, conversation in live(session):
        entries = session._entries(branch.conversation_id)
        described.append(
            {
                "branch_id": branch.id,
                "message_count": len(entries),
                "user_turns": len(user_turns(entries)),
                "is_current": branch == session._branch,
                "created_at": conversation.created_at.astimezone(UTC).strftime(SQLITE_TIME),
            }
        )
    return described
