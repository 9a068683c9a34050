"""A LangGraph thread's invocations as runs of the ledger, recorded through ``ledger.turn``.

LangGraph saves a checkpoint after each super-step, so a run is followed across the saver's
calls: the first human message a checkpoint brings when no run is open begins a run (its user
message); an AI message with tool calls is a step, recorded with the ``ToolMessage``\\ s that
answer its calls (its tool executions); the first AI message without tool calls is the answer,
which ends the run ``completed``. An ``interrupt()`` ends the open run ``interrupted`` (a
resumed graph goes on outside it); an error in a node ends it ``failed``, and so does the
next input when the graph ended before an answer. A message that fits none of these (a human
message in the middle of a run, what a node wrote after the answer or after a resume, an
invocation begun while another writer's run holds the thread's conversation, such as one a
killed process left until its lease expires) is no row: its checkpoint keeps it serialized.

A subgraph's namespace is a subagent's conversation under the thread's run: the first message
its model calls make begins a child run (its task the text of the subgraph's last message
before it), recorded as the thread's is, which its answer ends; that answer, come up to the
thread's graph, is the thread's run's answer too when nothing else answered it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from pydantic import JsonValue

from ..._recording import Turn, TurnStep
from ..._values import Usage
from ...errors import ConversationBusyError
from ...ledger import Ledger
from ._rows import (
    RESIDUE_KEY,
    finish_reason_of,
    model_of,
    residue,
    tool_calls_of,
    usage_of,
)

AGENT_NAME = "langgraph"
"""The agent name of the runs a graph's invocations are recorded as."""

NAMESPACE_KEY = "checkpoint_ns"
"""The run metadata key holding the namespace of the subgraph a run was recorded from."""

GRAPH_RUN_KEY = "graph_run_id"
"""The run metadata key holding LangGraph's own id of the invocation."""

Recorded = list[tuple[BaseMessage, str]]
"""Messages that became rows, each with the id of its row."""


@dataclass
class _Run:
    turn: Turn
    step: TurnStep | None = None
    asked: BaseMessage | None = None
    answers: dict[str, BaseMessage] = field(default_factory=dict)


def begins_run(message: BaseMessage) -> bool:
    """Whether ``message``, when no run of its thread is open, begins one: a human message
    with text (as text, not content blocks)."""
    return (
        isinstance(message, HumanMessage)
        and isinstance(message.content, str)
        and bool(message.text.strip())
    )


