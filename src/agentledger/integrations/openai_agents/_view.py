"""What a session's branch, turn and usage code works on: the session's items as its view
shows them (:class:`Entry`), its branches (:class:`Branch`), and the part of
``LedgerSession`` that code reads and writes (:class:`BranchedSession`), so that it needs
nothing else of the session's module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pydantic import JsonValue

from ..._agents_sdk_items import Item
from ...ledger import AgentRun, Conversation, Ledger

MAIN = "main"
"""The branch of the session's own conversation, which every session has."""


@dataclass(frozen=True)
class Entry:
    """An item of the session, with the key a removal names it by (``run id:index``)."""

    key: str
    item: Item
    conversation: bool

    @property
    def run_id(self) -> str:
        return self.key.rpartition(":")[0]


@dataclass(frozen=True)
class Branch:
    """A branch of a session, and the conversation that holds it."""

    id: str
    conversation_id: str


class BranchedSession(Protocol):
    """A session's id, ledger and current branch, how it reads a branch's items and runs and
    how it records a run that only says something in its metadata (``LedgerSession``'s)."""

    session_id: str
    ledger: Ledger
    _branch: Branch

    def _entries(
        self,
        conversation_id: str | None = None,
        *,
        every_item: bool = False,
        runs: int | None = None,
    ) -> list[Entry]: ...

    def _runs(self, conversation_id: str) -> list[AgentRun]: ...

    def _conversation(self, conversation_id: str) -> Conversation | None: ...

    def _record(
        self, metadata: dict[str, JsonValue], *, conversation_id: str | None = None
    ) -> bool: ...
