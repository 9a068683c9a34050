"""A session's events as runs of the ledger, recorded through ``ledger.turn`` in the
transaction that stores each event (an event refused as stale records nothing).

ADK appends an invocation's events one at a time, so the run each session's invocation is
stays open between appends: a user's text begins a run (its user message); a model event with
function calls is a step, with the event's ``usage_metadata``, recorded when the function
responses that answer its calls come (its tool executions); a final response with text is the
answer, which ends the run ``completed``. A run left open when the next user text comes, or
when its session is deleted, is ended ``interrupted``. An event that fits none of these (an
agent transfer, a state change, content that is not text) is kept whole by its row only.

Once the rows holding an event's texts exist, the event's row keeps only its residue and
their ids (``AdkSessions.residue``): no text is stored twice. An event whose
residue would not rebuild it exactly stays whole.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

from google.adk.events.event import Event
from google.genai import types
from pydantic import JsonValue

from ..._recording import Turn, TurnStep
from ..._values import ToolCall, Usage
from ...errors import ConversationBusyError
from ...ledger import AdkSessions, Ledger, PartText
from .._residue import kept_if_rebuilt

AGENT_NAME = "adk"
"""The agent name of the runs a session's invocations are recorded as (when the event names
no agent)."""

SUPERSEDED = "a new user message came before the ADK invocation's answer"
DELETED = "the ADK session was deleted before the invocation's answer"


@dataclass(frozen=True)
class _Stored:
    """An event as its append stored it: its session's conversation, its row, the event and
    its JSON, and its content's parts."""

    conversation_id: str
    row_id: str
    event: Event
    dumped: dict[str, JsonValue]
    parts: list[types.Part]


@dataclass
class _Run:
    turn: Turn
    step: TurnStep | None = None
    pending: list[_Stored] = field(default_factory=list)
    """The events whose texts the step in progress will hold once it is recorded."""


