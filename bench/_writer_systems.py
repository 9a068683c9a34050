"""The writers of ``bench/writers.py``, one class a worker process holds: a writer runs its
conversations' turns through one system, on command, starting at a time the parent gives all
writers of a round (the barrier), and answers with what it timed.

A turn is the turn of ``bench/_turns.py`` (a user message, three ``lookup`` steps, an answer,
from a scripted model, no sleeps). In a round, a writer takes turn 1 of each of its
conversations, then turn 2 of each, and so on, as a server serves many conversations at once.

- :class:`LedgerWriter`: ``Agent.run`` on a :class:`Ledger` (SQLite or PostgreSQL); a step's
  commit is timed around the recorder's ``record_step`` (the step's end to its transaction
  committed: ``Agent.run`` records a step as soon as it ends); the ledger counts its
  transactions and its lock retries (:attr:`Ledger.transactions`, :attr:`Ledger.lock_retries`).
- :class:`SessionWriter`: the OpenAI Agents SDK's ``SQLiteSession`` (on SQLite) or
  ``SQLAlchemySession`` (on PostgreSQL, through asyncpg), one session per conversation, given
  what the SDK's Runner gives it for the turn (``bench/_peers.py``); a step's commit is an
  ``add_items`` call, timed.
- :class:`GraphWriter`: LangGraph's ``SqliteSaver`` or ``PostgresSaver``, one thread per
  conversation (``bench/_peers.py``'s graph); a step's commit is a checkpoint's ``put``, timed.
"""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from agentledger import Agent
from agentledger.ledger import Ledger

from ._peers import ScriptedGraph, record_session_turn, session_batches
from ._turns import _agent, question, recorder_of

Figures = dict[str, Any]
"""A writer's answer to a round: ``end`` (``time.time()`` when its last turn ended),
``turns``, ``commits`` (seconds, one per step commit timed), ``transactions`` and
``retries`` (None where the system does not count them)."""


def wait_until(start_at: float) -> None:
    """Sleep until ``start_at`` (``time.time()``): every writer of a round starts together."""
    while (left := start_at - time.time()) > 0:
        time.sleep(min(left, 0.05))


class _Writer:
    """What every writer shares: its conversations, their turns in rounds."""

    conversations: int
    turns: int

    def setup(self) -> None:
        """What one writer does before the others start (creating tables)."""

    def prepare(self) -> None:
        """What a round needs before the clock starts."""

    def round(self, start_at: float) -> Figures:
        """The round's turns, from ``start_at`` on (after :meth:`prepare`)."""
        self._commits: list[float] = []
        gc.collect()
        wait_until(start_at)
        for turn in range(self.turns):
            for conversation in range(self.conversations):
                self.turn(conversation, turn)
        end = time.time()
        return {"end": end, "turns": self.turns * self.conversations, "commits": self._commits}

    def turn(self, conversation: int, turn: int) -> None:
        raise NotImplementedError


class TimedRecorder:
    """A :class:`Recorder` that times each ``record_step`` of the recorder it wraps."""

    def __init__(self, recorder: Any, commits: Callable[[], list[float]]) -> None:
        self._recorder = recorder
        self._commits = commits

    def record_step(self, *arguments: Any) -> None:
        started = time.perf_counter()
        self._recorder.record_step(*arguments)
        self._commits().append(time.perf_counter() - started)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._recorder, name)


class LedgerWriter(_Writer):
    def __init__(self, url: str, conversations: int, turns: int) -> None:
        self.conversations, self.turns = conversations, turns
        self.ledger = Ledger.open(url, migrate=False)
        self.recorder: Any = TimedRecorder(recorder_of(self.ledger), lambda: self._commits)
        self._agents: list[list[Agent]] = []
        self._ids: list[str | None] = []

    def prepare(self) -> None:
        # An agent per turn, its script fresh, built before the clock starts.
        self._agents = [
            [_agent(self.recorder) for _ in range(self.conversations)] for _ in range(self.turns)
        ]
        self._ids = [None] * self.conversations

    def round(self, start_at: float) -> Figures:
        transactions, retries = self._counts()
        figures = super().round(start_at)
        if transactions is not None and retries is not None:
            after, retried = self._counts()
            figures["transactions"] = (after or 0) - transactions
            figures["retries"] = (retried or 0) - retries
        return figures

    def _counts(self) -> tuple[int | None, int | None]:
        """The ledger's transactions and lock retries (None from a version that does not
        count them: the previous version measured against this one)."""
        return getattr(self.ledger, "transactions", None), getattr(
            self.ledger, "lock_retries", None
        )

    def turn(self, conversation: int, turn: int) -> None:
        agent = self._agents[turn][conversation]
        result = agent.run(question(turn), self._ids[conversation])
        if result.status != "completed":
            raise RuntimeError(f"a turn ended {result.status}: {result.error}")
        self._ids[conversation] = result.conversation_id

    def close(self) -> None:
        self.ledger.close()


