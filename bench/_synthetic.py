"""A synthetic ledger for the analytics benchmark, built fast and always the same (one seed).

The schema comes from the real migrations (``Ledger.open``), the rows from ``sqlite3`` bulk
inserts in one transaction, in the ledger's formats (UUIDv7 text ids that sort by time, ISO
timestamps, JSON text). Conversations of one to four turns, each a run tree to depth 5, each
subagent run in a conversation of its own, started by its parent's ``spawn_subagent`` call,
which lasts as long as the run; about ten steps a run with tokens and costs (unknown for an
unpriced model and a few steps); 1% of the runs failed, 0.5% still running; five tools with
their own error rates and log-normal durations.
"""

from __future__ import annotations

import json
import math
import random
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from agentledger.ledger import Ledger

SEED, MAX_DEPTH = 20300101, 5
FAN_OUT = (0, 0, 0, 0, 1, 1, 2, 3)
"""Subagent runs a run above ``MAX_DEPTH`` starts, drawn uniformly (0.875 on average)."""
CALLS = (1, 1, 1, 1, 2)
"""Ordinary tool calls per tool-calling step, drawn uniformly."""
FAILED, RUNNING, UNPRICED_STEPS = 0.01, 0.005, 0.02
"""The fractions of runs that failed (their last step an ``error`` step) and still running, and
of a priced model's steps whose cost is unknown all the same."""
START, EPOCH_MS = datetime(2030, 1, 1), 1_893_456_000_000
"""The synthetic clock's origin (UTC, naive as the ledger stores times on SQLite), and in Unix
milliseconds, for the ids."""
ROOT_AGENT, SUBAGENTS = "assistant", ("researcher", "coder", "reviewer", "summarizer")
SPAWN, BUDGET = "spawn_subagent", json.dumps({"max_steps": 50})
TEXT = "The quick brown fox jumps over the lazy dog; " * 12


class Model(NamedTuple):
    name: str
    input_price: float | None  # USD per token; None for a model with no known price
    output_price: float | None
    reasons: bool


class Tool(NamedTuple):
    name: str
    median_ms: float
    sigma: float  # the spread of the log-normal duration
    error_rate: float
    timeout_ms: float | None = None  # when set, the tool's errors are timeouts of this long


MODELS = (
    Model("large-1", 3e-6, 15e-6, reasons=True),
    Model("small-1", 0.25e-6, 1.25e-6, reasons=False),
    Model("local-8b", None, None, reasons=False),
)
TOOLS = (
    Tool("search", 350, 0.6, 0.02),
    Tool("read_file", 4, 0.8, 0.01),
    Tool("write_file", 9, 0.5, 0.005),
    Tool("run_python", 1500, 1.0, 0.08),
    Tool("http_get", 400, 1.2, 0.04, timeout_ms=30_000),
)
COLUMNS = {
    "conversations": "id kind title parent_run_id version lease_holder lease_run_id "
    "lease_expires_at created_at updated_at metadata",
    "agent_runs": "id conversation_id parent_run_id root_run_id depth agent_name model status "
    "stop_reason error started_at finished_at heartbeat_at step_count input_tokens output_tokens "
    "cache_read_tokens cache_write_tokens reasoning_tokens cost_usd fully_priced budget metadata",
    "step_executions": "id run_id step_index step_type model finish_reason started_at "
    "finished_at duration_ms input_tokens output_tokens cache_read_tokens cache_write_tokens "
    "reasoning_tokens cost_usd should_continue stop_reason decided_by outcome_detail "
    "final_response_required error message_id content reasoning metadata tool_call_count",
    "tool_executions": "id run_id step_id step_index position tool_call_id tool_name arguments "
    "validated_arguments result is_error error started_at finished_at duration_ms child_run_id "
    "metadata",
}
TABLES = tuple(COLUMNS)
INSERTS = {
    table: f"INSERT INTO {table} ({', '.join(names.split())}) "
    f"VALUES ({', '.join('?' * len(names.split()))})"
    for table, names in COLUMNS.items()
}
FLUSH_ROWS = 50_000
STEPS = {  # a step's kind: finish_reason, stop_reason, decided_by, outcome_detail, content
    "tool_use": ("tool_calls", None, "tool_calls", "{} tool call(s)", ""),
    "response": ("stop", "completed", "tool_calls", "the model answered", TEXT[:120]),
    "error": (None, "error", "error", "the model call failed", None),
}
Rows = dict[str, list[tuple[Any, ...]]]
Tree = list["Tree"]
"""A run tree's shape: a run is the list of the runs it started."""


