"""Sections 6 to 8: recording one turn at 50, 200 and 1000 turns of history, loading the
conversation back, and the bytes a turn takes.

Each system (:data:`KINDS`) at each history length is a worker process of its own
(``bench/_workers.py``) that builds its history (untimed, all at once); then one timed turn of
each in turn, the order rotating. :class:`Turns` runs in those workers, in the previous
version's too (``bench/previous.py``): it uses only the names both export.
"""

from __future__ import annotations

import cProfile
import gc
import os
import pstats
import sqlite3
import sys
import time
from collections.abc import Callable, Mapping
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
    as_synchronous,
    database,
    interleaved,
    ms,
    question,
    turn_agent,
    us,
    x,
)
from ._raw import RawMessages, checkpointed_size, raw_load
from ._report import Row, Section, ratio
from ._workers import Worker, broadcast, gather

AGENT, RECORDER = "agentledger Agent.run", "agentledger recorder alone"
MESSAGES, SESSION = "raw sqlite3 messages", peers.SESSION
KINDS = {AGENT: "agent", RECORDER: "recorder", MESSAGES: "messages", SESSION: "session"}
HELD = {"agent": 2, "recorder": 2, "messages": 8, "session": peers.ITEMS_PER_TURN}
"""Messages a turn adds to each kind of store (the ledger's conversation keeps the user's and
the answer; the tool trace is in its step and tool rows)."""
COLD, WARM, RAW = "cold", "warm", "raw"


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
        state = AgentState.empty(conversation_id=conversation_id)
        return state.with_message_store(self.conversation.store)

    def begin_run(
        self, state: AgentState, *, user_message: Message | None, agent_name: str
    ) -> None:
        named = {"user_message": user_message, "agent_name": agent_name}
        self.calls.append(("begin_run", (state,), named))

    def record_step(self, *arguments: Any) -> None:
        self.calls.append(("record_step", arguments, {}))

    def commit_run(self, state: AgentState) -> None:
        self.calls.append(("commit_run", (state,), {}))
        self.conversation = state

    def fail_run(self, state: AgentState, error: str | None = None) -> None:
        raise RuntimeError(f"the benchmark's in-memory run failed: {error or state.error}")

    def replay(self, recorder: Any) -> str:
        """The last run's calls made again on ``recorder``; the conversation's id."""
        for method, args, named in self.calls:
            getattr(recorder, method)(*args, **named)
        assert self.conversation is not None
        return self.conversation.conversation_id


