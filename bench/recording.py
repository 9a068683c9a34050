"""Sections 6 to 8: recording one turn at 50, 200 and 1000 turns of history, loading the
conversation back, and the bytes a turn takes.

A turn (``bench/_common.py``) is recorded in a SQLite file by:

- ``agentledger Agent.run``: the whole loop on ``Ledger.open(path, synchronous=...)``;
- ``agentledger recorder alone``: the Recorder calls an in-memory run of the same agent made
  (``load_conversation``, ``begin_run``, ``record_step`` x4, ``commit_run``), prepared before
  the clock starts and replayed on the ledger's recorder;
- ``raw sqlite3 messages``: the turn's messages and usage alone (``bench/_raw.py``), the floor;
- the OpenAI Agents SDK's ``SQLiteSession`` when installed (``bench/peers.py``).

Each system at each history length is a worker process of its own (``bench/_workers.py``)
that builds its history (untimed, all workers at once); then one timed turn of each in turn,
the order rotating. The classes here run in those workers, also inside the previous version
(``bench/previous.py``): they use only the names both export.
"""

from __future__ import annotations

import cProfile
import gc
import os
import pstats
import sqlite3
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentledger import AgentState, Message
from agentledger.ledger import Ledger

from . import peers
from ._common import (
    STEPS_PER_TURN,
    TOOL_STEPS,
    Samples,
    Sizes,
    interleaved,
    judged,
    ms,
    question,
    turn_agent,
    us,
    x,
)
from ._raw import RawMessages, checkpointed_size, raw_load
from ._report import Row, Section
from ._workers import Worker, broadcast, gather, interleaved_calls

AGENT, RECORDER = "agentledger Agent.run", "agentledger recorder alone"
MESSAGES, SESSION = "raw sqlite3 messages", peers.SESSION
KINDS = {AGENT: "agent", RECORDER: "recorder", MESSAGES: "messages"}
HELD = {"agent": 2, "recorder": 2, "messages": 8, "session": peers.ITEMS_PER_TURN}
"""Messages a turn adds to each kind of store (the ledger's conversation keeps the user's and
the answer; the tool trace is in its step and tool rows)."""
TARGET_AGENT, TARGET_FLAT, TARGET_LOAD = 3.0, 1.2, 1.5
COLD, WARM, RAW = "cold", "warm", "raw"


# -- the worker side ----------------------------------------------------------------------------


@dataclass
class Tape:
    """An in-memory recorder of one conversation that keeps the Recorder calls of its last run,
    to be replayed on a ledger (and nothing else, so a worker's memory does not grow)."""

    conversation: AgentState | None = None
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)

    def load_conversation(self, conversation_id: str | None) -> AgentState:
        self.calls = [("load_conversation", (conversation_id,), {})]
        if conversation_id is None or self.conversation is None:
            return AgentState.empty()
        fresh = AgentState.empty(conversation_id=conversation_id)
        return fresh.with_message_store(self.conversation.store)

    def begin_run(
        self, state: AgentState, *, user_message: Message | None, agent_name: str
    ) -> None:
        self.calls.append(
            ("begin_run", (state,), {"user_message": user_message, "agent_name": agent_name})
        )

    def record_step(self, *arguments: Any) -> None:
        self.calls.append(("record_step", arguments, {}))

    def commit_run(self, state: AgentState) -> None:
        self.calls.append(("commit_run", (state,), {}))
        self.conversation = state

    def fail_run(self, state: AgentState, error: str | None = None) -> None:
        raise RuntimeError(f"the benchmark's in-memory run failed: {error or state.error}")

    def replayer(self, recorder: Any) -> Callable[[], str]:
        """The last run's calls, to be made again on ``recorder``; the conversation's id."""
        calls, conversation = list(self.calls), self.conversation
        assert conversation is not None

        def replay() -> str:
            for method, args, kwargs in calls:
                getattr(recorder, method)(*args, **kwargs)
            return conversation.conversation_id

        return replay


