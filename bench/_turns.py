"""Our side of the recording benchmark, one class a worker process holds: a conversation that
grows one turn at a time through ``Agent.run``, through the Recorder API alone, or through
plain ``sqlite3`` (:class:`bench._raw.RawLedger`); and the three ways of loading it back.

A turn is a user message, three tool-calling steps with one ``lookup`` call each (~1 KB
results) and an answer (:data:`TOOL_STEPS`), as in ``bench/history.py``.
"""

from __future__ import annotations

import gc
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from agentledger import Agent, AgentBuilder, AgentState, Message, Recorder
from agentledger._builder import DEFAULT_MAX_STEPS
from agentledger.ledger import Ledger
from agentledger.ledger.schema import ddl
from agentledger.llm import ScriptedLLM

from ._common import lookup, script
from ._raw import RawLedger, checkpointed_size, dumps
from ._raw_messages import RawMessages
from .history import Conversation

TOOL_STEPS = 3
STEPS_PER_TURN = TOOL_STEPS + 1
"""The steps of a turn: its three tool-calling steps and the answer."""
MESSAGES_PER_TURN = 2
"""What a turn adds to the conversation: the user message and the answer (the tool trace is
kept in the step and tool rows)."""
Kind = Literal["agent", "recorder", "raw", "messages"]
Synchronous = Literal["FULL", "NORMAL"]


def question(turn: int) -> str:
    return f"question {turn}"


def recorder_of(ledger: Ledger) -> Any:
    """What records runs in ``ledger``: the recorder it hands out, or (in agentledger before
    0.2) the ledger itself. The benchmark runs against the version before too."""
    return getattr(ledger, "recorder", ledger)


def _agent(recorder: Recorder) -> Agent:
    """The agent of every turn: scripted model, ``lookup``, the builder's defaults."""
    builder = AgentBuilder().with_llm(ScriptedLLM(script(TOOL_STEPS, 1))).with_tools([lookup])
    return builder.with_ledger(recorder).build()


# -- the Recorder API alone ---------------------------------------------------------------------


@dataclass
class Prepared:
    """The Recorder calls ``Agent.run`` made for one turn, with their states."""

    loaded: str | None
    """The conversation id given to ``load_conversation`` (None: a new conversation)."""
    begun: AgentState | None = None
    user: Message | None = None
    agent_name: str = ""
    steps: list[tuple[Any, ...]] = field(default_factory=list)
    """The arguments of each ``record_step`` call, as given."""
    final: AgentState | None = None

    def replay(self, recorder: Any) -> str:
        """The same calls, in the same order, on ``recorder``; the conversation id."""
        assert self.begun is not None and self.final is not None
        recorder.load_conversation(self.loaded)
        recorder.begin_run(self.begun, user_message=self.user, agent_name=self.agent_name)
        for arguments in self.steps:
            recorder.record_step(*arguments)
        recorder.commit_run(self.final)
        return self.final.conversation_id


class Tape:
    """An in-memory recorder of one conversation that keeps the calls of its last run, to be
    replayed on a ledger. It keeps nothing else (no past runs), so that a worker's memory, and
    the garbage collector's work, do not grow with the history. Only what ``Agent.run`` calls
    is here: a run that fails is an error of the benchmark."""

    def __init__(self) -> None:
        self.conversation: AgentState | None = None
        self.prepared = Prepared(None)

    def load_conversation(self, conversation_id: str | None) -> AgentState:
        """As a ledger loads it: the committed messages in a fresh state."""
        self.prepared = Prepared(conversation_id)
        if conversation_id is None:
            return AgentState.empty()
        assert self.conversation is not None
        assert self.conversation.conversation_id == conversation_id
        fresh = AgentState.empty(conversation_id=conversation_id)
        return fresh.with_message_store(self.conversation.store)

    def begin_run(
        self, state: AgentState, *, user_message: Message | None, agent_name: str
    ) -> None:
        self.prepared.begun, self.prepared.user = state, user_message
        self.prepared.agent_name = agent_name

    def record_step(self, *arguments: Any) -> None:
        self.prepared.steps.append(arguments)

    def commit_run(self, state: AgentState) -> None:
        self.prepared.final = self.conversation = state

    def fail_run(self, state: AgentState, error: str | None = None) -> None:
        raise RuntimeError(f"the benchmark's in-memory run failed: {error or state.error}")


# -- one conversation per worker ----------------------------------------------------------------