class Turns:
    """One conversation in one database, growing a turn at a time through ``kind``: ``agent``,
    ``recorder`` (only the replay timed), ``messages`` (the floor) or ``session`` (the SDK's
    ``SQLiteSession``, SQLite's default ``synchronous``: it has no setting); and loaded back."""

    def __init__(self, path: str, kind: str, synchronous: str) -> None:
        self.path, self.kind, self.turns = Path(path), kind, 0
        self.id: Any = None
        """The conversation's id once its first turn ran (what the turn returned)."""
        self.tape, self.read = Tape(), dict[str, int]()
        self.store: Any
        if kind == "messages":
            self.store = RawMessages(self.path, synchronous)
        elif kind == "session":
            self.store = peers.SessionWriter(path, 0)
            self.store.prepare(0, 1, 0)
        else:
            self.store = Ledger.open(self.path, synchronous=as_synchronous(synchronous))

    def _next(self) -> Callable[[], object]:
        """The next turn, ready to run: its agent built (or its calls prepared), untimed."""
        text, conversation = question(self.turns), self.id
        if self.kind == "messages":
            return lambda: self.store.run(text, conversation, TOOL_STEPS, 1)
        if self.kind == "session":
            return lambda: self.store.turn(0, self.turns)
        if self.kind == "agent":
            agent = turn_agent(self.store)
            return lambda: agent.run(text, conversation).conversation_id
        turn_agent(self.tape).run(text, conversation)  # in memory, before the clock starts
        return lambda: self.tape.replay(self.store.recorder)

    def _timed(self, work: Callable[[], object]) -> float:
        started = time.perf_counter()
        self.id = work()
        self.turns += 1
        return time.perf_counter() - started

    def grow(self, turns: int) -> float:
        return sum(self._timed(self._next()) for _ in range(turns))

    def turn(self) -> float:
        """One more turn; its seconds. The garbage of earlier turns is collected first
        (untimed), so each timed turn starts alike and pays for its own garbage."""
        work = self._next()
        gc.collect()
        return self._timed(work)

    def check(self) -> None:
        """Every message of every turn is stored."""
        if self.kind in ("messages", "session"):
            held = self.store.held()
        else:
            with closing(sqlite3.connect(self.path)) as conn:
                held = conn.execute("SELECT count(*) FROM conversation_messages").fetchone()[0]
        if held != HELD[self.kind] * self.turns:
            raise AssertionError(f"{self.path.name}: {held} messages after {self.turns} turns")

    def load(self, way: str) -> float:
        """The conversation loaded for the next inference, its seconds: ``cold``
        (``load_conversation`` on a fresh handle, opened before the clock starts), ``warm``
        (on this worker's handle, which loaded it before) or ``raw`` (:func:`raw_load` on a
        fresh ``sqlite3`` connection, its schema read before the clock starts)."""
        gc.collect()
        with ExitStack() as stack:
            if way == RAW:
                conn = stack.enter_context(closing(sqlite3.connect(self.path)))
                conn.execute("SELECT 1 FROM conversation_messages LIMIT 1").fetchall()
                started = time.perf_counter()
                self.read[way] = raw_load(conn, str(self.id))
                return time.perf_counter() - started
            ledger = self.store if way == WARM else stack.enter_context(Ledger.open(self.path))
            started = time.perf_counter()
            state = ledger.recorder.load_conversation(self.id)
            elapsed = time.perf_counter() - started
        self.read[way] = sum(len(messages) for messages in state.store.sections.values())
        return elapsed

    def messages_read(self) -> dict[str, int]:
        return dict(self.read)

    def size(self) -> int:
        return checkpointed_size(self.path)

    def close(self) -> None:
        self.store.close()


def timed_turns(
    stack: ExitStack,
    tmp: Path,
    chosen: Mapping[str, tuple[Path | None, str, str, int]],
    reps: int,
    building: dict[str, Worker] | None = None,
    factory: Callable[..., Any] = Turns,
) -> tuple[dict[str, Worker], Samples]:
    """A worker of ``factory`` (:class:`Turns`, or a class with its ``grow``, ``turn`` and
    ``check``) for each name, with its version's source (None: this version's), kind,
    ``synchronous`` and history (built untimed, all at once, the work of the ``building``
    workers waited for too); then ``reps`` timed turns of each in turn; checked before and
    after: every store holds every message."""
    workers = {}
    for name, (source, kind, mode, turns) in chosen.items():
        path = str(database(tmp, name))
        named = {"path": path, "kind": kind, "synchronous": mode}
        workers[name] = Worker(name, factory, source=source, **named)
        stack.callback(workers[name].close)
        workers[name].send("grow", turns)
    print(f"  building {len(workers)} histories at once ...", file=sys.stderr, flush=True)
    gather(workers | (building or {}))
    os.sync()  # the histories' dirty pages go to disk now, not during the timed turns
    broadcast(workers, "check")
    print(f"  {reps} timed turns on each ...", file=sys.stderr, flush=True)
    samples = interleaved({name: w.caller("turn") for name, w in workers.items()}, reps)
    broadcast(workers, "check")
    return workers, samples


def timed_loads(workers: dict[str, Worker], reps: int) -> tuple[Samples, int]:
    """Each worker's conversation loaded each way, interleaved: the seconds by
    ``"<name> <way>"``, and how many messages every load read (checked: all the same)."""
    print(f"  loading the conversations, {reps} times each way ...", file=sys.stderr, flush=True)
    loads = {
        f"{n} {way}": w.caller("load", way) for n, w in workers.items() for way in (COLD, WARM, RAW)
    }
    samples = interleaved(loads, reps)
    counts = {n for read in broadcast(workers, "messages_read").values() for n in read.values()}
    if len(counts) != 1:
        raise AssertionError(f"the loads read {counts} messages")
    return samples, counts.pop()


