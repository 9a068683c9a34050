"""How a run is recorded: the recorder interface, its in-memory default, and ``RunResult``.

``Agent.run`` drives a run through a :class:`Recorder`: ``begin_run`` when the user message
arrives, ``record_step`` after every step, then ``commit_run`` or ``fail_run``. The SQL ledger
(:mod:`agentledger.ledger`) implements the same interface; the core never imports it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from ._ids import new_id
from .context import Compaction
from .continuation import StopReason
from .errors import ConversationBusyError, NotFoundError
from .messages import Message, Messages
from .state import AgentState, AgentStatus
from .usage import Spend, Usage

SPAWNED_BY = "spawned_by"
"""The key, in a subagent run's metadata, of the idempotency key of the tool call that spawned
it: a parent that redoes a step finds the child it already started instead of starting another."""

FILED_SECTIONS = (AgentState.DEFAULT_SECTION, AgentState.EXECUTION_BUFFER_SECTION)


class RunResult(BaseModel):
    """What ``Agent.run`` (and ``resume``) returns: the run's ids, answer, outcome and state."""

    model_config = ConfigDict(frozen=True)

    conversation_id: str
    run_id: str
    answer: str | None
    status: AgentStatus
    stop_reason: StopReason | None
    usage: Usage
    """The run's own steps."""
    cost_usd: float | None
    error: str | None
    spend: Spend
    """The run's own steps and its subagents' run trees: what counts against its limits."""
    child_run_ids: tuple[str, ...] = ()
    """The subagent runs its tools started, in order."""
    state: AgentState

    @classmethod
    def of(cls, state: AgentState) -> RunResult:
        if state.run_id is None:
            raise ValueError("a RunResult needs a state whose run has begun")
        return cls(
            conversation_id=state.conversation_id,
            run_id=state.run_id,
            answer=state.answer(),
            status=state.status,
            stop_reason=state.stop_reason,
            usage=state.usage,
            cost_usd=state.cost_usd,
            error=state.error,
            spend=state.spend(),
            child_run_ids=tuple(
                t.child_run_id
                for e in state.step_executions
                for t in e.step.tool_executions
                if t.child_run_id is not None
            ),
            state=state,
        )


class Recorder(Protocol):
    """Where runs are recorded. Each method is one transaction of the run's life."""

    def load_conversation(self, conversation_id: str | None) -> AgentState:
        """A state holding the conversation (a new one when ``conversation_id`` is None)."""
        ...

    def begin_run(
        self, state: AgentState, *, user_message: Message | None, agent_name: str
    ) -> None:
        """Take the conversation's lease, store the user message, open the run."""
        ...

    def record_step(self, before: AgentState, after: AgentState) -> None:
        """Store the step ``after`` added, with the messages it filed, all or nothing."""
        ...

    def commit_run(self, state: AgentState) -> None:
        """Append the run's conversation messages, flush its buffer, close it, free the lease.

        When it raises, nothing of the commit took effect and the run is still held: the caller
        ends it with :meth:`fail_run` (``Agent`` does).
        """
        ...

    def fail_run(self, state: AgentState, error: str | None = None) -> None:
        """Mark the run failed, keeping its buffer and steps, and free the lease. Its totals are
        those of the steps recorded."""
        ...

    def claim_run(self, run_id: str, *, stale_after: float | None = None) -> AgentState:
        """Take over a stale or failed run: its state, rebuilt, ready to continue."""
        ...

    def record_compaction(
        self,
        state: AgentState,
        compaction: Compaction,
        *,
        summary: Message | None,
        moved: Iterable[Message],
    ) -> None:
        """Record a compaction of ``state``'s conversation. With a ``summary``, all or nothing:
        the summary joins the ``summary`` section, and ``moved`` (the oldest conversation
        messages) and the summaries before it leave the context, kept and pointing at it.
        Raises :class:`ConversationBusyError` while a run holds the conversation, or when the
        messages are no longer in its context."""
        ...

    def stale_run_ids(self, stale_after: float | None = None) -> Sequence[str]:
        """Top-level runs still ``running`` whose process is gone (lease expired, or heartbeat
        older than ``stale_after`` seconds). A stale subagent run is not listed: resuming its
        root redoes the spawn, which finds it and resumes it with the subagent's own agent."""
        ...

    def find_child_run(self, parent_run_id: str, spawned_by: str) -> tuple[str, AgentStatus] | None:
        """The subagent run that the tool call ``spawned_by`` (its idempotency key) of run
        ``parent_run_id`` started, if there is one, with its status."""
        ...

    def run_result(self, run_id: str) -> RunResult:
        """The result of a run that ended, rebuilt from what was recorded."""
        ...


def filed_messages(before: AgentState, after: AgentState) -> list[tuple[str, Message]]:
    """The messages a step filed in the conversation and the execution buffer, by section.

    Sections only grow during a step, so this is the new tail of each; a section the step
    cleared (the buffer, when the run stops) contributes nothing.
    """
    filed: list[tuple[str, Message]] = []
    for section in FILED_SECTIONS:
        old = before.store.section(section).messages()
        new = after.store.section(section).messages()
        filed.extend((section, m) for m in _new_tail(old, new))
    return filed


