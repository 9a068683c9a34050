"""A LangGraph checkpoint another saver wrote (``SqliteSaver``'s), decoded and recorded in a
ledger by ``agentledger import``: its messages split into turns and each turn recorded through
the same :class:`._runs.GraphRuns` ``LedgerSaver`` records a live invocation with, so an
imported thread's rows are what the saver would have made of it.

The importer reads the file (with sqlite-utils) and loads this module only when it meets a
LangGraph file: LangGraph stays in this integration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import JsonValue

from ...ledger import Ledger
from ._messages import is_messages
from ._rows import residue, tool_calls_of
from ._runs import GraphRuns, begins_run

_PLACE = "imported"
"""The key the one run a :class:`GraphRuns` of an import holds open is kept under."""


@dataclass(frozen=True)
class ImportedTurn:
    """A human input of a checkpoint and the messages after it, up to the next input."""

    key: str
    """The input's LangChain id (its place in the thread when it has none)."""
    user: str
    messages: tuple[BaseMessage, ...]

    @property
    def model_calls(self) -> int:
        """How many AI messages become steps (the answer's included) when it is recorded."""
        return len(self._calls()[0])

    @property
    def tool_executions(self) -> int:
        """How many tool calls those steps make."""
        return sum(len(m.tool_calls) for m in self._calls()[0])

    @property
    def answered(self) -> bool:
        return self._calls()[1]

    def record(
        self,
        ledger: Ledger,
        conversation_id: str,
        metadata: dict[str, JsonValue],
        *,
        unanswered: str,
    ) -> None:
        """Record the turn as a run in ``conversation_id`` (``metadata`` its marks), failed
        with ``unanswered`` when the checkpoint holds no answer to it."""
        runs = GraphRuns(ledger)
        first, *rest = self.messages
        kept = residue(first)
        assert kept is not None  # a turn begins with a message that has one
        runs.begin(_PLACE, first, kept, conversation_id, metadata)
        for message in rest:
            runs.record(_PLACE, message, None)
        runs.end(_PLACE, error=unanswered)

    def _calls(self) -> tuple[list[AIMessage], bool]:
        """The AI messages recording makes steps of, and whether the last is the answer."""
        calls: list[AIMessage] = []
        for message in self.messages[1:]:
            if not isinstance(message, AIMessage) or residue(message) is None:
                continue
            if message.tool_calls:
                if tool_calls_of(message) is not None:
                    calls.append(message)
            elif message.text.strip():
                return [*calls, message], True
        return calls, False


@dataclass(frozen=True)
class ImportedCheckpoint:
    """What a thread's latest checkpoint holds for the import: its time and its turns."""

    ts: str
    """When it was saved (ISO 8601), the only time a checkpoint keeps."""
    turns: tuple[ImportedTurn, ...]


def imported_checkpoint(value_type: str, value: bytes) -> ImportedCheckpoint:
    """The checkpoint a saver stored as ``value`` (of LangGraph serializer's type
    ``value_type``), decoded by LangGraph's serializer: the messages of its channels of
    messages (whatever their names) cut into turns."""
    checkpoint: dict[str, Any] = JsonPlusSerializer().loads_typed((value_type, value))
    values: dict[str, Any] = checkpoint.get("channel_values") or {}
    messages = [m for v in values.values() if is_messages(v) for m in v]
    return ImportedCheckpoint(ts=str(checkpoint.get("ts", "")), turns=_turns(messages))


def _turns(messages: Sequence[BaseMessage]) -> tuple[ImportedTurn, ...]:
    """Each input that begins a run (what comes before the first is no turn) with the
    messages up to the next."""
    starts = [n for n, m in enumerate(messages) if begins_run(m) and residue(m) is not None]
    ends = [*starts[1:], len(messages)]
    return tuple(
        ImportedTurn(
            key=messages[start].id or f"#{start}",
            user=messages[start].text,
            messages=tuple(messages[start:end]),
        )
        for start, end in zip(starts, ends, strict=True)
    )
