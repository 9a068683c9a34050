"""What an importer reads out of another program's file, in the ledger's terms: conversations
of turns, each turn a user message, the model calls it made (their tool calls with what each
returned) and, when the file has one, the answer. Pure values: each source turns its tables
into these, and one writer records them through ``ledger.turn``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from pydantic import JsonValue

from .._values import ToolCall, Usage

if TYPE_CHECKING:
    from ..ledger import Ledger

NO_RESULT = "the imported file holds no result for this tool call"
"""The error of a tool call whose result the file does not have (the program stopped, or its
user did not go on): recorded so, as every call of a step needs a result."""


@dataclass(frozen=True)
class ToolRun:
    """A tool call a model made, and what it returned (``result`` None: the file has none)."""

    call: ToolCall
    result: str | None
    error: str | None = None
    at: datetime | None = None
    """When the result was given back (the next model call's time), if known."""


@dataclass(frozen=True)
class ModelCall:
    """One model call of a turn: its text, tool calls, reasoning, and what it spent when the
    file says (``usage`` None: unknown, so unpriced)."""

    content: str
    at: datetime
    """When the call ended (its start and duration, or the time its output was stored)."""
    tools: tuple[ToolRun, ...] = ()
    started_at: datetime | None = None
    usage: Usage | None = None
    model: str | None = None
    reasoning: str | None = None
    metadata: dict[str, JsonValue] = field(default_factory=dict)


class TurnRecorder(Protocol):
    """A turn a source records itself (its messages mapped by an integration's own code)."""

    @property
    def model_calls(self) -> int:
        """How many model calls (steps) recording it makes."""
        ...

    @property
    def tool_executions(self) -> int: ...

    @property
    def answered(self) -> bool: ...

    def record(
        self,
        ledger: Ledger,
        conversation_id: str,
        metadata: dict[str, JsonValue],
        *,
        unanswered: str,
    ) -> None:
        """Record it as a run in ``conversation_id`` marked with ``metadata``, failed with
        ``unanswered`` when it has no answer."""
        ...


@dataclass(frozen=True)
class SourceTurn:
    """A user message and the model calls that answered it. ``key`` names it in its file (it
    is what makes a second import skip it). A turn with a ``recorder`` has no ``calls``: the
    recorder writes it, and says what it writes."""

    key: str
    user: str
    at: datetime
    calls: tuple[ModelCall, ...]
    recorder: TurnRecorder | None = None

    @property
    def model_calls(self) -> int:
        return self.recorder.model_calls if self.recorder is not None else len(self.calls)

    @property
    def tool_executions(self) -> int:
        if self.recorder is not None:
            return self.recorder.tool_executions
        return sum(len(call.tools) for call in self.calls)

    @property
    def answered(self) -> bool:
        return self.recorder.answered if self.recorder is not None else self.answer is not None

    @property
    def answer(self) -> ModelCall | None:
        """The last call, when it called no tool and said something: the turn's answer."""
        last = self.calls[-1] if self.calls else None
        return last if last is not None and not last.tools and last.content else None

    @property
    def steps(self) -> tuple[ModelCall, ...]:
        """The calls before the answer (all of them when there is none)."""
        return self.calls[:-1] if self.answer is not None else self.calls


@dataclass(frozen=True)
class SourceConversation:
    """A conversation of the file: ``key`` is its id there (a session id, a conversation id)."""

    key: str
    turns: tuple[SourceTurn, ...]
    title: str | None = None


def utc(text: str) -> datetime:
    """A time as the files write it (ISO 8601, or SQLite's ``YYYY-MM-DD HH:MM:SS``); one
    without a zone is UTC, as both programs write it."""
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