class GraphRuns:
    """The open run of each thread of one saver (one at a time per thread)."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._open: dict[str, _Run] = {}
        self._below: dict[tuple[str, str], _Run] = {}
        """The open run of each subgraph (namespace) of a thread, under the thread's."""
        self.lock = threading.RLock()
        """Held while a checkpoint's messages are recorded: LangGraph may save from threads."""

    def end(self, thread_id: str, *, error: str | None = None, interrupted: bool = False) -> None:
        """End thread ``thread_id``'s open run, if any, its subgraphs' first: interrupted, or
        failed with ``error``."""
        self._end_children(thread_id, error)
        run = self._open.pop(thread_id, None)
        if run is None:
            return
        if interrupted:
            run.turn.interrupt(error)
        else:
            run.turn.fail(error or "the graph invocation ended before an AI answer")

    def discard(self, thread_id: str, error: str) -> None:
        """Drop thread ``thread_id``'s open runs, whose last write failed with ``error`` (rolled
        back with the checkpoint it came with): each ended failed where what began it was
        committed before, forgotten where it was not."""
        places = [place for place in self._below if place[0] == thread_id]
        runs = [self._below.pop(place) for place in places]
        run = self._open.pop(thread_id, None)
        for each in [*runs, *([run] if run is not None else [])]:
            with contextlib.suppress(Exception):  # its begin rolled back: nothing to end
                each.turn.fail(error)

    def record(
        self,
        thread_id: str,
        message: BaseMessage,
        graph_run_id: str | None,
        *,
        ns: str = "",
        task: str = "",
    ) -> Recorded:
        """Record ``message``, new in namespace ``ns`` of thread ``thread_id``, in its run (a
        subgraph's, for a namespace, under the thread's, ``task`` its user message): the
        messages that became rows by it (a tool result makes its step's AI message one too)."""
        kept = residue(message)
        if kept is None:
            return []
        if ns:
            return self._record_below(thread_id, ns, message, kept, task)
        run = self._open.get(thread_id)
        if run is None:
            return self._begin(thread_id, message, kept, graph_run_id)
        return self._recorded(run, message, kept, lambda: self._end_children(thread_id))

    def answer_from_below(self, thread_id: str, message: BaseMessage) -> Recorded:
        """A subgraph's answer ``message`` came up to the thread's graph: the answer of the
        thread's open run too, when it has no step waiting."""
        run = self._open.get(thread_id)
        kept = residue(message)
        if run is None or run.step is not None or kept is None:
            return []
        if not isinstance(message, AIMessage) or message.tool_calls:
            return []
        self._end_children(thread_id)
        return self._recorded(run, message, kept, lambda: None, relayed=True)

    def _recorded(
        self,
        run: _Run,
        message: BaseMessage,
        kept: dict[str, JsonValue],
        before: Callable[[], None],
        *,
        relayed: bool = False,
    ) -> Recorded:
        if isinstance(message, AIMessage) and run.step is None:
            before()
            rows = self._model_call(run, message, kept, relayed=relayed)
        elif isinstance(message, ToolMessage):
            rows = self._tool_result(run, message, kept)
        else:
            return []
        if run.turn.result is not None:
            for place, open_run in list(self._open.items()):
                if open_run is run:
                    del self._open[place]
            for below, open_run in list(self._below.items()):
                if open_run is run:
                    del self._below[below]
        return rows

    def _record_below(
        self, thread_id: str, ns: str, message: BaseMessage, kept: dict[str, JsonValue], task: str
    ) -> Recorded:
        parent = self._open.get(thread_id)
        if parent is None or parent.step is not None:
            return []
        run = self._below.get((thread_id, ns))
        if run is None:
            if not isinstance(message, AIMessage) or not task.strip():
                return []
            turn = parent.turn.child(
                task,
                agent_name=ns.split(":")[0],
                metadata={"recorded_by": AGENT_NAME, NAMESPACE_KEY: ns},
            )
            turn.begin()
            run = self._below[(thread_id, ns)] = _Run(turn)
        return self._recorded(run, message, kept, lambda: None)

    def _end_children(self, thread_id: str, error: str | None = None) -> None:
        for place in [p for p in self._below if p[0] == thread_id]:
            self._below.pop(place).turn.fail(error or "the subgraph ended before an AI answer")

    def _begin(
        self,
        thread_id: str,
        message: BaseMessage,
        kept: dict[str, JsonValue],
        graph_run_id: str | None,
    ) -> Recorded:
        if not begins_run(message):
            return []
        self._ledger.graph_checkpoints.open_thread(thread_id)
        metadata: dict[str, JsonValue] = {"recorded_by": AGENT_NAME, GRAPH_RUN_KEY: graph_run_id}
        try:
            return self.begin(thread_id, message, kept, thread_id, metadata)
        except ConversationBusyError:
            # Another writer's run holds the thread (a process that died in an invocation,
            # until its lease expires and recover ends it): the checkpoint is saved all the
            # same, this invocation's messages serialized in it.
            return []

    def begin(
        self,
        thread_id: str,
        message: BaseMessage,
        kept: dict[str, JsonValue],
        conversation_id: str,
        metadata: dict[str, JsonValue],
    ) -> Recorded:
        """Open thread ``thread_id``'s run with the human ``message`` (one
        :func:`begins_run` takes; ``kept`` its residue) as its user message, in conversation
        ``conversation_id``: the messages :meth:`record` gets next are its steps, tool results
        and answer. Raises :class:`ConversationBusyError` when another writer's run holds
        the conversation."""
        assert isinstance(message.content, str)
        turn = self._ledger.turn(
            message.content,
            conversation_id=conversation_id,
            agent_name=AGENT_NAME,
            metadata=metadata,
            user_metadata={RESIDUE_KEY: kept},
        )
        turn.begin()
        self._open[thread_id] = _Run(turn)
        return [(message, turn.user_message.id)]

    def _model_call(
        self, run: _Run, message: AIMessage, kept: dict[str, JsonValue], *, relayed: bool = False
    ) -> Recorded:
        """A model call's message: a step, or the run's answer. A subgraph's answer
        ``relayed`` to the thread's run spent nothing there: its step below counts it."""
        assert isinstance(message.content, str)
        metadata: dict[str, JsonValue] = {RESIDUE_KEY: kept}
        spent, model, reason = usage_of(message), model_of(message), finish_reason_of(message)
        if relayed:
            spent, model = Usage(), None
        if message.tool_calls:
            calls = tool_calls_of(message)
            if calls is None:
                return []
            run.step = run.turn.step(
                message.content,
                tool_calls=calls,
                usage=spent,
                model=model,
                finish_reason=reason,
                metadata=metadata,
            )
            run.asked, run.answers = message, {}
            return []
        if not message.content.strip():
            return []
        run.turn.answer(
            message.content,
            usage=spent,
            model=model,
            cost_usd=0.0 if relayed else None,
            finish_reason=reason,
            metadata=metadata,
        )
        answer = run.turn.state.messages().last()
        assert answer is not None  # the answer just committed
        return [(message, answer.id)]

    def _tool_result(self, run: _Run, message: ToolMessage, kept: dict[str, JsonValue]) -> Recorded:
        step = run.step
        if step is None or message.tool_call_id not in step.waiting_for:
            return []
        assert isinstance(message.content, str)
        step.tool_result(
            message.tool_call_id,
            message.content,
            is_error=message.status == "error",
            metadata={RESIDUE_KEY: kept},
        )
        run.answers[message.tool_call_id] = message
        called = step.step.assistant_message
        if not step.recorded or run.asked is None or called is None:
            return []
        rows: Recorded = [(run.asked, called.id)]
        rows += [(run.answers[e.tool_call.id], e.id) for e in step.executions()]
        run.step, run.asked, run.answers = None, None, {}
        return rows
