"""Section 17: a LangGraph chat's checkpoints in the ledger (``LedgerSaver``) against LangGraph's
``SqliteSaver``, with the ``add_messages`` reducer and with ``DeltaChannel`` (LangGraph's beta
channel that stores a list's writes instead of the whole list at every checkpoint).

The chat: a graph of one node, a model answering each question; a turn is one ``invoke`` of a
~300-character question and a ~300-character answer (with its token usage), LangGraph's default
durability (a checkpoint per super-step). Each system at each history length is a worker
process of its own (section 6's :func:`~bench.recording.timed_turns`): its history built
untimed, its file's size taken, then one timed turn of each in turn, the order rotating.
"""

from __future__ import annotations

import gc
import importlib.util
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from . import peers
from ._common import Samples, Sizes, as_synchronous, ms, x
from ._raw import checkpointed_size
from ._report import Row, Section, ratio
from .recording import timed_turns

LEDGER, SQLITE = "agentledger LedgerSaver", peers.SQLITE_GRAPH
DELTA = ", DeltaChannel"
SYSTEMS = {LEDGER: ("ledger", False), SQLITE: ("sqlite", False)}
SYSTEMS |= {LEDGER + DELTA: ("ledger", True), SQLITE + DELTA: ("sqlite", True)}
"""Each system's saver and whether its ``messages`` channel is a ``DeltaChannel``."""
QUESTION_CHARS = ANSWER_CHARS = 300
USAGE = {"input_tokens": 100, "output_tokens": 75, "total_tokens": 175}


def _question(turn: int) -> str:
    return f"question {turn}: ".ljust(QUESTION_CHARS, "q")


def _answer(turn: int) -> str:
    return f"answer {turn}: ".ljust(ANSWER_CHARS, "a")


def _messages_channel(delta: bool) -> Any:
    """The ``messages`` key's annotation: ``add_messages``, or LangGraph's delta reducer on a
    ``DeltaChannel`` (which assigns no ids: every message here has one)."""
    from typing import Annotated

    from langchain_core.messages import AnyMessage
    from langgraph.graph.message import add_messages

    if not delta:
        return Annotated[list[AnyMessage], add_messages]
    from langgraph.channels.delta import DeltaChannel
    from langgraph.graph.message import _messages_delta_reducer

    # The reducer's own annotation is narrower than the channel's: LangGraph's, not ours.
    return Annotated[list[AnyMessage], DeltaChannel(cast(Any, _messages_delta_reducer))]


class Chat:
    """One thread of the chat in one database, growing a turn at a time through ``kind``
    (a key of :data:`SYSTEMS`): ``LedgerSaver`` on a ledger opened at ``synchronous``, or
    ``SqliteSaver`` on one ``sqlite3`` connection at it (in WAL mode, which its setup sets)."""

    def __init__(self, path: str, kind: str, synchronous: str) -> None:
        from typing import TypedDict

        from langgraph.graph import START, StateGraph

        self.path, self.turns, self.grown = Path(path), 0, 0
        saver_kind, delta = SYSTEMS[kind]
        self.closing: Callable[[], None]
        if saver_kind == "ledger":
            from agentledger.integrations.langgraph import LedgerSaver
            from agentledger.ledger import Ledger

            ledger = Ledger.open(self.path, synchronous=as_synchronous(synchronous))
            saver: Any = LedgerSaver(ledger)
            self.closing = ledger.close
        else:
            from langgraph.checkpoint.sqlite import SqliteSaver

            conn = sqlite3.connect(self.path, check_same_thread=False)
            conn.execute(f"PRAGMA synchronous={synchronous}")
            saver = SqliteSaver(conn)
            saver.setup()
            self.closing = conn.close
        # The functional form evaluates the annotation now (as bench/peers.py's graph does).
        state = TypedDict("State", {"messages": _messages_channel(delta)})  # type: ignore[misc]  # noqa: UP013
        builder = StateGraph(state)
        builder.add_node("model", lambda _: {"messages": [self._reply]})
        builder.add_edge(START, "model")
        self.graph: Any = builder.compile(checkpointer=saver)
        self.config: Any = {"configurable": {"thread_id": "chat"}}
        self._reply: Any = None

    def _next(self) -> Callable[[], object]:
        """The next turn, ready to run: its messages built, untimed."""
        from langchain_core.messages import AIMessage, HumanMessage

        asked = HumanMessage(_question(self.turns), id=str(uuid.uuid4()))
        self._reply = AIMessage(
            _answer(self.turns), id=str(uuid.uuid4()), usage_metadata=dict(USAGE)
        )
        return lambda: self.graph.invoke({"messages": [asked]}, self.config)

    def _timed(self, work: Callable[[], object]) -> float:
        started = time.perf_counter()
        work()
        self.turns += 1
        return time.perf_counter() - started

    def grow(self, turns: int) -> float:
        """``turns`` turns; the file's size is then taken (:meth:`size_grown`)."""
        spent = sum(self._timed(self._next()) for _ in range(turns))
        self.grown = checkpointed_size(self.path)
        return spent

    def turn(self) -> float:
        """One more turn; its seconds (the garbage of earlier turns collected first, untimed)."""
        work = self._next()
        gc.collect()
        return self._timed(work)

    def check(self) -> None:
        """The thread's state holds every message of every turn, in order."""
        held = self.graph.get_state(self.config).values.get("messages", [])
        expected = [text(t) for t in range(self.turns) for text in (_question, _answer)]
        if [m.content for m in held] != expected:
            raise AssertionError(f"{self.path.name}: {len(held)} messages after {self.turns}")

    def size_grown(self) -> int:
        """The file's bytes once the history was built, before any timed turn."""
        return self.grown

    def close(self) -> None:
        self.closing()