class SessionRuns:
    """The open run of each session of one service (by its conversation)."""

    def __init__(self, ledger: Ledger, store: AdkSessions) -> None:
        self._ledger = ledger
        self._store = store
        self._open: dict[str, _Run] = {}
        self.lock = threading.Lock()
        """Held while an event is stored and recorded: ADK appends from worker threads."""

    def record(
        self, conversation_id: str, row_id: str, event: Event, dumped: dict[str, JsonValue]
    ) -> None:
        """Record ``event``, stored as row ``row_id`` of session ``conversation_id``
        (``dumped`` as it was stored), in the session's run (see the module)."""
        parts = list(event.content.parts or []) if event.content else []
        stored = _Stored(conversation_id, row_id, event, dumped, parts)
        run = self._open.get(conversation_id)
        if (
            event.author == "user"
            and _text_of(parts) is not None
            and not _calls_or_responses(parts)
        ):
            self.end(conversation_id, SUPERSEDED)
            self._begin(stored)
        elif run is None:
            return
        elif run.step is not None:
            self._responses(run, stored)
        elif event.get_function_calls():
            self._step(run, stored)
        elif event.is_final_response():
            self._answer(run, stored)

    def end(self, conversation_id: str, reason: str) -> None:
        """End session ``conversation_id``'s open run, if any, ``interrupted``."""
        run = self._open.pop(conversation_id, None)
        if run is not None and run.turn.result is None:
            run.turn.interrupt(reason)

    def _begin(self, stored: _Stored) -> None:
        text = _text_of(stored.parts)
        assert text is not None  # record() checked
        turn = self._ledger.turn(
            text, conversation_id=stored.conversation_id, agent_name=AGENT_NAME
        )
        try:
            turn.begin()
        except ConversationBusyError:
            return  # another handle's run is open on the session: the event is kept whole
        self._open[stored.conversation_id] = _Run(turn)
        user = turn.user_message
        self._refer(stored, [user.id], {user.id: PartText(text)})

    def _step(self, run: _Run, stored: _Stored) -> None:
        event = stored.event
        calls = [
            ToolCall(id=call.id, name=call.name or "", arguments=dict(call.args or {}))
            for call in event.get_function_calls()
            if call.id
        ]
        if len(calls) != len(event.get_function_calls()):
            return  # a call without an id cannot be answered: kept whole
        texts = [part.text for part in stored.parts if part.text is not None]
        run.step = run.turn.step(
            "".join(texts) or None,
            tool_calls=calls,
            usage=_usage_of(event),
            model=event.model_version,
            finish_reason=_finish_reason_of(event),
        )
        run.pending = [stored]

    def _responses(self, run: _Run, stored: _Stored) -> None:
        step = run.step
        assert step is not None  # record() checked
        answered = [
            part.function_response
            for part in stored.parts
            if part.function_response is not None and part.function_response.id in step.waiting_for
        ]
        if not answered:
            return
        for response in answered:
            assert response.id is not None  # it is one step.waiting_for names
            step.tool_result(response.id, json.dumps(response.response))
        run.pending.append(stored)
        if not step.recorded:
            return
        held = self._held(step)
        for pending in run.pending:
            self._refer(pending, [_row_of(part, held, step) for part in pending.parts], held.texts)
        run.step, run.pending = None, []

    def _answer(self, run: _Run, stored: _Stored) -> None:
        text = _text_of(stored.parts)
        if text is None or not text.strip():
            return
        event = stored.event
        run.turn.answer(
            text,
            usage=_usage_of(event),
            model=event.model_version,
            finish_reason=_finish_reason_of(event),
        )
        self._open.pop(stored.conversation_id, None)
        answer = run.turn.state.messages().last()
        if answer is not None and len(stored.parts) == 1:
            self._refer(stored, [answer.id], {answer.id: PartText(text)})

    def _held(self, step: TurnStep) -> _Held:
        """What the rows of a recorded ``step`` hold: its assistant message's text and each
        tool execution's arguments and result, by row id."""
        texts: dict[str, PartText] = {}
        message = step.step.assistant_message
        if message is not None:
            texts[message.id] = PartText(message.content)
        executions = {e.tool_call.id: e for e in step.executions()}
        for execution in executions.values():
            texts[execution.id] = PartText(execution.result, dict(execution.tool_call.arguments))
        return _Held(texts, {call: e.id for call, e in executions.items()})

    def _refer(self, stored: _Stored, ids: list[str | None], texts: dict[str, PartText]) -> None:
        """Keep ``stored``'s row as its residue and ``ids``, if they rebuild the event."""
        if not any(ids):
            return
        store, dumped = self._store, stored.dumped
        kept = kept_if_rebuilt(
            dumped, store.residue(dumped, ids), lambda k: store.rebuilt(k, ids, texts)
        )
        if kept is not None:
            store.refer(stored.row_id, kept, ids)


@dataclass(frozen=True)
class _Held:
    texts: dict[str, PartText]
    by_call: dict[str, str]
    """The tool execution of each call id."""


def _row_of(part: types.Part, held: _Held, step: TurnStep) -> str | None:
    """The row holding ``part``'s text: its call's or response's tool execution, or the
    step's assistant message for the step's only text."""
    if part.function_call is not None:
        return held.by_call.get(part.function_call.id or "")
    if part.function_response is not None:
        return held.by_call.get(part.function_response.id or "")
    message = step.step.assistant_message
    if part.text is not None and message is not None and message.content == part.text:
        return message.id
    return None


def _text_of(parts: list[types.Part]) -> str | None:
    """The text of content that is one text part and nothing else."""
    if len(parts) != 1 or parts[0].text is None or parts[0].thought:
        return None
    return parts[0].text


def _calls_or_responses(parts: list[types.Part]) -> bool:
    return any(p.function_call is not None or p.function_response is not None for p in parts)


def _usage_of(event: Event) -> Usage | None:
    """The tokens of the model call that made ``event`` (its ``usage_metadata``)."""
    spent = event.usage_metadata
    if spent is None:
        return None
    return Usage(
        input_tokens=spent.prompt_token_count or 0,
        output_tokens=spent.candidates_token_count or 0,
        cache_read_tokens=spent.cached_content_token_count or 0,
        reasoning_tokens=spent.thoughts_token_count or 0,
    )


def _finish_reason_of(event: Event) -> str | None:
    reason = event.finish_reason
    return None if reason is None else str(reason.value).lower()