def _stamp(us: int | None) -> str | None:
    """A time on the synthetic clock, as the ledger stores it on SQLite."""
    return (
        None if us is None else (START + timedelta(microseconds=us)).isoformat(" ", "microseconds")
    )


class _Ids:
    """Deterministic ids in the ledger's format: UUIDv7 text from the row's time and a counter,
    so that they sort by time as the ledger's do."""

    def __init__(self, counter: int = 0) -> None:
        self.counter = counter

    def __call__(self, us: int) -> str:
        self.counter += 1
        value = ((EPOCH_MS + us // 1000) << 80) | (0x7 << 76) | (0b10 << 62) | self.counter
        h = f"{value:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def tree_shape(rng: random.Random, limit: int, *, deep: bool = False) -> Tree:
    """A random tree of at most ``limit`` runs, made breadth first; with ``deep``, the first
    run of every level starts one run at least, so the tree reaches ``MAX_DEPTH`` when
    ``limit`` allows."""
    root: Tree = []
    queue, size, levels = [(root, 0)], 1, set()
    for children, depth in queue:
        if depth == MAX_DEPTH:
            break
        fan_out = rng.choice(FAN_OUT)
        if deep and depth not in levels:
            levels.add(depth)
            fan_out = max(fan_out, 1)
        for _ in range(min(fan_out, limit - size)):
            child: list[Any] = []
            children.append(child)
            queue.append((child, depth + 1))
            size += 1
    return root


def tree_size(tree: Tree) -> int:
    return 1 + sum(map(tree_size, tree))


def step_counts(rng: random.Random, runs: int, steps: int) -> list[int]:
    """``runs`` step counts of at least 2 (a run that starts subagents needs a tool-calling
    step and an answer) that add up to exactly ``steps``."""
    mean = steps // runs
    if mean < 2:
        raise ValueError(f"{steps} steps in {runs} runs: give each run 2 steps at least")
    low, high = 2, max(2 * mean - 2, 3)
    counts = [rng.randint(low, high) for _ in range(runs)]
    missing = steps - sum(counts)
    while missing:
        i = rng.randrange(runs)
        if missing > 0 and counts[i] < high:
            counts[i], missing = counts[i] + 1, missing - 1
        elif missing < 0 and counts[i] > low:
            counts[i], missing = counts[i] - 1, missing + 1
    return counts


@dataclass
class _Run:
    """A run being made: its identity and the sums of its own steps, as its row stores them."""

    id: str
    root_id: str
    depth: int
    model: Model
    steps: int = 0
    usage: list[int] = field(default_factory=lambda: [0] * 5)
    cost: float | None = None
    unpriced: bool = False


class _Synthesizer:
    """Makes the rows of whole conversations, each run tree depth first, so that a
    ``spawn_subagent`` call lasts as long as the subagent run it started."""

    def __init__(self, rng: random.Random, counts: Iterator[int], ids: _Ids) -> None:
        self.rng, self.counts, self.ids, self.runs = rng, counts, ids, 0
        self.rows: Rows = {table: [] for table in TABLES}

    def take(self) -> Rows:
        """The rows made since the last call."""
        rows, self.rows = self.rows, {table: [] for table in TABLES}
        return rows

    def conversation(self, trees: list[Tree], start_us: int) -> int:
        """A main conversation of one turn per tree; when its last turn ended."""
        conversation_id, at = self.ids(start_us), start_us
        for tree in trees:
            _, at = self.run(tree, conversation_id, at, None)
            at += self.rng.randint(5_000_000, 120_000_000)  # the user reads and answers
        self._conversation(conversation_id, "main", None, start_us, at, runs=len(trees))
        return at

    def run(
        self, tree: Tree, conversation_id: str, start_us: int, parent: _Run | None
    ) -> tuple[str, int]:
        """One run and its subtree; the run's id and when it last did something."""
        rng, run_id = self.rng, self.ids(start_us)
        self.runs += 1
        model = rng.choice(MODELS[:2] if parent is None else MODELS)
        root, depth = (run_id, 0) if parent is None else (parent.root_id, parent.depth + 1)
        run, fate = _Run(run_id, root, depth, model), rng.random()
        status = "failed" if fate < FAILED else "running" if fate < FAILED + RUNNING else ""
        steps = next(self.counts)
        tool_steps = steps if status == "running" else steps - 1
        spawns: list[list[Tree]] = [[] for _ in range(steps)]
        for i, child in enumerate(tree):
            spawns[i % tool_steps].append(child)
        at = start_us + rng.randint(2_000, 20_000)
        for index in range(steps):
            kind = "response" if status != "failed" else "error"
            kind = "tool_use" if index < tool_steps else kind
            at = self._step(run, index, kind, spawns[index], at) + rng.randint(200, 3_000)
        agent = ROOT_AGENT if parent is None else rng.choice(SUBAGENTS)
        stop, error = {"": ("completed", None), "failed": ("error", "the model call failed")}.get(
            status, (None, None)
        )
        self.rows["agent_runs"].append(
            (
                *(run.id, conversation_id, None if parent is None else parent.id, run.root_id),
                *(run.depth, agent, model.name, status or "completed", stop, error),
                *(_stamp(start_us), _stamp(None if status == "running" else at), _stamp(at)),
                *(run.steps, *run.usage, run.cost, not run.unpriced, BUDGET, None),
            )
        )
        return run_id, at

    def _step(self, run: _Run, index: int, kind: str, children: list[Tree], start_us: int) -> int:
        """One step, its tool calls and the subagent runs they start; when it finished."""
        rng, step_id = self.rng, self.ids(start_us)
        at = start_us + int(rng.lognormvariate(math.log(900_000), 0.5))  # the inference
        tools: list[Tool | None] = []
        if kind == "tool_use":
            tools += [rng.choice(TOOLS) for _ in range(rng.choice(CALLS))]
        tools += [None] * len(children)  # None: a spawn_subagent call
        rows, spawned = [], iter(children)
        for position, tool in enumerate(tools):
            call_id = f"call_{index}_{position}_{self.ids.counter:x}"
            task, child, error = f"task {index}.{position}", None, None
            if tool is None:
                child, ends = self._subagent(run, next(spawned), at)
            else:
                duration = rng.lognormvariate(math.log(tool.median_ms * 1000), tool.sigma)
                ends = at + max(1, int(duration))
                if rng.random() < tool.error_rate:
                    error = f"{tool.name} failed: error {rng.randint(1, 99)}"
                    if tool.timeout_ms is not None:
                        ends, error = at + int(tool.timeout_ms * 1000), f"{tool.name} timed out"
            result = error or TEXT[: rng.randint(32, len(TEXT))]
            arguments = f'{{"task": "{task}"}}'  # as json.dumps writes it, faster
            name = SPAWN if tool is None else tool.name
            rows.append(
                (
                    *(self.ids(at), run.id, step_id, index, position, call_id, name),
                    *(arguments, arguments, result, error is not None, error),
                    *(_stamp(at), _stamp(ends), (ends - at) / 1000, child, None),
                )
            )
            at = ends
        self._step_row(run, step_id, index, kind, len(tools), start_us, at)
        self.rows["tool_executions"] += rows
        return at

    def _subagent(self, parent: _Run, tree: Tree, called_us: int) -> tuple[str, int]:
        """A subagent run in its own conversation; its id, and when the call returned."""
        conversation_id = self.ids(called_us)
        start = called_us + self.rng.randint(1_000, 10_000)
        run_id, end = self.run(tree, conversation_id, start, parent)
        self._conversation(conversation_id, "subagent", parent.id, start, end, runs=1)
        return run_id, end + self.rng.randint(1_000, 10_000)

    def _usage(self, run: _Run, index: int) -> tuple[tuple[int, ...], float | None]:
        """A model call's tokens (the prompt grows with the run) and its cost, if known."""
        rng, model = self.rng, run.model
        prompt = 1_200 + 700 * index + rng.randint(0, 500)
        output = rng.randint(20, 700)
        cached = prompt * rng.randint(50, 90) // 100 if index else 0
        written = rng.randint(0, 700) if index == 0 else 0
        reasoning = rng.randint(0, output // 2) if model.reasons else 0
        priced = model.input_price is not None and model.output_price is not None
        cost = None
        if priced and rng.random() >= UNPRICED_STEPS:
            cost = prompt * model.input_price + output * model.output_price  # type: ignore[operator]
        return (prompt, output, cached, written, reasoning), cost

    def _step_row(
        self, run: _Run, step_id: str, index: int, kind: str, calls: int, start: int, end: int
    ) -> None:
        usage: tuple[int, ...]
        if kind == "error":  # the model call failed: no message, no usage
            usage, cost, message_id = (0,) * 5, None, None
        else:
            (usage, cost), message_id = self._usage(run, index), self.ids(end)
        run.steps += 1
        run.usage = [a + b for a, b in zip(run.usage, usage, strict=True)]
        run.cost = run.cost if cost is None else cost + (run.cost or 0.0)
        run.unpriced = run.unpriced or (message_id is not None and cost is None)
        finish, stop, decided, detail, content = STEPS[kind]
        self.rows["step_executions"].append(
            (
                *(step_id, run.id, index, kind, run.model.name, finish, _stamp(start)),
                *(_stamp(end), (end - start) / 1000, *usage, cost, kind == "tool_use"),
                *(stop, decided, detail.format(calls), False),
                *("the provider answered 500" if kind == "error" else None, message_id, content),
                *(None, None, calls),
            )
        )

    def _conversation(self, id: str, kind: str, parent: str | None, *times: int, runs: int) -> None:
        start, end = map(_stamp, times)
        row = (id, kind, None, parent, runs, None, None, None, start, end, None)
        self.rows["conversations"].append(row)


def synthesize(*, runs: int, steps: int, seed: int = SEED, first_id: int = 0) -> Iterator[Rows]:
    """The synthetic ledger's rows, in batches of about ``FLUSH_ROWS`` steps: conversations of
    one to four turns, each turn a run tree; the ids' counters start after ``first_id``."""
    rng = random.Random(seed)
    maker = _Synthesizer(rng, iter(step_counts(rng, runs, steps)), _Ids(first_id))
    at = 0
    while maker.runs < runs:
        trees: list[Tree] = []
        for _ in range(rng.randint(1, 4)):
            if left := runs - maker.runs - sum(map(tree_size, trees)):
                trees.append(tree_shape(rng, left, deep=maker.runs == 0 and not trees))
        at = maker.conversation(trees, at) + rng.randint(0, 60_000_000)
        if len(maker.rows["step_executions"]) >= FLUSH_ROWS:
            yield maker.take()
    yield maker.take()


def _insert(conn: sqlite3.Connection, **synthesized: Any) -> int:
    """The rows of :func:`synthesize` inserted in one transaction; the steps added."""
    conn.execute("BEGIN")
    added = 0
    for batch in synthesize(**synthesized):
        added += len(batch["step_executions"])
        for table in TABLES:
            conn.executemany(INSERTS[table], batch[table])
    conn.execute("COMMIT")
    return added


@dataclass(frozen=True)
class Built:
    """A synthetic ledger on disk."""

    path: Path
    rows: dict[str, int]
    seconds: float
    trees: int
    max_depth: int


def build(path: Path, *, runs: int, steps: int, seed: int = SEED) -> Built:
    """A new ledger at ``path``, migrated by the ledger itself, then filled with ``steps``
    steps in ``runs`` runs by bulk inserts in one transaction."""
    started = time.perf_counter()
    Ledger.open(path).close()
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=OFF")  # for the build only: it is a fixture
        conn.execute("PRAGMA synchronous=OFF")
        _insert(conn, runs=runs, steps=steps, seed=seed)
        conn.execute("PRAGMA journal_mode=WAL")  # as the ledger keeps its files
        seconds = time.perf_counter() - started
        rows = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
        trees, depth = conn.execute(
            "SELECT count(*) FILTER (WHERE parent_run_id IS NULL), max(depth) FROM agent_runs"
        ).fetchone()
    return Built(path, rows, seconds, trees, depth)


def append(path: Path, *, runs: int, steps: int, seed: int, first_id: int) -> int:
    """``steps`` more steps in ``runs`` more runs (another ``seed``: other ids), written to the
    ledger at ``path`` in one ordinary transaction, the change triggers firing as for any
    writer; the steps added."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        return _insert(conn, runs=runs, steps=steps, seed=seed, first_id=first_id)