# -- measuring and the report -------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    histories: tuple[int, ...]
    reps: int
    bytes_at: int = 200
    """The history the file's target is judged at (a fifth of SqliteSaver's, at 200 turns)."""


PLANS = {"quick": Plan((50, 200), 7), "default": Plan((50, 200, 1000), 15)}
PLANS["full"] = Plan((50, 200, 1000), 31)
PAIRS = [(LEDGER, SQLITE), (LEDGER + DELTA, SQLITE + DELTA), (SQLITE + DELTA, SQLITE)]
"""The systems held against each other: the targets are the first pair's."""
BYTES_TARGET, TURN_TARGET = "≤ 0.2x", "≤ 1x"


@dataclass
class Measured:
    plan: Plan
    systems: list[str]
    turns: Samples
    sizes: dict[str, int]
    """Each worker's file size once its history was built."""
    skipped: list[str]


def skipped() -> dict[str, str]:
    """Why each system that cannot be measured cannot be."""
    why: dict[str, str] = {}
    if importlib.util.find_spec("langgraph") is None:
        return dict.fromkeys(SYSTEMS, "not installed (langgraph): `pip install -e '.[bench]'`")
    if importlib.util.find_spec("langgraph.channels.delta") is None:
        why |= dict.fromkeys((LEDGER + DELTA, SQLITE + DELTA), "this langgraph has no DeltaChannel")
    for reason in peers.skipped(SQLITE):
        why |= {SQLITE: reason, SQLITE + DELTA: why.get(SQLITE + DELTA, reason)}
    return why


def measure(plan: Plan, tmp: Path) -> Measured:
    why = skipped()
    systems = [s for s in SYSTEMS if s not in why]
    chosen = {
        f"{s} @ {n}": (None, s, "FULL", n)
        for n in sorted(plan.histories, reverse=True)  # the longest take longest to build
        for s in systems
    }
    with ExitStack() as stack:
        workers, turns = timed_turns(stack, tmp, chosen, plan.reps, factory=Chat)
        sizes = {name: int(w.call("size_grown")) for name, w in workers.items()}
    return Measured(plan, systems, turns, sizes, [f"{s}: skipped, {r}." for s, r in why.items()])


def run(sizes: Sizes, tmp: Path) -> list[Section]:
    print("LangGraph checkpoints: a chat at each history length ...", file=sys.stderr, flush=True)
    return [report(measure(PLANS[sizes.name], tmp))]


def _against(measured: Measured, n: int) -> list[Row]:
    """At ``n`` turns: each system's file and turn, and the :data:`PAIRS`' ratios, with the
    targets named at theirs."""
    median, sizes, rows = measured.turns.median, measured.sizes, []
    for s in measured.systems:
        megabytes = f"{sizes[f'{s} @ {n}'] / 1e6:,.2f} MB"
        rows += [
            Row(f"@ {n}: {s}: file", megabytes),
            Row(f"@ {n}: {s}: a turn", ms(median(f"{s} @ {n}"))),
        ]
    for top, bottom in PAIRS:
        if top not in measured.systems or bottom not in measured.systems:
            continue
        ours = (top, bottom) == (LEDGER, SQLITE)
        target = BYTES_TARGET if ours and n == measured.plan.bytes_at else ""
        value = sizes[f"{top} @ {n}"] / sizes[f"{bottom} @ {n}"]
        rows.append(ratio(f"@ {n}: file, {top} / {bottom}", value, target, bool(target)))
        value = median(f"{top} @ {n}") / median(f"{bottom} @ {n}")
        last = n == measured.plan.histories[-1]
        target = TURN_TARGET if ours else ""
        rows.append(ratio(f"@ {n}: a turn, {top} / {bottom}", value, target, ours and last))
    return rows


def report(measured: Measured) -> Section:
    plan, median = measured.plan, measured.turns.median
    small, large = plan.histories[0], plan.histories[-1]
    rows = [row for n in plan.histories for row in _against(measured, n)]
    for s in measured.systems:
        growth = median(f"{s} @ {large}") / median(f"{s} @ {small}")
        rows.append(Row(f"{s}: turn @ {large} / turn @ {small}", ratio=x(growth)))
    return Section(
        "17. LangGraph checkpoints: LedgerSaver against SqliteSaver",
        f"A LangGraph chat (one model node; a turn is one `invoke`: a {QUESTION_CHARS}-character "
        f"question, a {ANSWER_CHARS}-character answer with its usage) on one thread of "
        f"{', '.join(map(str, plan.histories))} turns, its checkpoints in a SQLite file "
        "(synchronous=FULL) through `LedgerSaver` or `SqliteSaver`, the `messages` key with "
        "`add_messages` or a `DeltaChannel`. Each system and history in a process of its own; "
        "the file's size after `PRAGMA wal_checkpoint(TRUNCATE)` once the history is built; then "
        f"one turn each in turn, {plan.reps} repetitions, medians; checked before and after: "
        "the thread's state holds every message.",
        rows,
        measured.skipped,
    )