def per_turn(seconds: float) -> str:
    return f"{ms(seconds)} a turn, {us(seconds / STEPS_PER_TURN)} a step"


AREAS = {
    "sqlite3: statements and commits": ("sqlite3.", "_sqlite3"),
    "the ledger's Python (rows, checksums, statements)": ("/agentledger/ledger/",),
    "the scripted model and the tool": ("/agentledger/llm/", "/bench/"),
    "the loop and the recorder": ("/agentledger/",),
    "pydantic": ("pydantic",),
    "SQLAlchemy": ("sqlalchemy",),
}
"""Each area and the markers of its code (a file path, or a built-in's owner); the first that
matches counts, anything else is the standard library and the interpreter's built-ins."""


def turn_profile(path: Path, synchronous: str, history: int, turns: int) -> dict[str, float]:
    """Each area's share of the self time of ``turns`` ``Agent.run`` turns after ``history``,
    under ``cProfile`` (which adds to every Python call: the shares are the figures)."""
    profile, conversation = cProfile.Profile(), None
    with Ledger.open(path, synchronous=as_synchronous(synchronous)) as ledger:
        for turn in range(history + turns):
            agent = turn_agent(ledger)  # built outside the profile, as the timed turns are
            if turn >= history:
                profile.enable()
            conversation = agent.run(question(turn), conversation).conversation_id
            profile.disable()
    totals: dict[str, float] = {}
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    for (filename, _, name), (_, _, own, _, _) in stats.items():
        where = filename.replace("\\", "/") if filename != "~" else name
        area = next((a for a, marks in AREAS.items() if any(m in where for m in marks)), None)
        area = area or "other: json, datetime, uuid, built-ins"
        totals[area] = totals.get(area, 0.0) + own
    return {area: seconds / sum(totals.values()) for area, seconds in totals.items()}


# -- measuring and the report -------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    histories: tuple[int, ...]
    reps: int
    modes: tuple[str, ...] = ("NORMAL", "FULL")
    profiled: tuple[int, int] = (50, 40)
    """The profile's history and its turns."""


PLANS = {"quick": Plan((50, 200), 15), "default": Plan((50, 200, 1000), 25)}
PLANS["full"] = Plan((50, 200, 1000), 51)


@dataclass
class Measured:
    plan: Plan
    systems: list[str]
    """Each system's label and ``synchronous``; a worker's name adds `` @ <turns>``."""
    turns: Samples
    sizes: dict[str, int]
    """File sizes once the timed turns were added, by worker."""
    loads: Samples
    loaded: int
    profile: dict[str, float]
    skipped: list[str]


def measure(plan: Plan, tmp: Path) -> Measured:
    systems = [f"{label} {mode}" for mode in plan.modes for label in (AGENT, RECORDER, MESSAGES)]
    skipped = peers.skipped(SESSION)
    systems += [] if skipped else [f"{SESSION} FULL"]
    chosen = {
        f"{s} @ {n}": (None, KINDS[s.rsplit(" ", 1)[0]], s.split()[-1], n)
        for n in sorted(plan.histories, reverse=True)  # the longest take longest to build
        for s in systems
    }
    with ExitStack() as stack:
        workers, turns = timed_turns(stack, tmp, chosen, plan.reps)
        sizes = {name: int(size) for name, size in broadcast(workers, "size").items()}
        loaded = workers[f"{AGENT} {plan.modes[0]} @ {plan.histories[-1]}"]
        loads, count = timed_loads({"agentledger": loaded}, plan.reps)
    profile = turn_profile(tmp / "recording-profile.db", plan.modes[0], *plan.profiled)
    return Measured(plan, systems, turns, sizes, loads, count, profile, skipped)


def run(sizes: Sizes, tmp: Path) -> list[Section]:
    print("recording a turn at each history length ...", file=sys.stderr, flush=True)
    return report(measure(PLANS[sizes.name], tmp))


def report(measured: Measured) -> list[Section]:
    return [turn_section(measured), load_section(measured), size_section(measured)]