class Turns:
    """One conversation in one database, growing by turns written through ``kind``:
    ``agent`` (``Agent.run`` on a :class:`Ledger`), ``recorder`` (the Recorder calls of an
    in-memory run, prepared before each turn and replayed on a :class:`Ledger`: only the replay
    is timed), ``raw`` (:class:`RawLedger`: the ledger's rows) or ``messages``
    (:class:`RawMessages`: the turn's messages and usage alone)."""

    def __init__(self, path: str, kind: Kind, synchronous: Synchronous) -> None:
        self.path = Path(path)
        self.kind = kind
        self._close: Callable[[], None]
        if kind == "raw":
            budget = dumps({"max_steps": DEFAULT_MAX_STEPS})  # as the agent stores it
            raw = RawLedger(self.path, ddl("sqlite"), synchronous, budget=budget)
            self._close, make = raw.close, _raw_turn(raw)
        elif kind == "messages":
            floor = RawMessages(self.path, synchronous)
            self._close, make = floor.close, _raw_turn(floor)
        else:
            ledger = Ledger.open(self.path, synchronous=synchronous)
            self._close = ledger.close
            make = _agent_turn(ledger) if kind == "agent" else _recorded_turn(ledger, Tape())
        self.conversation = Conversation(self.path, make)

    def grow(self, turns: int) -> float:
        """``turns`` more turns (the history, untimed); the seconds they took."""
        return self.conversation.grow(turns)

    def turn(self) -> float:
        """One more turn; its seconds. The garbage of earlier turns is collected first
        (untimed), so each timed turn starts alike and pays for its own garbage."""
        gc.collect()
        return self.conversation.step()

    def size(self) -> int:
        return checkpointed_size(self.path)

    def conversation_id(self) -> str | None:
        return self.conversation.conversation_id

    def close(self) -> None:
        self._close()


def _agent_turn(ledger: Ledger) -> Callable[[int, str | None], Callable[[], str]]:
    def make(turn: int, conversation_id: str | None) -> Callable[[], str]:
        agent = _agent(ledger)  # built before the clock starts
        return lambda: agent.run(question(turn), conversation_id).conversation_id

    return make


def _recorded_turn(ledger: Ledger, tape: Tape) -> Callable[[int, str | None], Callable[[], str]]:
    recorder = recorder_of(ledger)

    def make(turn: int, conversation_id: str | None) -> Callable[[], str]:
        _agent(tape).run(question(turn), conversation_id)  # in memory, before the clock starts
        prepared = tape.prepared
        return lambda: prepared.replay(recorder)

    return make


def _raw_turn(raw: RawLedger | RawMessages) -> Callable[[int, str | None], Callable[[], str]]:
    def make(turn: int, conversation_id: str | None) -> Callable[[], str]:
        return lambda: raw.run(
            question(turn), conversation_id, tool_steps=TOOL_STEPS, calls_per_step=1
        )

    return make


# -- loading a conversation back ----------------------------------------------------------------

LoadKind = Literal["cold", "warm", "raw"]
RAW_LOAD = (
    "SELECT id, section, seq, role, content, name, tool_calls, tool_call_id, reasoning, "
    "metadata, created_at FROM conversation_messages WHERE conversation_id = ? ORDER BY seq"
)
"""What the raw load reads: the conversation's message rows, in order."""


class Loads:
    """Loading one conversation for the next inference: ``cold`` (``load_conversation`` on a
    fresh :class:`Ledger` handle each time, opened before the clock starts), ``warm`` (the
    same handle every time, after a first load) or ``raw`` (:func:`raw_load` on a fresh
    ``sqlite3`` connection each time, opened and its schema read before the clock starts)."""

    def __init__(self, path: str, conversation_id: str, kind: LoadKind) -> None:
        self.path = Path(path)
        self.conversation_id = conversation_id
        self.kind = kind
        self._ledger = Ledger.open(self.path, migrate=False) if kind == "warm" else None
        self.messages = self._load()[1]  # and, warm, the handle's first load

    def load(self) -> float:
        return self._load()[0]

    def count(self) -> int:
        """How many messages a load reads."""
        return self.messages

    def _load(self) -> tuple[float, int]:
        if self.kind == "raw":
            conn = sqlite3.connect(self.path)
            try:
                conn.execute("SELECT 1 FROM conversation_messages LIMIT 1").fetchall()
                started = time.perf_counter()
                sections = raw_load(conn, self.conversation_id)
                elapsed = time.perf_counter() - started
            finally:
                conn.close()
            return elapsed, sum(len(messages) for messages in sections.values())
        ledger = self._ledger or Ledger.open(self.path, migrate=False)
        try:
            started = time.perf_counter()
            state = recorder_of(ledger).load_conversation(self.conversation_id)
            elapsed = time.perf_counter() - started
        finally:
            if ledger is not self._ledger:
                ledger.close()
        return elapsed, sum(len(messages) for messages in state.store.sections.values())

    def close(self) -> None:
        if self._ledger is not None:
            self._ledger.close()


def raw_load(conn: sqlite3.Connection, conversation_id: str) -> dict[str, list[dict[str, Any]]]:
    """The conversation's messages by section, each a dict of its columns: JSON columns
    decoded (``json.loads``), ``created_at`` a UTC ``datetime``; nothing checked."""
    sections: dict[str, list[dict[str, Any]]] = {}
    cursor = conn.execute(RAW_LOAD, (conversation_id,))
    names = [d[0] for d in cursor.description]
    for values in cursor:
        row = dict(zip(names, values, strict=True))
        for column in ("tool_calls", "metadata"):
            if row[column] is not None:
                row[column] = json.loads(row[column])
        row["created_at"] = datetime.fromisoformat(row["created_at"]).replace(tzinfo=UTC)
        sections.setdefault(row.pop("section"), []).append(row)
    return sections