class Turns:
    """One conversation in one database, growing a turn at a time through ``kind``: ``agent``,
    ``recorder`` (only the replay timed) or ``messages`` (the floor)."""

    def __init__(self, path: str, kind: str, synchronous: str) -> None:
        self.path, self.kind = Path(path), kind
        self.turns, self.id = 0, None
        self.read: dict[str, int] = {}
        """How many messages the last load of each way read."""
        self.tape = Tape()
        self.store: Any
        if kind == "messages":
            self.store = RawMessages(self.path, synchronous)
        else:
            self.store = Ledger.open(self.path, synchronous=synchronous)

    def _next(self) -> Callable[[], str]:
        """The next turn, ready to run: its agent built (or its calls prepared), untimed."""
        text, conversation = question(self.turns), self.id
        if self.kind == "messages":
            return lambda: self.store.run(text, conversation, TOOL_STEPS, 1)
        if self.kind == "agent":
            agent = turn_agent(self.store)
            return lambda: agent.run(text, conversation).conversation_id
        turn_agent(self.tape).run(text, conversation)  # in memory, before the clock starts
        return self.tape.replayer(self.store.recorder)

    def _timed(self, work: Callable[[], str]) -> float:
        started = time.perf_counter()
        self.id = work()
        elapsed = time.perf_counter() - started
        self.turns += 1
        return elapsed

    def grow(self, turns: int) -> float:
        return sum(self._timed(self._next()) for _ in range(turns))

    def turn(self) -> float:
        """One more turn; its seconds. The garbage of earlier turns is collected first
        (untimed), so each timed turn starts alike and pays for its own garbage."""
        work = self._next()
        gc.collect()
        return self._timed(work)

    def held(self) -> int:
        if self.kind == "messages":
            return int(self.store.held())
        with closing(sqlite3.connect(self.path)) as conn:
            return int(conn.execute("SELECT count(*) FROM conversation_messages").fetchone()[0])

    def load(self, kind: str) -> float:
        """The conversation loaded for the next inference: ``cold`` (``load_conversation`` on
        a fresh ledger handle, opened before the clock starts), ``warm`` (on this worker's
        handle, which loaded it before) or ``raw`` (:func:`bench._raw.raw_load` on a fresh
        ``sqlite3`` connection, its schema read before the clock starts); its seconds."""
        gc.collect()
        if kind == RAW:
            with closing(sqlite3.connect(self.path)) as conn:
                conn.execute("SELECT 1 FROM conversation_messages LIMIT 1").fetchall()
                started = time.perf_counter()
                self.read[kind] = raw_load(conn, str(self.id))
                return time.perf_counter() - started
        with ExitStack() as stack:
            ledger = self.store if kind == WARM else stack.enter_context(Ledger.open(self.path))
            started = time.perf_counter()
            state = ledger.recorder.load_conversation(self.id)
            elapsed = time.perf_counter() - started
        self.read[kind] = sum(len(messages) for messages in state.store.sections.values())
        return elapsed

    def messages_read(self) -> dict[str, int]:
        return self.read

    def size(self) -> int:
        return checkpointed_size(self.path)

    def close(self) -> None:
        self.store.close()


# -- measuring ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    histories: tuple[int, ...]
    reps: int
    modes: tuple[str, ...] = ("NORMAL", "FULL")


PLANS = {
    "quick": Plan((50, 200), 15),
    "default": Plan((50, 200, 1000), 25),
    "full": Plan((50, 200, 1000), 51),
}


@dataclass
class Measured:
    plan: Plan
    systems: list[str]
    """Each system's name: its label and its ``synchronous``."""
    turns: Samples
    """Seconds per turn, by :func:`key`."""
    sizes: dict[str, int]
    """File sizes after the histories were built, by :func:`key`."""
    loads: Samples
    loaded: int
    profile: dict[str, float]
    skipped: list[str]


def key(system: str, turns: int) -> str:
    return f"{system} @ {turns}"


def _worker(name: str, path: Path) -> Worker:
    if name.startswith(SESSION):
        return Worker(name, peers.SessionTurns, path=str(path))
    label, mode = name.rsplit(" ", 1)
    return Worker(name, Turns, path=str(path), kind=KINDS[label], synchronous=mode)


def _kind(name: str) -> str:
    return "session" if name.startswith(SESSION) else KINDS[name.split(" @ ")[0].rsplit(" ", 1)[0]]


def _check(workers: dict[str, Worker], extra: int) -> None:
    """Every store holds every message of every turn."""
    for name, held in broadcast(workers, "held").items():
        turns = int(name.rsplit(" @ ", 1)[1]) + extra
        if held != HELD[_kind(name)] * turns:
            raise AssertionError(f"{name}: {held} messages after {turns} turns")


def measure(plan: Plan, tmp: Path) -> Measured:
    systems = [f"{label} {mode}" for mode in plan.modes for label in KINDS]
    skipped = peers.skipped(SESSION)
    if not skipped:
        systems.append(f"{SESSION} FULL")  # SQLite's default: the session offers no setting
    paths = {
        key(system, turns): tmp / f"recording-{'-'.join(system.lower().split())}-{turns}.db"
        for turns in sorted(plan.histories, reverse=True)  # the longest take longest to build
        for system in systems
    }
    with ExitStack() as stack:
        workers = {name: _worker(name.split(" @ ")[0], path) for name, path in paths.items()}
        for worker in workers.values():
            stack.callback(worker.close)
        print(f"  building {len(workers)} histories at once ...", file=sys.stderr, flush=True)
        for name, worker in workers.items():
            worker.send("grow", int(name.rsplit(" @ ", 1)[1]))
        gather(workers)
        _check(workers, 0)
        os.sync()  # the histories' dirty pages go to disk now, not during the timed turns
        sizes = {name: int(size) for name, size in broadcast(workers, "size").items()}
        print(f"  {plan.reps} timed turns on each ...", file=sys.stderr, flush=True)
        turns = interleaved_calls(workers, "turn", plan.reps)
        _check(workers, plan.reps)
        loaded = workers[key(f"{AGENT} {plan.modes[0]}", plan.histories[-1])]
        loads, count = measure_loads({"agentledger": loaded}, plan.reps)
    profile = turn_profile(tmp / "recording-profile.db", plan.modes[0])
    return Measured(plan, systems, turns, sizes, loads, count, profile, skipped)