def turn_section(measured: Measured) -> Section:
    plan, median, rows = measured.plan, measured.turns.median, []
    small, large = plan.histories[0], plan.histories[-1]
    peer_mode = "FULL" if "FULL" in plan.modes else plan.modes[0]

    def against(top: str, bottom: str, n: int, target: str = "") -> Row:
        value = median(f"{top} @ {n}") / median(f"{bottom} @ {n}")
        return ratio(f"@ {n}: {top} / {bottom}", value, target, bool(target) and n == large)

    for n in plan.histories:
        rows += [Row(f"@ {n}: {s}", per_turn(median(f"{s} @ {n}"))) for s in measured.systems]
        for mode in plan.modes:
            rows.append(against(f"{AGENT} {mode}", f"{MESSAGES} {mode}", n, "≤ 3x"))
            rows.append(against(f"{RECORDER} {mode}", f"{MESSAGES} {mode}", n))
        if not measured.skipped:
            rows.append(against(f"{SESSION} FULL", f"{RECORDER} {peer_mode}", n, "> 1x"))
    for s in measured.systems:
        value, ours = median(f"{s} @ {large}") / median(f"{s} @ {small}"), s.startswith("agent")
        name, target = f"{s}: turn @ {large} / turn @ {small}", "≤ 1.2x" if ours else ""
        rows.append(ratio(name, value, target, ours and s.endswith(plan.modes[0])))
    shares = sorted(measured.profile.items(), key=lambda item: -item[1])
    notes = [f"{SESSION}: skipped, {why}." for why in measured.skipped]
    notes.append(
        f"A profile of {plan.profiled[1]} `Agent.run` turns ({plan.modes[0]}, on a "
        f"{plan.profiled[0]}-turn history), self time by area (cProfile adds to every Python "
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
    turns = measured.plan.histories[-1] + measured.plan.reps
    return Section(
        "7. Loading a conversation for the next inference",
        f"The conversation of `{AGENT} {measured.plan.modes[0]}` after {turns} turns "
        f"({measured.loaded:,} messages), loaded {measured.plan.reps} times each way, "
        "interleaved, in its worker. Cold: `load_conversation` on a fresh `Ledger` handle. Warm: "
        "on the worker's handle, which loaded it before. Raw: one `SELECT` on a fresh `sqlite3` "
        "connection, each row a `dict`, its JSON decoded, nothing checked.",
        [
            Row("agentledger: load_conversation, fresh handle (cold)", ms(cold)),
            Row("agentledger: load_conversation, same handle (warm)", ms(warm)),
            Row("raw sqlite3: SELECT + decode into dicts", ms(raw)),
            ratio("cold / raw", cold / raw, "≤ 1.5x", headline=True),
            ratio("warm / raw", warm / raw),
        ],
    )


def size_section(measured: Measured) -> Section:
    (small, *_, large), mode, sizes = (
        measured.plan.histories,
        measured.plan.modes[0],
        measured.sizes,
    )
    chosen = [s for s in measured.systems if s.endswith(mode) or s.startswith(SESSION)]
    grown = {
        s: (sizes[f"{s} @ {large}"] - sizes[f"{s} @ {small}"]) / (large - small) for s in chosen
    }
    floor = grown[f"{MESSAGES} {mode}"]
    rows = [
        Row(
            f"{s}: bytes per turn, {small} → {large} turns (/ raw messages)",
            f"{grown[s]:,.0f} B",
            x(grown[s] / floor),
            s.startswith(AGENT),
        )
        for s in chosen
    ]
    rows += [
        Row(f"{s}: file @ {large}", f"{sizes[f'{s} @ {large}'] / 1e6:,.2f} MB") for s in chosen
    ]
    return Section(
        "8. Database size per turn, every system",
        "Each file's size after `PRAGMA wal_checkpoint(TRUNCATE)`, after the timed turns; per "
        f"turn = (size @ {large} − size @ {small}) / {large - small}. The ledger keeps a turn's "
        "run, 4 steps with their usage and timings, the tool executions and two messages, each "
        "row with a checksum.",
        rows,
    )
