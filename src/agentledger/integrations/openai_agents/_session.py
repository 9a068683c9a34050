"""``LedgerSession``: the OpenAI Agents SDK's ``Session`` protocol over an agentledger ledger.

The session's id is its conversation's id. Each ``add_items`` call is one ledger run, recorded
through the ledger's recorder as any run is (begin, a step per model call, commit), all in one
transaction (``Ledger.together``), which commits once or not at all: the user
and assistant messages go to ``conversation_messages``, every other item to the run's steps
and tool executions. Nothing is ever deleted: ``pop_item`` and ``clear_session`` are runs too,
whose metadata names what they took out of the session (see :class:`LedgerSession`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from agents import Agent, RunContextWrapper, RunHooks, RunResult
from agents.items import ModelResponse
from agents.memory import SessionSettings
from agents.memory.session import _CompactionSnapshot
from agents.memory.session_settings import resolve_session_limit
from pydantic import JsonValue

from ..._agents_sdk_items import (
    BRANCH_DELETED_KEY,
    CLEARED_KEY,
    COMPACTION_KEY,
    INDEX_KEY,
    ITEM_KEY,
    ITEMS_KEY,
    REMOVED_KEY,
    RUN_KEY,
    SESSION_KEY,
    Batch,
    Item,
    is_compaction,
    rebuilt_item,
    split_batch,
    stored_items,
    text_of,
)
from ..._values import (
    AgentState,
    AgentStatus,
    Message,
    Role,
    StepExecution,
    check_storable,
    new_id,
)
from ...errors import ConversationBusyError, NotFoundError, UsageError
from ...ledger import AgentRun, Conversation, Ledger
from .._ledger_argument import a_ledger
from . import _branches, _turns, _usage
from ._steps import ModelCall, step_execution, usage_of
from ._view import MAIN, Branch, Entry

T = TypeVar("T")

AGENT_NAME = "openai-agents"
"""The ``agent_name`` of the runs a session records (``agent_runs.agent_name``)."""


class LedgerSession:
    """An OpenAI Agents SDK session kept in an agentledger :class:`~agentledger.ledger.Ledger`.

    ``Runner.run(agent, text, session=LedgerSession("user-42", ledger))``: the session
    ``session_id`` is the conversation whose id is ``session_id`` (created on the first
    write, with ``{"openai_agents_session": session_id}`` in its metadata), so any handle on
    the same ledger opened with the same id continues it.

    ``get_items()`` returns what the next model call should see. With ``separate_trace=True``
    (the default) that is the conversation: the user and assistant messages, the tool calls,
    their outputs and the reasoning of earlier turns left out (they stay in the run's trace)
    but the ``compaction`` items ``responses.compact`` puts in place of what it compacted kept.
    With ``separate_trace=False``, every item in the order added, as the SDK's own sessions
    return them. Either way each item comes back exactly as it was added.

    Pass ``hooks=session.hooks`` to ``Runner.run`` to record each model call's usage (and the
    agent that made it) on the step and run that hold its output.

    ``pop_item()`` takes the newest item of the session's view (the newest conversation
    message by default, the newest item of any kind with ``separate_trace=False``) out of the
    session, and ``clear_session()`` every item: both record a run naming what they removed,
    and ``get_items()`` leaves it out from then on. The rows stay: what a user said and was
    shown is never lost (``Ledger.history`` still holds it).

    The usage and branch operations of the SDK's ``AdvancedSQLiteSession`` are here under its
    names: usage per session, turn and tool read from the runs' rows (``store_run_usage``
    stores nothing: the hooks did), and branches, each a conversation forked from a turn of
    another without copying it (see ``_branches``); the session reads and writes its current
    branch, ``main`` (the session's own conversation) until it switches.

    The SDK awaits each method; the ledger is synchronous, so each runs in a worker thread
    (``asyncio.to_thread``), as ``Agent.arun`` runs its ledger writes: the event loop never
    waits on the database.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        ledger: Ledger,
        *,
        separate_trace: bool = True,
        session_settings: SessionSettings | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise UsageError(
                f"a session id must be a non-empty string, not {session_id!r}: it is the id "
                "of the session's conversation in the ledger"
            )
        check_storable(session_id, "the session id")
        ledger = a_ledger(ledger, "LedgerSession")
        self.session_id = session_id
        self.ledger = ledger
        self.separate_trace = separate_trace
        self.session_settings = session_settings or SessionSettings()
        self._branch = Branch(MAIN, session_id)
        self._model_calls: deque[ModelCall] = deque()
        self.hooks: RunHooks[Any] = _UsageHooks(self._model_calls)
        """``RunHooks`` to give ``Runner.run`` (``hooks=session.hooks``): they record each
        model call's usage with the items it produced."""

    def __repr__(self) -> str:
        return f"LedgerSession({self.session_id!r}, {self.ledger!r})"

    # --- the Session protocol ---------------------------------------------------------------

    async def get_items(self, limit: int | None = None, branch_id: str | None = None) -> list[Any]:
        """The session's items (of the branch ``branch_id``, by default the current one),
        oldest first; the newest ``limit`` of them when given (or when
        ``session_settings.limit`` is set)."""
        limit = resolve_session_limit(limit, self.session_settings)
        if branch_id is None:
            entries = await asyncio.to_thread(self._entries)
        else:
            entries = await asyncio.to_thread(_branches.entries_of, self, branch_id)
        items = [e.item for e in entries]
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return items

    async def add_items(self, items: list[Any]) -> None:
        """Record ``items`` as one run: refused whole, with nothing written, when an item
        cannot be stored."""
        stored = stored_items(items)
        if not stored:
            return
        batch = split_batch(stored)
        if batch.messages and batch.messages[0][2] is Role.USER:
            # A new turn: a model call still waiting for its items belonged to a turn that
            # never saved them (it failed), and must not be taken for this turn's.
            self._model_calls.clear()
        calls = [self._model_calls.popleft() for _ in batch.steps if self._model_calls]
        await asyncio.to_thread(self._add, batch, calls)

    async def pop_item(self) -> Any | None:
        """Take the newest item out of the session and return it (None when it is empty)."""
        return await asyncio.to_thread(self._pop)

    async def clear_session(self) -> None:
        """Take every item out of the session."""
        await asyncio.to_thread(self._clear)

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[Any], bool] | None = None
    ) -> _CompactionSnapshot:
        """The SDK's compaction hook (``OpenAIResponsesCompactionSession`` looks for it): the
        newest ``limit`` items of the session's view, and a ``replace_suffix`` that swaps a
        suffix of them for the compacted output in one run, only if the session still ends
        with exactly that suffix (see :meth:`_replace`)."""
        entries = await asyncio.to_thread(self._entries)
        window = entries[-limit:] if limit > 0 else []

        async def replace_suffix(start: int, output: list[Any]) -> bool:
            return await asyncio.to_thread(self._replace, window[start:], output, prune_prefix)

        items: list[Any] = [e.item for e in window]  # the SDK's item dicts, as stored
        return _CompactionSnapshot(items, len(window) == len(entries), replace_suffix)

    # --- usage and branches, as the SDK's AdvancedSQLiteSession names them ---------------------

    async def store_run_usage(self, result: RunResult) -> None:
        """Nothing to store: the hooks (``hooks=session.hooks``) recorded each model call's
        usage on its step. Raises :class:`UsageError` when the current turn's model calls
        were recorded without it while ``result`` reports some (the hooks were not given)."""
        await asyncio.to_thread(_usage.check_recorded, self, result)

    async def get_session_usage(self, branch_id: str | None = None) -> dict[str, int] | None:
        """The usage of the branch's turns (of every branch when None): ``requests``,
        ``input_tokens``, ``output_tokens``, ``total_tokens``, ``total_turns``; None when
        no model call was recorded."""
        return await asyncio.to_thread(_usage.session_usage, self, branch_id)

    async def get_turn_usage(
        self, user_turn_number: int | None = None, branch_id: str | None = None
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """The usage of each turn of the branch (the current one by default) whose model
        calls it recorded, or of the turn ``user_turn_number`` (``{}`` when it has none)."""
        return await asyncio.to_thread(_usage.turn_usage, self, user_turn_number, branch_id)

    async def get_tool_usage(self, branch_id: str | None = None) -> list[tuple[str, int, int]]:
        """``(tool name, calls, turn)`` for the tools the branch's turns called, by turn."""
        return await asyncio.to_thread(_usage.tool_usage, self, branch_id)

    async def create_branch_from_turn(
        self, turn_number: int, branch_name: str | None = None
    ) -> str:
        """Fork the current branch before its turn ``turn_number`` (a user message) into a
        new branch and switch to it; its id (``branch_name``, or one made up)."""
        return await asyncio.to_thread(_branches.create, self, turn_number, branch_name)

    async def create_branch_from_content(
        self, search_term: str, branch_name: str | None = None
    ) -> str:
        """Branch from the first turn whose user message holds ``search_term``."""
        return await asyncio.to_thread(_turns.create_from_content, self, search_term, branch_name)

    async def get_conversation_turns(self, branch_id: str | None = None) -> list[dict[str, Any]]:
        """The branch's turns, to branch from: ``turn``, ``content`` (its first 100
        characters), ``full_content``, ``timestamp``, ``can_branch``."""
        return await asyncio.to_thread(_turns.listed, self, branch_id)

    async def find_turns_by_content(
        self, search_term: str, branch_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The branch's turns whose user message holds ``search_term``."""
        return await asyncio.to_thread(_turns.containing, self, search_term, branch_id)

    async def switch_to_branch(self, branch_id: str) -> None:
        """Make ``branch_id`` the branch this session reads and writes."""
        self._branch = await asyncio.to_thread(_branches.find, self, branch_id)

    async def delete_branch(self, branch_id: str, force: bool = False) -> None:
        """Take a branch out of the session (its rows stay; its id is not given again); the
        current one only with ``force``, which switches to ``main`` first."""
        await asyncio.to_thread(_branches.delete, self, branch_id, force)

    async def list_branches(self) -> list[dict[str, Any]]:
        """The session's branches, oldest first: ``branch_id``, ``message_count``,
        ``user_turns``, ``is_current``, ``created_at``."""
        return await asyncio.to_thread(_branches.listed, self)

    # --- in a worker thread -----------------------------------------------------------------

    def _add(self, batch: Batch, calls: Sequence[ModelCall]) -> None:
        self._record({}, batch, calls)

    def _pop(self) -> Any | None:
        """Name the newest item in a removal run, and commit it only if, under the run's
        lease, that item is still the newest: another handle popping at the same moment
        took it first otherwise, and this pop ends its run failed and tries the next one."""
        while True:
            entries = self._entries()
            if not entries:
                return None
            newest = entries[-1]
            if self._record({REMOVED_KEY: [newest.key]}, still=partial(self._newest, newest.key)):
                return newest.item

    def _replace(
        self,
        suffix: list[Entry],
        output: list[Any],
        prune_prefix: Callable[[Any], bool] | None,
    ) -> bool:
        """One run that takes ``suffix`` (and the oldest items ``prune_prefix`` says have
        expired, up to the first it keeps) out of the session and adds ``output`` after what
        is left; False, with nothing counted, when the session changed since it was read."""
        entries = self._entries()
        keys = [e.key for e in entries]
        if not suffix or keys[-len(suffix) :] != [e.key for e in suffix]:
            return False
        removed = [e.key for e in suffix]
        if prune_prefix is not None:
            for entry in entries[: len(entries) - len(suffix)]:
                if not prune_prefix(entry.item):
                    break
                removed.append(entry.key)
        stored = stored_items(output)
        batch = split_batch(stored) if stored else None
        return self._record(
            {REMOVED_KEY: list[JsonValue](removed)}, batch, still=partial(self._keys_are, keys)
        )

    def _keys_are(self, keys: list[str]) -> bool:
        return [e.key for e in self._entries()] == keys

    def _newest(self, key: str) -> bool:
        entries = self._entries()
        return bool(entries) and entries[-1].key == key

    def _clear(self) -> None:
        """Every branch out of the session, then the main one emptied, in one transaction
        (all of it or none), as the SDK's ``clear_session`` leaves a session: on ``main``,
        with nothing in it."""
        main = Branch(MAIN, self.session_id)
        self._together(f"clearing session {self.session_id}", partial(self._cleared, main))
        self._branch = main

    def _cleared(self, main: Branch) -> None:
        for conversation_id in _branches.others(self):
            self._recorded({BRANCH_DELETED_KEY: True}, None, (), None, conversation_id)
        if self._entries(main.conversation_id):
            self._recorded({CLEARED_KEY: True}, None, (), None, main.conversation_id)

    def _record(
        self,
        metadata: dict[str, JsonValue],
        batch: Batch | None = None,
        calls: Sequence[ModelCall] = (),
        still: Callable[[], bool] | None = None,
        conversation_id: str | None = None,
    ) -> bool:
        """One run of the session (in the current branch's conversation unless another is
        given), begun, stepped and committed in one transaction (see :meth:`_recorded`)."""
        return self._together(
            f"recording a run of session {self.session_id}",
            partial(self._recorded, metadata, batch, calls, still, conversation_id),
        )

    def _together(self, what: str, work: Callable[[], T]) -> T:
        """``work`` in one write transaction (``Ledger.together``), tried again from the start
        while another write holds a conversation it records in, up to the ledger's
        ``busy_timeout``: those of other handles last milliseconds. An agentledger run
        holding it for longer gives its :class:`ConversationBusyError`."""
        deadline = time.monotonic() + self.ledger.settings.busy_timeout
        pause = 0.005
        while True:
            try:
                return self.ledger.together(what, work)
            except ConversationBusyError:
                # Out of the transaction (which held the database) before waiting: the writer
                # holding the conversation needs it to end its run.
                if time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def _recorded(
        self,
        metadata: dict[str, JsonValue],
        batch: Batch | None,
        calls: Sequence[ModelCall],
        still: Callable[[], bool] | None,
        conversation_id: str | None,
    ) -> bool:
        """The run, in the transaction :meth:`_record` holds: begin, its steps, commit, each a
        savepoint of it, committed together with one sync to disk. When anything fails the
        transaction is rolled back whole: nothing of the run is written (the run ends failed
        first, to let its lease go). ``still`` is checked under the run's lease, where no
        other write of the session can land: when it is false the run ends failed, nothing of
        it counts, and the answer is False."""
        recorder = self.ledger.recorder
        run_id = new_id()
        if conversation_id is None:
            conversation_id = self._branch.conversation_id
            self._ensure_conversation(conversation_id)
        if batch is not None and any(is_compaction(i) for s in batch.steps for _, i in s.produced):
            metadata = {**metadata, COMPACTION_KEY: True}
        state = AgentState(
            conversation_id=conversation_id,
            run_id=run_id,
            status=AgentStatus.RUNNING,
            # No start time: the ledger stamps the run as it takes the lease, so that the
            # session's runs sort in the order they wrote, whichever handle wrote them.
            metadata={SESSION_KEY: self.session_id, **metadata},
        )
        recorder.begin_run(state, user_message=None, agent_name=AGENT_NAME)
        try:
            # Loaded under the run's lease: the conversation cannot change until the commit.
            loaded = recorder.load_conversation(conversation_id).store
            state = state.with_message_store(loaded)
            if still is not None and not still():
                recorder.fail_run(state, "the session changed before this write took its turn")
                return False
            if batch is not None:
                state = self._filled(state, batch, calls)
            recorder.commit_run(state.model_copy(update={"status": AgentStatus.COMPLETED}))
            return True
        except BaseException as exc:
            with contextlib.suppress(Exception):  # the error that ended it is the one to raise
                recorder.fail_run(state, f"{type(exc).__name__}: {exc}")
            raise

    def _filled(self, state: AgentState, batch: Batch, calls: Sequence[ModelCall]) -> AgentState:
        """``state`` with the batch's messages and its steps (each recorded as it is added)."""
        run_id = state.run_id
        assert run_id is not None
        messages = [
            Message(
                role=role,
                content=text_of(item),
                metadata={ITEM_KEY: item, INDEX_KEY: n, RUN_KEY: run_id},
            )
            for n, item, role in batch.messages
        ]
        section = state.store.section(AgentState.DEFAULT_SECTION)
        state = state.with_message_store(section.append_messages(messages))
        now = self.ledger.clock()
        for n, items in enumerate(batch.steps):
            call = calls[n] if n < len(calls) else None
            execution = step_execution(n, n == len(batch.steps) - 1, items, call, now)
            state = state.with_step_execution(execution)
            self.ledger.recorder.record_step(run_id, execution, ())
        return state

    def _ensure_conversation(self, conversation_id: str) -> None:
        if self._conversation(conversation_id) is not None:
            return
        try:
            self.ledger.create_conversation(
                conversation_id=conversation_id, metadata={SESSION_KEY: self.session_id}
            )
        except Exception:
            if self._conversation(conversation_id) is None:  # another handle created it first
                raise

    def _conversation(self, conversation_id: str) -> Conversation | None:
        try:
            found = self.ledger.conversation(conversation_id)
        except NotFoundError:
            return None
        return found if found.id == conversation_id else None

    def _entries(
        self,
        conversation_id: str | None = None,
        *,
        every_item: bool = False,
        runs: int | None = None,
    ) -> list[Entry]:
        """The items of a branch of the session (by default the current one) as its view
        shows them, or every item with ``every_item``: those it was forked with, then the
        items of its completed runs (the first ``runs`` of them when given), in order, less
        those its removals took out."""
        conversation = self._conversation(conversation_id or self._branch.conversation_id)
        if conversation is None:
            return []
        entries = _branches.forked_with(self, conversation, every_item=every_item)
        separate = self.separate_trace and not every_item
        # The runs first: a run commits its messages and steps with it, so every run listed
        # is whole in what is read after it (a run committed in between is left for later).
        counted, traces = self._counted(conversation.id, separate, every_run=runs is not None)
        messages = self.ledger.messages(conversation.id)
        by_run: dict[str, list[tuple[int, Item]]] = {}
        for message in messages:
            item, index = message.metadata.get(ITEM_KEY), message.metadata.get(INDEX_KEY)
            run_id = _run_of(message)
            if isinstance(item, dict) and isinstance(index, int) and run_id is not None:
                by_run.setdefault(run_id, []).append((index, item))
        for run in counted[:runs]:
            own = by_run.get(run.id, [])
            entries = _after(run, entries, own, traces.get(run.id, []), separate)
        return entries

    def _counted(
        self, conversation_id: str, separate_trace: bool, *, every_run: bool
    ) -> tuple[list[AgentRun], dict[str, list[tuple[int, Item]]]]:
        """A branch's completed runs (see :meth:`_runs`), and the trace items of those whose
        trace is in the view: every run's with the trace inline, the compactions' otherwise.
        Their steps are read in one read for the whole branch, not one per run. Without the
        trace, and unless ``every_run`` is asked for (to count them), the runs that only
        recorded steps are not read: they add nothing to the view."""
        if separate_trace:
            if every_run:
                counted = self._runs(conversation_id)
            else:
                speaking = self.ledger.speaking_runs(
                    conversation_id, status=AgentStatus.COMPLETED, metadata={COMPACTION_KEY: True}
                )
                counted = self._session_runs(speaking)
            if not any(_compacted(run) for run in counted):
                return counted, {}
        listed = self.ledger.runs_with_steps(conversation_id)
        counted = self._session_runs(run for run, _ in listed)
        traces = {run.id: _trace_of(steps) for run, steps in listed}
        return counted, traces

    def _runs(self, conversation_id: str) -> list[AgentRun]:
        """A branch's completed runs in the order they committed (see :func:`_written`)."""
        return self._session_runs(self.ledger.runs(conversation_id))

    def _session_runs(self, runs: Iterable[AgentRun]) -> list[AgentRun]:
        """The completed runs of this session among ``runs``, in the order they committed."""
        mine = [
            run
            for run in runs
            if (run.metadata_ or {}).get(SESSION_KEY) == self.session_id
            and run.status == AgentStatus.COMPLETED
        ]
        return sorted(mine, key=_written)


def _compacted(run: AgentRun) -> bool:
    """Whether the run added a compaction item (which stands for the items it replaced: the
    model sees it in either view)."""
    return bool(run.step_count and (run.metadata_ or {}).get(COMPACTION_KEY))


def _after(
    run: AgentRun,
    entries: list[Entry],
    messages: list[tuple[int, Item]],
    trace: list[tuple[int, Item]],
    separate_trace: bool,
) -> list[Entry]:
    """``entries`` after the run ``run`` (its conversation ``messages`` and ``trace`` items):
    its items added, or what it removed taken out."""
    metadata = run.metadata_ or {}
    if metadata.get(CLEARED_KEY):
        return []
    removed = metadata.get(REMOVED_KEY)
    if isinstance(removed, list):  # a pop, or a compaction (which adds its output after)
        entries = [e for e in entries if e.key not in removed]
    own = [(n, item, True) for n, item in messages]
    own += [(n, i, False) for n, i in trace if not separate_trace or is_compaction(i)]
    own.sort(key=lambda entry: entry[0])
    return [*entries, *(Entry(f"{run.id}:{n}", item, c) for n, item, c in own)]


def _trace_of(steps: Sequence[StepExecution]) -> list[tuple[int, Item]]:
    """The trace items a run's steps hold, each with its index in the run's batch."""
    found = []
    for execution in steps:
        assistant = execution.step.assistant_message
        stored = assistant.metadata.get(ITEMS_KEY) if assistant is not None else None
        results = {e.tool_call.id: e.result for e in execution.step.tool_executions}
        for entry in stored if isinstance(stored, list) else []:
            item = rebuilt_item(entry, results) if isinstance(entry, dict) else None
            if item is not None:
                found.append(item)
    return found


def _written(run: AgentRun) -> tuple[bool, int, datetime, str]:
    """The order a session's runs were written in. Their commits are serialized by the
    conversation's lease, and a commit stamps the run's row with the database's change counter
    (``change_seq``), which nothing changes on a completed run: that is the order, whatever
    the writers' clocks said (``started_at`` comes from the clock of the host that wrote).
    The ledger updates a run's row only while it holds the run's lease (steps, heartbeats, its
    end) or to resume a failed or abandoned run, which then counts from its new commit; no
    revision after the counter's writes run rows. An ``UPDATE`` written by hand re-stamps.
    Rows from before the counter existed (``NULL``) come first, by start time then id."""
    stamped = run.change_seq is not None
    return (stamped, run.change_seq or 0, run.started_at, run.id)


def _run_of(message: Message) -> str | None:
    run_id = message.metadata.get(RUN_KEY)
    return run_id if isinstance(run_id, str) else None


class _UsageHooks(RunHooks[Any]):
    """Keeps each model call's usage until the session records the items it produced (the
    SDK saves a turn's items after the call ends)."""

    def __init__(self, calls: deque[ModelCall]) -> None:
        self._calls = calls

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        model = agent.model if isinstance(agent.model, str) else None
        self._calls.append(ModelCall(usage_of(response.usage), agent.name, model))