def measure_loads(workers: dict[str, Worker], reps: int) -> tuple[Samples, int]:
    """Each worker's conversation loaded each way, interleaved: the seconds by
    ``"<name> <way>"``, and how many messages every load read (checked: all the same)."""
    print(f"  loading the conversations, {reps} times each way ...", file=sys.stderr, flush=True)
    loads = {
        f"{name} {way}": (lambda w=w, way=way: float(w.call("load", way)))
        for name, w in workers.items()
        for way in (COLD, WARM, RAW)
    }
    samples = interleaved(loads, reps)
    counts = {n for read in broadcast(workers, "messages_read").values() for n in read.values()}
    if len(counts) != 1:
        raise AssertionError(f"the loads read {counts} messages")
    return samples, counts.pop()


PROFILE_HISTORY, PROFILE_TURNS = 50, 40
AREAS = (
    ("sqlite3: statements and commits", ("sqlite3.", "_sqlite3")),
    ("the ledger's Python (rows, checksums, statements)", ("agentledger/ledger/",)),
    ("the scripted model and the tool", ("agentledger/llm/", "bench/")),
    ("the loop and the recorder", ("agentledger/",)),
    ("pydantic", ("pydantic",)),
    ("SQLAlchemy", ("sqlalchemy",)),
)
"""Each area and the markers of its code (a file path, or a built-in's owner); the first that
matches counts, anything else is "other" (json, datetime, uuid, the interpreter's built-ins)."""
OTHER = "other: json, datetime, uuid, built-ins"


def turn_profile(path: Path, synchronous: str) -> dict[str, float]:
    """Where an ``Agent.run`` turn's time goes: turns on a conversation of
    :data:`PROFILE_HISTORY` turns under ``cProfile``, each area's share of their self time
    (cProfile adds to every Python call: the shares are the figures, not the times)."""
    profile, conversation = cProfile.Profile(), None
    with Ledger.open(path, synchronous=synchronous) as ledger:
        for turn in range(PROFILE_HISTORY + PROFILE_TURNS):
            agent = turn_agent(ledger)  # built outside the profile, as the timed turns are
            if turn >= PROFILE_HISTORY:
                profile.enable()
            conversation = agent.run(question(turn), conversation).conversation_id
            profile.disable()
    totals: dict[str, float] = {}
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    for (filename, _, name), (_, _, own, _, _) in stats.items():
        where = filename.replace("\\", "/") if filename != "~" else name
        area = next((a for a, marks in AREAS if any(m in where for m in marks)), OTHER)
        totals[area] = totals.get(area, 0.0) + own
    whole = sum(totals.values())
    return {area: seconds / whole for area, seconds in totals.items()}


# -- the report ---------------------------------------------------------------------------------


def run(sizes: Sizes, tmp: Path) -> list[Section]:
    plan = PLANS[sizes.name]
    print(f"recording a turn at {plan.histories} turns of history ...", file=sys.stderr)
    return report(measure(plan, tmp))


def report(measured: Measured) -> list[Section]:
    return [turn_section(measured), load_section(measured), size_section(measured)]


