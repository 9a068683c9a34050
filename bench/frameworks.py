"""Section 18: three agent frameworks, each driving the same scripted turn through its own runner,
their conversation kept by the store a user of the framework reaches for first and by the ledger's
store for that framework.

- The OpenAI Agents SDK: ``Runner.run`` on a scripted ``Model``, with ``SQLiteSession`` on a file
  (the store its documentation starts from) or ``LedgerSession``, which gives the model the
  conversation without the tool calls (kept in the runs' steps); ``LedgerSession`` with
  ``separate_trace=False``, which gives it every item as ``SQLiteSession`` does, is timed beside
  them.
- pydantic-ai: ``Agent.run`` on a ``FunctionModel``, the conversation loaded before the run and
  saved after it; pydantic-ai ships no store on disk, so its usual persistence is the whole
  conversation as ``ConversationTypeAdapter`` JSON in a file of its own (written to a new file,
  fsynced and renamed over the old one, as durable as a SQLite commit), against
  ``LedgerConversationStore``; its ``InMemoryConversationStore`` is timed beside them (no bytes
  on disk).
- Google ADK: ``Runner.run_async`` on a scripted ``BaseLlm``, with ``SqliteSessionService`` on a
  file (what ``adk run`` and ``adk web`` use by default) or ``LedgerSessionService``.

A turn is section 6's: a user message, three model calls each calling ``lookup`` (a ~1 KB
result), an answer, with usage on every model call. Each system at each history length is a
worker process of its own (section 6's :func:`~bench.recording.timed_turns`): its history built
untimed, its file's size taken, then one timed turn of each in turn, the order rotating. The
chats themselves are ``bench/framework_chats.py``'s.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import sys
import time
from collections.abc import Callable, Coroutine
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._common import (
    TOOL_STEPS,
    Samples,
    Sizes,
    ms,
)
from ._raw import checkpointed_size
from ._report import Row, Section, judged, ratio
from .framework_chats import (
    ADK_LEDGER,
    ADK_SQLITE,
    AGENTS_LEDGER,
    AGENTS_SQLITE,
    AGENTS_WHOLE,
    PAI_JSON,
    PAI_LEDGER,
    PAI_MEMORY,
    AdkChat,
    AgentsChat,
    PydanticChat,
)
from .recording import timed_turns


@dataclass(frozen=True)
class Framework:
    name: str
    default: str
    ledger: str
    beside: tuple[tuple[str, str], ...]
    """More ratios, without a target, each (top, bottom); a system they name that is not the
    pair's is timed beside the pair."""
    needs: tuple[tuple[str, str], ...]
    """Each module the systems import and what to install when it is missing."""

    @property
    def systems(self) -> tuple[str, ...]:
        named = (self.default, self.ledger, *(s for pair in self.beside for s in pair))
        return tuple(dict.fromkeys(named))


FRAMEWORKS = (
    Framework(
        "OpenAI Agents SDK",
        AGENTS_SQLITE,
        AGENTS_LEDGER,
        ((AGENTS_WHOLE, AGENTS_SQLITE),),
        (
            ("agents", "the openai-agents extra"),
            ("agentledger.integrations.openai_agents", "an agentledger with LedgerSession"),
        ),
    ),
    Framework(
        "pydantic-ai",
        PAI_JSON,
        PAI_LEDGER,
        ((PAI_LEDGER, PAI_MEMORY),),
        (
            ("pydantic_ai.conversation_store", "pydantic-ai-slim 2.66 or later"),
            (
                "agentledger.integrations.pydantic_ai",
                "an agentledger with LedgerConversationStore",
            ),
        ),
    ),
    Framework(
        "Google ADK",
        ADK_SQLITE,
        ADK_LEDGER,
        (),
        (
            ("google.adk", "google-adk"),
            ("agentledger.integrations.adk", "an agentledger with LedgerSessionService"),
        ),
    ),
)
HELD = 2 + 2 * TOOL_STEPS
"""What a store keeps of a turn: the user's message, each call and its result, the answer
(items, messages or events); ``LedgerSession`` keeps the user's message and the answer as the
session's items, the calls and results in the run's steps (its default, ``separate_trace``)."""
HELD_BY = {AGENTS_LEDGER: 2}
TURN_TARGET = "≤ 1.2x"


# -- a worker's system --------------------------------------------------------------------------