def _new_tail(old: Messages, new: Messages) -> Messages:
    if len(new) < len(old):
        return Messages()
    if old and new[len(old) - 1].id != old[-1].id:
        known = {m.id for m in old}
        return new.filter(lambda m: m.id not in known)
    return new[len(old) :]


class InMemoryRecorder:
    """The default recorder: conversations kept in this process, gone when it ends.

    It keeps the same rules as the SQL ledger (one running run per conversation, the
    conversation holding only committed messages), so code written against ``Agent.run``
    behaves the same before a ledger is configured.
    """

    def __init__(self) -> None:
        self._conversations: dict[str, AgentState] = {}
        self._runs: dict[str, AgentState] = {}
        self._busy: dict[str, str] = {}
        self._compactions: dict[str, list[Compaction]] = {}
        self._lock = threading.Lock()

    def load_conversation(self, conversation_id: str | None) -> AgentState:
        with self._lock:
            if conversation_id is None:
                state = AgentState.empty(conversation_id=new_id())
                self._conversations[state.conversation_id] = state
                return state
            if conversation_id not in self._conversations:
                raise NotFoundError(
                    f"no conversation {conversation_id!r} in this process's in-memory recorder; "
                    "start one with run(text) and pass the conversation_id it returns "
                    "(configure a ledger to keep conversations across processes)"
                )
            return self._conversations[conversation_id]

    def begin_run(
        self, state: AgentState, *, user_message: Message | None, agent_name: str
    ) -> None:
        with self._lock:
            holder = self._busy.get(state.conversation_id)
            if holder is not None and holder != state.run_id:
                raise ConversationBusyError(
                    f"conversation {state.conversation_id} is busy: run {holder} is in progress "
                    "on it. Wait for it to finish, or continue it with Agent.resume."
                )
            assert state.run_id is not None
            self._busy[state.conversation_id] = state.run_id
            self._runs[state.run_id] = state
            if user_message is not None:  # what a user said is kept even if the run fails
                stored = self._conversations[state.conversation_id]
                self._conversations[state.conversation_id] = stored.with_messages(
                    stored.messages().append(user_message)
                )

    def record_step(self, before: AgentState, after: AgentState) -> None:
        with self._lock:
            assert after.run_id is not None
            self._runs[after.run_id] = after

    def commit_run(self, state: AgentState) -> None:
        with self._lock:
            self._conversations[state.conversation_id] = state
            assert state.run_id is not None
            self._runs[state.run_id] = state
            self._release(state)

    def fail_run(self, state: AgentState, error: str | None = None) -> None:
        with self._lock:
            assert state.run_id is not None
            self._runs[state.run_id] = state.model_copy(update={"status": AgentStatus.FAILED})
            self._release(state)

    def record_compaction(
        self,
        state: AgentState,
        compaction: Compaction,
        *,
        summary: Message | None,
        moved: Iterable[Message],
    ) -> None:
        with self._lock:
            cid = state.conversation_id
            if summary is not None:
                if cid in self._busy:
                    raise ConversationBusyError(
                        f"conversation {cid} is busy: run {self._busy[cid]} is in progress on "
                        "it. Compact it once the run has ended."
                    )
                stored = self._conversations[cid]
                replaced = {m.id for m in moved}
                if not replaced <= {m.id for m in stored.messages()}:
                    raise ConversationBusyError(
                        f"conversation {cid} changed while its summary was being written: "
                        "nothing was changed; load it and compact again"
                    )
                kept = stored.messages().filter(lambda m: m.id not in replaced)
                store = (
                    stored.store.section(AgentState.SUMMARY_SECTION)
                    .set_messages(summary)
                    .section(AgentState.BUFFER_SECTION)
                    .clear()
                    .section(AgentState.DEFAULT_SECTION)
                    .set_messages(kept)
                )
                self._conversations[cid] = stored.with_message_store(store)
            self._compactions.setdefault(cid, []).append(compaction)

    def compactions(self, conversation_id: str) -> list[Compaction]:
        """The compactions of a conversation in this process, oldest first."""
        with self._lock:
            return list(self._compactions.get(conversation_id, ()))

    def _release(self, state: AgentState) -> None:
        if self._busy.get(state.conversation_id) == state.run_id:
            del self._busy[state.conversation_id]

    def claim_run(self, run_id: str, *, stale_after: float | None = None) -> AgentState:
        with self._lock:
            state = self._runs.get(run_id)
            if state is None or state.status is not AgentStatus.FAILED:
                raise NotFoundError(
                    f"no failed run {run_id!r} to continue in this process's in-memory recorder"
                )
            self._busy[state.conversation_id] = run_id
            return state.model_copy(update={"status": AgentStatus.RUNNING})

    def stale_run_ids(self, stale_after: float | None = None) -> Sequence[str]:
        return ()  # a run in this process cannot outlive it

    def find_child_run(self, parent_run_id: str, spawned_by: str) -> tuple[str, AgentStatus] | None:
        with self._lock:
            for run_id, state in self._runs.items():
                if (
                    state.parent_run_id == parent_run_id
                    and state.metadata.get(SPAWNED_BY) == spawned_by
                ):
                    return run_id, state.status
        return None

    def run_result(self, run_id: str) -> RunResult:
        with self._lock:
            state = self._runs.get(run_id)
        if state is None:
            raise NotFoundError(f"no run {run_id!r} in this process's in-memory recorder")
        return RunResult.of(state)
