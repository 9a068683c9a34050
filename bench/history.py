"""A turn's cost as its conversation grows, and the database's size per turn.

A turn is one ``Agent.run`` on an existing conversation: a user message, three tool-calling
steps with ~1 KB tool results, an answer. Four databases, ``synchronous=NORMAL`` (so that
``fsync`` does not hide what grows): the library's and the raw writer's, each holding one
conversation of ``small`` turns and one of ``large`` turns, the history built by running the
turns through the library (and through the raw writer for its files). Then turns are timed on
each, interleaved: the ratio turn-cost@large / turn-cost@small should be 1.

Sizes are the files' sizes after ``PRAGMA wal_checkpoint(TRUNCATE)``, before the timed turns;
bytes per turn are the difference between the large and the small database over the difference
in turns, so the schema's fixed pages do not count.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

from agentledger import AgentBuilder
from agentledger._builder import DEFAULT_MAX_STEPS
from agentledger.ledger import Ledger
from agentledger.ledger.schema import ddl
from agentledger.llm import ScriptedLLM

from ._common import RESULT, Samples, Sizes, interleaved, lookup, ms, script
from ._raw import RawLedger, check_same_rows, checkpointed_size, dumps
from ._report import Row, Section

TOOL_STEPS = 3
SYNCHRONOUS: Literal["NORMAL"] = "NORMAL"
LIBRARY, RAW = "agentledger", "raw"


def _question(i: int) -> str:
    return f"question {i}"


def _agent_turn(ledger: Ledger, turn: int, conversation_id: str | None) -> Callable[[], str]:
    """A turn ready to run (agent built, untimed); running it returns the conversation id."""
    agent = (
        AgentBuilder()
        .with_llm(ScriptedLLM(script(TOOL_STEPS, 1)))
        .with_tools([lookup])
        .with_ledger(ledger)
        .build()
    )
    return lambda: agent.run(_question(turn), conversation_id).conversation_id


def _raw_turn(raw: RawLedger, turn: int, conversation_id: str | None) -> Callable[[], str]:
    return lambda: raw.run(
        _question(turn), conversation_id, tool_steps=TOOL_STEPS, calls_per_step=1
    )


Turn = Callable[[int, str | None], Callable[[], str]]


@dataclass
class Conversation:
    """One conversation in one database, and how to add a turn to it."""

    path: Path
    make_turn: Turn
    turns: int = 0
    conversation_id: str | None = None

    def grow(self, turns: int) -> float:
        """Add ``turns`` turns; the seconds it took."""
        started = time.perf_counter()
        for _ in range(turns):
            self.step()
        return time.perf_counter() - started

    def step(self) -> float:
        """One more turn; the seconds that turn took (its set-up excluded)."""
        turn = self.make_turn(self.turns, self.conversation_id)
        started = time.perf_counter()
        self.conversation_id = turn()
        elapsed = time.perf_counter() - started
        self.turns += 1
        return elapsed


@dataclass(frozen=True)
class Measured:
    samples: Samples
    sizes: dict[str, int]
    build_seconds: dict[str, float]


def _key(system: str, turns: int) -> str:
    return f"{system}@{turns}"


def measure(sizes: Sizes, tmp: Path) -> Measured:
    schema, budget = ddl("sqlite"), dumps({"max_steps": DEFAULT_MAX_STEPS})
    small, large = sizes.history_small, sizes.history_large
    conversations: dict[str, Conversation] = {}
    with ExitStack() as stack:
        for turns in (small, large):
            path = tmp / f"history-library-{turns}.db"
            ledger = stack.enter_context(Ledger.open(path, synchronous=SYNCHRONOUS))
            conversations[_key(LIBRARY, turns)] = Conversation(path, partial(_agent_turn, ledger))
            path = tmp / f"history-raw-{turns}.db"
            raw = RawLedger(path, schema, SYNCHRONOUS, budget=budget)
            stack.callback(raw.close)
            conversations[_key(RAW, turns)] = Conversation(path, partial(_raw_turn, raw))
        build_seconds = {}
        for turns in (small, large):
            for system in (LIBRARY, RAW):
                key = _key(system, turns)
                print(f"  building {key}: {turns} turns ...", file=sys.stderr, flush=True)
                build_seconds[key] = conversations[key].grow(turns)
        file_sizes = {key: checkpointed_size(c.path) for key, c in conversations.items()}
        systems = {key: conversation.step for key, conversation in conversations.items()}
        samples = interleaved(systems, sizes.turn_samples)
    for turns in (small, large):
        library, raw_ = conversations[_key(LIBRARY, turns)], conversations[_key(RAW, turns)]
        check_same_rows(library.path, raw_.path)
    return Measured(samples, file_sizes, build_seconds)


def run(sizes: Sizes, tmp: Path) -> list[Section]:
    small, large = sizes.history_small, sizes.history_large
    print(f"turn cost at {small} and {large} turns of history ...", file=sys.stderr, flush=True)
    measured = measure(sizes, tmp)
    samples = measured.samples

    def turn(system: str, turns: int) -> float:
        return samples.median(_key(system, turns))

    library_growth = turn(LIBRARY, large) / turn(LIBRARY, small)
    raw_growth = turn(RAW, large) / turn(RAW, small)
    quick_note = (
        [f"Quick mode: {large} turns of history instead of 1000 (run without --quick for 1000)."]
        if sizes.name == "quick"
        else []
    )
    build = measured.build_seconds
    cost = Section(
        title=f"3. The cost of a turn at {small} and at {large} turns of history",
        about=(
            f"One turn (`Agent.run` on an existing conversation: a user message, {TOOL_STEPS} "
            "tool-calling steps with ~1 KB results, an answer) on a conversation already holding "
            f"{small} and {large} turns, synchronous={SYNCHRONOUS}; {sizes.turn_samples} turns "
            "timed on each, interleaved (so the histories grow by that much while measured). "
            "Raw: plain `sqlite3` writing the same rows, loading nothing."
        ),
        rows=[
            Row(f"agentledger: turn @ {small} turns", ms(turn(LIBRARY, small))),
            Row(f"agentledger: turn @ {large} turns", ms(turn(LIBRARY, large))),
            Row(
                f"agentledger: turn @ {large} / turn @ {small} (flat = 1.00x)",
                "",
                f"{library_growth:.2f}x",
                headline=True,
            ),
            Row(f"raw sqlite3: turn @ {small} turns", ms(turn(RAW, small))),
            Row(f"raw sqlite3: turn @ {large} turns", ms(turn(RAW, large))),
            Row(
                f"raw sqlite3: turn @ {large} / turn @ {small}",
                "",
                f"{raw_growth:.2f}x",
                headline=True,
            ),
            Row(
                f"agentledger / raw @ {small} turns",
                "",
                f"{turn(LIBRARY, small) / turn(RAW, small):.2f}x",
            ),
            Row(
                f"agentledger / raw @ {large} turns",
                "",
                f"{turn(LIBRARY, large) / turn(RAW, large):.2f}x",
            ),
        ],
        notes=[
            *quick_note,
            f"Building the histories (untimed in the table): {large} turns through the library "
            f"took {build[_key(LIBRARY, large)]:.1f} s "
            f"({build[_key(LIBRARY, large)] / large * 1e3:.1f} ms a turn on average), "
            f"through raw sqlite3 {build[_key(RAW, large)]:.1f} s.",
        ],
    )
    file_sizes = measured.sizes

    def per_turn(system: str) -> float:
        grown = file_sizes[_key(system, large)] - file_sizes[_key(system, small)]
        return grown / (large - small)

    size = Section(
        title="4. Database size per turn",
        about=(
            "File size after `PRAGMA wal_checkpoint(TRUNCATE)`, before the timed turns; per "
            f"turn = (size @ {large} − size @ {small}) / {large - small}. A turn stores "
            f"{TOOL_STEPS} tool results of {len(RESULT)} bytes (in `tool_executions`); its "
            "execution-buffer rows are deleted when the run commits."
        ),
        rows=[
            Row("agentledger: bytes per turn", f"{per_turn(LIBRARY):,.0f} B", headline=True),
            Row("raw sqlite3: bytes per turn", f"{per_turn(RAW):,.0f} B"),
            Row(
                "agentledger / raw, bytes per turn",
                "",
                f"{per_turn(LIBRARY) / per_turn(RAW):.2f}x",
                headline=True,
            ),
            Row(
                f"agentledger: file @ {large} turns",
                f"{file_sizes[_key(LIBRARY, large)] / 1e6:,.2f} MB",
            ),
            Row(
                f"raw sqlite3: file @ {large} turns",
                f"{file_sizes[_key(RAW, large)] / 1e6:,.2f} MB",
            ),
            Row(
                f"agentledger: bytes per turn / the turn's {TOOL_STEPS * len(RESULT)} B of tool "
                "results",
                "",
                f"{per_turn(LIBRARY) / (TOOL_STEPS * len(RESULT)):.2f}x",
            ),
        ],
    )
    return [cost, size]