class Chat:
    """One conversation of one system (``kind``, a name of :data:`FRAMEWORKS`) in its file at
    ``path``, growing a turn at a time on one event loop, kept for the worker's life (as a
    long-lived app keeps its store)."""

    def __init__(self, path: str, kind: str, synchronous: str) -> None:
        self.path, self.kind, self.turns, self.grown = Path(path), kind, 0, 0
        self.loop = asyncio.new_event_loop()
        self.chat: AgentsChat | PydanticChat | AdkChat
        if kind in (AGENTS_SQLITE, AGENTS_LEDGER, AGENTS_WHOLE):
            self.chat = AgentsChat(self.path, kind, synchronous)
        elif kind in (PAI_JSON, PAI_LEDGER, PAI_MEMORY):
            self.chat = PydanticChat(self.path, kind, synchronous)
        else:
            self.chat = AdkChat(self.path, kind == ADK_LEDGER, synchronous, self.loop)

    def _timed(self, work: Callable[[], Coroutine[Any, Any, object]]) -> float:
        started = time.perf_counter()
        self.loop.run_until_complete(work())
        self.turns += 1
        return time.perf_counter() - started

    def grow(self, turns: int) -> float:
        """``turns`` turns; the file's size is then taken (:meth:`size_grown`)."""
        spent = sum(self._timed(self.chat.prepare(self.turns)) for _ in range(turns))
        self.grown = self._size()
        return spent

    def turn(self) -> float:
        """One more turn, its seconds (its model script built, and the garbage of earlier turns
        collected, untimed)."""
        work = self.chat.prepare(self.turns)
        gc.collect()
        return self._timed(work)

    def check(self) -> None:
        """The store holds every message of every turn, read back through the framework."""
        held = self.loop.run_until_complete(self.chat.held())
        if held != HELD_BY.get(self.kind, HELD) * self.turns:
            raise AssertionError(f"{self.kind}: {held} messages after {self.turns} turns")

    def _size(self) -> int:
        """The bytes on disk (-1: none, the store is in memory)."""
        if self.kind == PAI_MEMORY:
            return -1
        if isinstance(self.chat, PydanticChat) and self.kind == PAI_JSON:
            return self.chat.file.stat().st_size
        return checkpointed_size(self.path)

    def size_grown(self) -> int:
        """The bytes on disk once the history was built, before any timed turn."""
        return self.grown

    def statements(self) -> tuple[int, int]:
        """One more turn, untimed, on a ledger: the statements it sent and the transactions it
        committed (SQLAlchemy's engine events), checked like the others."""
        from sqlalchemy import event

        assert self.chat.handle is not None, "statements are counted on a ledger"
        engine, counted = self.chat.handle.engine, [0, 0]

        def statement(*_: object) -> None:
            counted[0] += 1

        def commit(*_: object) -> None:
            counted[1] += 1

        event.listen(engine, "before_cursor_execute", statement)
        event.listen(engine, "commit", commit)
        try:
            self._timed(self.chat.prepare(self.turns))
        finally:
            event.remove(engine, "before_cursor_execute", statement)
            event.remove(engine, "commit", commit)
        self.check()
        return counted[0], counted[1]

    def close(self) -> None:
        self.chat.close()
        self.loop.close()


# -- measuring and the report -------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    histories: tuple[int, ...]
    reps: int


PLANS = {"quick": Plan((50, 200), 7), "default": Plan((50, 200), 15)}
PLANS["full"] = Plan((50, 200), 31)


@dataclass
class Measured:
    plan: Plan
    systems: list[str]
    turns: Samples
    sizes: dict[str, int]
    """Each worker's bytes on disk once its history was built (-1: in memory)."""
    skipped: list[str]
    counted: dict[str, tuple[int, int]]
    """The statements and commits of a turn of each ledger store at the longest history."""


def skipped() -> dict[str, str]:
    """Why each system that cannot be measured cannot be (a framework's systems all go
    together: neither side of a pair is measured alone)."""
    why: dict[str, str] = {}
    for framework in FRAMEWORKS:
        for module, what in framework.needs:
            try:
                found = importlib.util.find_spec(module) is not None
            except ImportError:
                found = False
            if not found:
                why |= dict.fromkeys(framework.systems, f"needs {what} (no {module} here)")
                break
    return why


def measure(plan: Plan, tmp: Path) -> Measured:
    why = skipped()
    systems = [
        s
        for f in FRAMEWORKS
        for s in f.systems
        if s not in why  # a framework's systems are skipped together
    ]
    chosen = {
        f"{s} @ {n}": (None, s, "FULL", n)
        for n in sorted(plan.histories, reverse=True)  # the longest take longest to build
        for s in systems
    }
    with ExitStack() as stack:
        workers, turns = timed_turns(stack, tmp, chosen, plan.reps, factory=Chat)
        sizes = {name: int(w.call("size_grown")) for name, w in workers.items()}
        ledgers = {f"{f.ledger} @ {plan.histories[-1]}" for f in FRAMEWORKS} & set(workers)
        counted = {name: workers[name].call("statements") for name in sorted(ledgers)}
    notes = [f"{s}: skipped, {r}." for s, r in why.items()]
    return Measured(plan, systems, turns, sizes, notes, counted)