def turn_section(measured: Measured) -> Section:
    plan, systems, median = measured.plan, measured.systems, measured.turns.median
    (small, *_, large) = plan.histories
    peer_mode = "FULL" if "FULL" in plan.modes else plan.modes[0]  # the session's setting

    def ratio(top: str, bottom: str, turns: int, target: str = "", headline: bool = False) -> Row:
        value = median(key(top, turns)) / median(key(bottom, turns))
        name = f"@ {turns}: {top} / {bottom}" + (f" (target {target}x)" if target else "")
        return Row(name, "", judged(x(value), value, target) if target else x(value), headline)

    rows = []
    for n in plan.histories:
        rows += [
            Row(
                f"@ {n}: {s}",
                f"{ms(median(key(s, n)))} a turn, {us(median(key(s, n)) / STEPS_PER_TURN)} a step",
            )
            for s in systems
        ]
        for mode in plan.modes:
            rows.append(
                ratio(f"{AGENT} {mode}", f"{MESSAGES} {mode}", n, f"≤ {TARGET_AGENT:g}", n == large)
            )
            rows.append(ratio(f"{RECORDER} {mode}", f"{MESSAGES} {mode}", n))
        rows += [
            ratio(p, f"{RECORDER} {peer_mode}", n, "> 1", n == large)
            for p in systems
            if p.startswith(SESSION)
        ]
    for s in systems:
        value = median(key(s, large)) / median(key(s, small))
        ours = s.startswith((AGENT, RECORDER))
        target = f" (target ≤ {TARGET_FLAT}x)" if ours else ""
        shown = judged(x(value), value, f"≤ {TARGET_FLAT}") if ours else x(value)
        rows.append(
            Row(
                f"{s}: turn @ {large} / turn @ {small}{target}",
                "",
                shown,
                ours and s.endswith(plan.modes[0]),
            )
        )
    shares = sorted(measured.profile.items(), key=lambda item: -item[1])
    notes = [f"{SESSION}: skipped, {why}." for why in measured.skipped]
    notes.append(
        f"A profile of {PROFILE_TURNS} `Agent.run` turns ({plan.modes[0]}, on a "
        f"{PROFILE_HISTORY}-turn history), self time by area (cProfile adds to every Python "
        "call: read the shares): " + "; ".join(f"{a} {share:.0%}" for a, share in shares) + "."
    )
    return Section(
        "6. Recording a turn: agentledger against raw sqlite3 and its peers",
        f"A turn ({TOOL_STEPS} tool-calling steps with ~1 KB results, an answer; scripted) "
        f"recorded on a conversation of {', '.join(map(str, plan.histories))} turns in a SQLite "
        f"file; a step is the turn's time / {STEPS_PER_TURN}. Each system and history in a "
        f"process of its own; one turn each in turn, {plan.reps} repetitions, medians; checked "
        "before and after: every message stored. Recorder alone: the Recorder calls of an "
        "in-memory run, replayed. Raw messages: plain `sqlite3` writing the turn's 8 messages "
        f"and 4 usage rows in 5 transactions. {SESSION}: `get_items()`, then 5 `add_items`, as "
        "the SDK's `Runner` calls it; it has no `synchronous` setting (SQLite's default, FULL).",
        rows,
        notes,
    )


def load_section(measured: Measured) -> Section:
    cold, warm, raw = (measured.loads.median(f"agentledger {way}") for way in (COLD, WARM, RAW))
    history = measured.plan.histories[-1] + measured.plan.reps
    return Section(
        "7. Loading a conversation for the next inference",
        f"The conversation of `{AGENT} {measured.plan.modes[0]}` after {history} turns "
        f"({measured.loaded:,} messages), loaded {measured.plan.reps} times each way, "
        "interleaved, each way in a process of its own. Cold: `load_conversation` on a fresh "
        "`Ledger` handle each time. Warm: the same handle, after a first load. Raw: one `SELECT` "
        "on a fresh `sqlite3` connection, each row a `dict`, its JSON decoded; nothing checked.",
        [
            Row("agentledger: load_conversation, fresh handle (cold)", ms(cold)),
            Row("agentledger: load_conversation, same handle (warm)", ms(warm)),
            Row("raw sqlite3: SELECT + decode into dicts", ms(raw)),
            Row(
                f"cold / raw (target ≤ {TARGET_LOAD}x)",
                "",
                judged(x(cold / raw), cold / raw, f"≤ {TARGET_LOAD}"),
                True,
            ),
            Row("warm / raw", "", x(warm / raw)),
        ],
    )


def size_section(measured: Measured) -> Section:
    (small, *_, large), mode = measured.plan.histories, measured.plan.modes[0]
    chosen = [s for s in measured.systems if s.endswith(mode) or s.startswith(SESSION)]

    def per_turn(system: str) -> float:
        grown = measured.sizes[key(system, large)] - measured.sizes[key(system, small)]
        return grown / (large - small)

    floor = per_turn(f"{MESSAGES} {mode}")
    rows = [
        Row(
            f"{s}: bytes per turn, {small} → {large} turns (/ raw messages)",
            f"{per_turn(s):,.0f} B",
            x(per_turn(s) / floor),
            s.startswith(AGENT),
        )
        for s in chosen
    ]
    rows += [
        Row(f"{s}: file @ {large} turns", f"{measured.sizes[key(s, large)] / 1e6:,.2f} MB")
        for s in chosen
    ]
    return Section(
        "8. Database size per turn, every system",
        "Each file's size after `PRAGMA wal_checkpoint(TRUNCATE)` once its history was built; "
        f"per turn = (size @ {large} − size @ {small}) / {large - small}. The ledger keeps a "
        "turn's run, 4 steps with their usage and timings, the tool executions and two "
        "messages, each row with a checksum.",
        rows,
    )
