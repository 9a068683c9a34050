"""Writing what a file holds into a ledger: every turn through ``ledger.turn`` (its steps, tool
results and answer), at the time the file says it happened, and each turn once.

A conversation imported is marked in its metadata with the kind of file and its id there; each
run with the turn's key. A second import reads those marks and skips what is there, so it adds
only what the file gained since (new turns of a conversation go on in the same conversation).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import JsonValue

from .._recording import Turn
from .._recording._turn import RECORDED_BY as RECORDED_BY_KEY
from .._values import utc_now
from ._agents_sdk import AgentsSdkSessions
from ._history import NO_RESULT, ModelCall, SourceConversation, SourceTurn
from ._langgraph import LangGraphCheckpoints
from ._llm import LlmLogs
from ._sources import Source, open_source, source_for

if TYPE_CHECKING:
    from ..ledger import Ledger

IMPORTED_FROM = "imported_from"
"""In the metadata of an imported conversation and of each of its runs: the kind of file it
came from (``agents-sdk``, ``llm``, ``langgraph``)."""
SOURCE_ID = "source_id"
"""Beside it: the conversation's id in the file, or the turn's key there."""
RECORDED_BY = "agentledger import"
"""The ``recorded_by`` of the runs an import records."""
NO_ANSWER = "the imported file holds no answer to this turn"
"""The error of an imported turn the file has no answer to (its program stopped, or failed)."""
PROGRESS_EVERY = 50
"""How many conversations go between two calls of ``progress``."""

SOURCES: tuple[Source, ...] = (AgentsSdkSessions(), LlmLogs(), LangGraphCheckpoints())
"""The kinds of file :func:`import_history` reads, in the order it tries to recognise them."""


@dataclass(frozen=True)
class ImportSummary:
    """What an import added (with ``dry_run``, would add) to the ledger."""

    path: str
    kind: str
    dry_run: bool
    conversations: int
    """Conversations that got turns: new ones, and those an earlier import began."""
    turns: int
    steps: int
    tool_executions: int
    unanswered: int
    """Turns among ``turns`` that the file has no answer to: recorded failed."""
    skipped: int
    """Turns already in the ledger from an earlier import: left as they are."""
    usage_recorded: bool
    """Whether the file says what each model call spent (else the steps are unpriced)."""


class _ImportClock:
    """The time the ledger stamps on what is written: moved to each imported message's time
    before it is written, never backwards within a turn."""

    def __init__(self) -> None:
        self.now = utc_now()

    def __call__(self) -> datetime:
        return self.now

    def move_to(self, moment: datetime | None) -> None:
        if moment is not None and moment > self.now:
            self.now = moment


@dataclass
class _Counts:
    conversations: int = 0
    turns: int = 0
    steps: int = 0
    tool_executions: int = 0
    unanswered: int = 0
    skipped: int = 0

    def add(self, turns: list[SourceTurn]) -> None:
        self.conversations += 1
        self.turns += len(turns)
        self.unanswered += sum(1 for t in turns if not t.answered)
        self.steps += sum(t.model_calls for t in turns)
        self.tool_executions += sum(t.tool_executions for t in turns)


def recognise(path: str | os.PathLike[str], kind: str | None = None) -> str:
    """The kind of the file at ``path`` (``agents-sdk``, ``llm``, ``langgraph``), checked as
    :func:`import_history` checks it, without a ledger: a file of another kind or version, or
    a missing extra, is the same clear error, raised before anything is opened or created."""
    source_path = Path(path)
    db = open_source(source_path)
    try:
        return source_for(db, source_path, kind, SOURCES).kind
    finally:
        db.conn.close()


def import_history(
    ledger: Ledger | None,
    path: str | os.PathLike[str],
    *,
    kind: str | None = None,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ImportSummary:
    """Import the conversations of the file at ``path`` into ``ledger`` (in its scope: a
    scoped handle imports into its tenant and owner), each turn as a run recorded through
    ``ledger.turn``, at the times the file gives. ``kind`` (``agents-sdk``, ``llm``,
    ``langgraph``) is recognised from the file's tables when not given; a file of another
    kind or version is an :class:`~agentledger.errors.ImportSourceError` naming what it is.
    Turns an earlier import brought in are skipped. ``dry_run`` counts what would be
    imported and writes nothing (``ledger`` may then be None: an empty ledger).
    ``progress(done, total)`` is called every :data:`PROGRESS_EVERY` conversations. Needs the
    ``import`` extra (sqlite-utils; a LangGraph file the ``langgraph`` extra too)."""
    if ledger is None and not dry_run:
        raise ValueError("a ledger is needed to import into: None is for a dry run only")
    source_path = Path(path)
    db = open_source(source_path)
    try:
        source = source_for(db, source_path, kind, SOURCES)
        conversations = source.conversations(db)
        counts = _import(ledger, source, conversations, dry_run, progress, source.count(db))
    finally:
        db.conn.close()
    return ImportSummary(
        path=str(source_path),
        kind=source.kind,
        dry_run=dry_run,
        usage_recorded=source.records_usage,
        **vars(counts),
    )


def _import(
    ledger: Ledger | None,
    source: Source,
    conversations: Iterable[SourceConversation],
    dry_run: bool,
    progress: Callable[[int, int], None] | None,
    total: int,
) -> _Counts:
    counts = _Counts()
    clock = _ImportClock()
    writer = ledger.with_clock(clock) if ledger is not None and not dry_run else None
    known = _imported_conversations(ledger, source.kind) if ledger is not None else {}
    for done, conversation in enumerate(conversations, 1):
        conversation_id = known.get(conversation.key)
        imported = _imported_turns(ledger, conversation_id)
        new = [turn for turn in conversation.turns if turn.key not in imported]
        counts.skipped += len(conversation.turns) - len(new)
        if new:
            counts.add(new)
            if writer is not None:
                _write(writer, clock, source.kind, conversation, conversation_id, new)
        if progress is not None and done % PROGRESS_EVERY == 0:
            progress(done, total)
    return counts


def _imported_conversations(ledger: Ledger, kind: str) -> dict[str, str]:
    """The conversations an earlier import of this kind made, by their id in the file."""
    found = ledger.conversations(metadata={IMPORTED_FROM: kind})
    return {str((c.metadata_ or {}).get(SOURCE_ID)): c.id for c in found}


def _imported_turns(ledger: Ledger | None, conversation_id: str | None) -> set[str]:
    """The keys of the turns already imported into the conversation."""
    if ledger is None or conversation_id is None:
        return set()
    runs = ledger.runs(conversation_id)
    marks = [run.metadata_ or {} for run in runs]
    return {str(mark[SOURCE_ID]) for mark in marks if SOURCE_ID in mark}


def _write(
    ledger: Ledger,
    clock: _ImportClock,
    kind: str,
    conversation: SourceConversation,
    conversation_id: str | None,
    turns: list[SourceTurn],
) -> None:
    """Record ``turns`` in the conversation (a new one, marked, when None)."""
    if conversation_id is None:
        clock.now = turns[0].at
        marks: dict[str, JsonValue] = {IMPORTED_FROM: kind, SOURCE_ID: conversation.key}
        made = ledger.create_conversation(title=conversation.title, metadata=marks)
        conversation_id = made.id
    for turn in turns:
        _write_turn(ledger, clock, kind, conversation_id, turn)


def _write_turn(
    ledger: Ledger, clock: _ImportClock, kind: str, conversation_id: str, turn: SourceTurn
) -> None:
    clock.now = turn.at
    metadata: dict[str, JsonValue] = {
        RECORDED_BY_KEY: RECORDED_BY,
        IMPORTED_FROM: kind,
        SOURCE_ID: turn.key,
    }
    if turn.recorder is not None:
        turn.recorder.record(ledger, conversation_id, metadata, unanswered=NO_ANSWER)
        return
    with ledger.turn(
        turn.user, conversation_id=conversation_id, agent_name=kind, metadata=metadata
    ) as recording:
        for call in turn.steps:
            _write_step(recording, clock, call)
        answer = turn.answer
        if answer is None:
            recording.fail(NO_ANSWER)
            return
        clock.move_to(answer.at)
        recording.answer(
            answer.content,
            usage=answer.usage,
            model=answer.model,
            reasoning=answer.reasoning,
            metadata=answer.metadata,
        )


def _write_step(recording: Turn, clock: _ImportClock, call: ModelCall) -> None:
    """A model call that is not the answer, with what its tool calls returned."""
    clock.move_to(call.at)
    step = recording.step(
        call.content or None,
        tool_calls=[run.call for run in call.tools],
        usage=call.usage,
        model=call.model,
        reasoning=call.reasoning,
        metadata=call.metadata,
        started_at=call.started_at,
    )
    for run in call.tools:
        clock.move_to(run.at)
        if run.result is None:
            step.tool_result(run.call.id, "", error=NO_RESULT)
        else:
            step.tool_result(run.call.id, run.result, error=run.error)