def run(sizes: Sizes, tmp: Path) -> list[Section]:
    print("three frameworks' stores: a turn at each history ...", file=sys.stderr, flush=True)
    return [report(measure(PLANS[sizes.name], tmp))]


def _megabytes(size: int) -> str:
    return "in memory" if size < 0 else f"{size / 1e6:,.2f} MB"


def _framework_rows(measured: Measured, framework: Framework) -> list[Row]:
    """At each history: each system's file and turn, then the ledger's turn over the default's
    (the ratio of the medians [the interquartile range of the per-repetition ratios], judged
    at every history) and its file over the default's."""
    turns, sizes, rows = measured.turns, measured.sizes, []
    largest = measured.plan.histories[-1]
    for n in measured.plan.histories:
        for s in framework.systems:
            rows += [
                Row(f"@ {n}: {s}: on disk", _megabytes(sizes[f"{s} @ {n}"])),
                Row(f"@ {n}: {s}: a turn", ms(turns.median(f"{s} @ {n}"))),
            ]
        top, bottom = f"{framework.ledger} @ {n}", f"{framework.default} @ {n}"
        value = turns.ratio(top, bottom)
        shown = judged(turns.paired(top, bottom), value, TURN_TARGET)
        pair = f"{framework.ledger} / {framework.default}"
        rows.append(
            Row(f"@ {n}: a turn, {pair} (target {TURN_TARGET})", ratio=shown, headline=n == largest)
        )
        rows.append(ratio(f"@ {n}: on disk, {pair}", sizes[top] / sizes[bottom], "", n == largest))
        if top in measured.counted:
            statements, commits = measured.counted[top]
            shown = f"{statements} statements, {commits} commit{'s' * (commits != 1)}"
            rows.append(Row(f"@ {n}: {framework.ledger}: a turn sends", shown))
        for above, below in framework.beside:
            value = turns.ratio(f"{above} @ {n}", f"{below} @ {n}")
            rows.append(ratio(f"@ {n}: a turn, {above} / {below}", value))
    return rows


def report(measured: Measured) -> Section:
    plan, measuring = measured.plan, set(measured.systems)
    rows = [
        row
        for framework in FRAMEWORKS
        if framework.default in measuring
        for row in _framework_rows(measured, framework)
    ]
    return Section(
        "18. Three frameworks' stores: each one's default against the ledger",
        "Each framework runs the turn of section 6 (a user message, three model calls each "
        "calling `lookup` for a ~1 KB result, an answer; usage on every call; a scripted model, "
        "no network) through its own runner: the OpenAI Agents SDK's `Runner.run` with "
        "`SQLiteSession` on a file or `LedgerSession` (which gives the model the conversation "
        "without the tool calls, kept in the runs' steps), with `LedgerSession(..., "
        "separate_trace=False)` (every item, as `SQLiteSession`) timed beside them; "
        "pydantic-ai's `Agent.run` on a `FunctionModel`, the conversation loaded before and "
        "saved after, as "
        "`ConversationTypeAdapter` JSON in a file of its own (pydantic-ai ships no store on "
        "disk: its usual persistence; rewritten whole to a new file, fsynced and renamed over "
        "the old) or through `LedgerConversationStore`, with its `InMemoryConversationStore` "
        "timed beside them; Google ADK's `Runner.run_async` with `SqliteSessionService` (the "
        "`adk run` default) or `LedgerSessionService`. The ledger at synchronous=FULL, the "
        "SQLite stores at their own settings. One conversation each, "
        f"{', '.join(map(str, plan.histories))} turns of history; each system and history in a "
        "process of its own; the bytes on disk once the history is built (a SQLite file after "
        f"`PRAGMA wal_checkpoint(TRUNCATE)`); then one whole turn each in turn, {plan.reps} "
        "repetitions, medians, the ledger's over the default's with the interquartile range of "
        "the per-repetition ratios; then one more turn of each ledger store at the longest "
        "history, its statements and commits counted. Checked before and after, through each "
        "framework's own reads: the store holds every message of every turn (`LedgerSession` "
        "the user's and the answer as the session's items, the calls in its runs' steps).",
        rows,
        measured.skipped,
    )