class SessionWriter(_Writer):
    """One SDK session per conversation: ``SQLiteSession`` on a file path,
    ``SQLAlchemySession`` on a ``postgresql://`` URL (its engine shared by the writer's
    sessions, as an application shares one)."""

    def __init__(self, url: str, conversations: int, turns: int, writer: int) -> None:
        self.conversations, self.turns, self.writer = conversations, turns, writer
        self.url = url
        self.loop = asyncio.new_event_loop()
        self.engine: Any = None
        if url.startswith("postgresql://"):
            from sqlalchemy.ext.asyncio import create_async_engine

            async_url = "postgresql+asyncpg://" + url.split("://", 1)[1]
            self.engine = create_async_engine(async_url)
        self._round = 0
        self._sessions: list[Any] = []

    def _session(self, session_id: str, *, create_tables: bool = False) -> Any:
        if self.engine is None:
            from agents import SQLiteSession

            return SQLiteSession(session_id, self.url)
        from agents.extensions.memory import SQLAlchemySession

        return SQLAlchemySession(session_id, engine=self.engine, create_tables=create_tables)

    def setup(self) -> None:
        if self.engine is not None:
            session = self._session("setup", create_tables=True)
            self.loop.run_until_complete(session.get_items())

    def prepare(self) -> None:
        for session in self._sessions:
            _close_session(session)
        self._round += 1
        self._sessions = [
            self._session(f"w{self.writer}-r{self._round}-c{c}") for c in range(self.conversations)
        ]

    def turn(self, conversation: int, turn: int) -> None:
        session = self._sessions[conversation]
        batches = session_batches(turn)
        _, commits = self.loop.run_until_complete(record_session_turn(session, batches))
        self._commits.extend(commits)

    def close(self) -> None:
        for session in self._sessions:
            _close_session(session)
        if self.engine is not None:
            self.loop.run_until_complete(self.engine.dispose())
        self.loop.close()


def _close_session(session: Any) -> None:
    close = getattr(session, "close", None)
    if close is not None:
        close()


class GraphWriter(_Writer):
    """LangGraph's checkpointer on one connection of the writer's: ``SqliteSaver`` on a file
    path (``synchronous=FULL``, as the ledger's default), ``PostgresSaver`` on a
    ``postgresql://`` URL (autocommit, as LangGraph's documentation sets it up)."""

    def __init__(self, url: str, conversations: int, turns: int, writer: int) -> None:
        self.conversations, self.turns, self.writer = conversations, turns, writer
        self.conn: Any
        if url.startswith("postgresql://"):
            import psycopg
            from langgraph.checkpoint.postgres import PostgresSaver
            from psycopg.rows import dict_row

            self.conn = psycopg.connect(url, autocommit=True, row_factory=dict_row)
            saver: Any = PostgresSaver(self.conn)
        else:
            from langgraph.checkpoint.sqlite import SqliteSaver

            self.conn = sqlite3.connect(url, check_same_thread=False, timeout=5.0)
            self.conn.execute("PRAGMA synchronous=FULL")
            saver = SqliteSaver(self.conn)
        self.saver = saver
        _time_puts(saver, lambda: self._commits)
        self.graph = ScriptedGraph(saver)
        self._round = 0

    def setup(self) -> None:
        self.saver.setup()

    def prepare(self) -> None:
        self._round += 1

    def turn(self, conversation: int, turn: int) -> None:
        self.graph.invoke_turn(f"w{self.writer}-r{self._round}-c{conversation}", turn)

    def close(self) -> None:
        self.conn.close()


def _time_puts(saver: Any, commits: Callable[[], list[float]]) -> None:
    """Time every checkpoint the saver writes (``put``), on this instance only."""
    put = saver.put

    def timed_put(*arguments: Any, **keywords: Any) -> Any:
        started = time.perf_counter()
        try:
            return put(*arguments, **keywords)
        finally:
            commits().append(time.perf_counter() - started)

    saver.put = timed_put
