"""Section 15's third ceiling: SQLite itself doing the ledger's writes on one file.

Before each round a writer records its own turns, untimed: the same agents run on a scratch
ledger file of its own, and each transaction is kept as data (whether it writes, the
statements it sent with their parameters, and the time since the transaction before it, which
is the ledger's Python between transactions: the loop, the model's script, the rows built).
Its round then replays them on the shared file with the ``sqlite3`` module alone: that time
spent in a busy loop, each write transaction behind the ledger's write gate with its statements
as recorded, and its commit synced as the ledger syncs one (after the gate is let go while
writers contend, by SQLite in the commit otherwise). What the replay reaches is what SQLite, the
disk and the processors allow the ledger's own transactions on this machine, with none of the
ledger's Python in the lock or between.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import event

from agentledger.ledger import Ledger

from ._common import question, turn_agent

if TYPE_CHECKING:
    from agentledger.ledger._write_gate import WalSync, WriteGate

GATE_TIMEOUT = 30.0
"""Seconds a replayed write waits for the gate (the ledger's ``busy_timeout`` is 5: the replay
reports a wait that long rather than going on to SQLite's)."""
_OWN_BEGINS = frozenset({"BEGIN", "BEGIN IMMEDIATE"})
"""The statements that begin the ledger's transactions, which the replay sends itself."""
STEP_INSERT = "INSERT INTO step_executions"
"""How a step's transaction is told: the one that inserts the step."""


@dataclass(frozen=True)
class Transaction:
    """One of the ledger's transactions as data."""

    writes: bool
    after: float
    """Seconds between the end of the transaction before it and its start."""
    statements: tuple[tuple[str, Any, bool], ...]
    """Each statement's SQL, parameters, and whether it was sent with ``executemany``."""
    records_a_step: bool
    """Whether it inserts a step: its write is timed as a step's commit."""


def record(path: Path, conversations: int, turns: int) -> dict[tuple[int, int], list[Transaction]]:
    """The transactions of ``turns`` rounds of ``conversations`` turns through the ledger at
    ``path`` (made, then removed), by conversation and turn."""
    ledger = Ledger.open(str(path))
    sent: list[tuple[str, Any, bool]] = []
    recorded: list[Transaction] = []
    ended = [time.perf_counter()]

    def note(_conn: Any, _cursor: Any, sql: str, params: Any, _context: Any, many: bool) -> None:
        if sql not in _OWN_BEGINS:
            sent.append((sql, params, many))

    connections = ledger._database.connections  # the bench may look inside
    original = connections.transaction

    @contextlib.contextmanager
    def transaction(*, write: bool) -> Iterator[Any]:
        started = time.perf_counter()
        sent.clear()
        with original(write=write) as conn:
            yield conn
        steps = any(sql.startswith(STEP_INSERT) for sql, _, _ in sent)
        recorded.append(Transaction(write, started - ended[0], tuple(sent), steps))
        ended[0] = time.perf_counter()

    # A listener of the statements makes the ledger send each through SQLAlchemy, seen here.
    event.listen(ledger.engine, "before_cursor_execute", note)
    connections.transaction = transaction  # type: ignore[method-assign]
    plans: dict[tuple[int, int], list[Transaction]] = {}
    ids: list[str | None] = [None] * conversations
    # Built before, as the ledger's writers build theirs before the clock starts.
    agents = [[turn_agent(ledger.recorder) for _ in range(conversations)] for _ in range(turns)]
    try:
        ended[0] = time.perf_counter()
        for turn in range(turns):
            for conversation in range(conversations):
                first = len(recorded)
                result = agents[turn][conversation].run(question(turn), ids[conversation])
                if result.status != "completed":
                    raise RuntimeError(f"a recorded turn ended {result.status}: {result.error}")
                ids[conversation] = result.conversation_id
                plans[conversation, turn] = recorded[first:]
    finally:
        ledger.close()
        for suffix in ("", "-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
    return plans


class ReplayWriter:
    """A writer of :data:`bench.writers.REPLAYED`: its turns recorded before each round
    (:meth:`prepare`), replayed on the shared file by :meth:`turn` (see the module)."""

    def __init__(self, url: str, writer: int) -> None:
        self.path, self.writer = Path(url), writer
        self.commits: list[float] = []
        """Each step's write, from the gate's wait to its sync's end."""
        self.lock_times: list[float] = []
        """Each write transaction's hold of the lock, ``BEGIN IMMEDIATE`` to ``COMMIT``."""
        self.plans: dict[tuple[int, int], list[Transaction]] = {}
        # Imported here: the previous version's workers import this module too, and a version
        # from before the write gate has none.
        from agentledger.ledger._write_gate import WalSync, WriteGate, gate_path

        self.writes = self._connected()
        self.reads = self._connected()
        self.gate: WriteGate = WriteGate(gate_path(self.path))
        self.sync: WalSync = WalSync(self.path)
        self.synced_by_us = False

    def _connected(self) -> sqlite3.Connection:
        """A connection set as the ledger sets its own (WAL, foreign keys, secure delete)."""
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=GATE_TIMEOUT)
        for pragma in ("foreign_keys=ON", "secure_delete=ON", "synchronous=FULL"):
            conn.execute(f"PRAGMA {pragma}")
        return conn

    def setup(self) -> None:
        """Nothing: the parent migrated the database."""

    def prepare(self, round: int, conversations: int, turns: int) -> None:
        scratch = self.path.with_name(f"{self.path.stem}-recording{self.writer}.db")
        self.plans = record(scratch, conversations, turns)

    def turn(self, conversation: int, turn: int) -> None:
        for transaction in self.plans[conversation, turn]:
            until = time.perf_counter() + transaction.after
            while time.perf_counter() < until:  # the ledger's Python, as long as it took
                pass
            if transaction.writes:
                self._write(transaction)
            else:
                self.reads.execute("BEGIN")
                self._send(self.reads, transaction)
                self.reads.execute("ROLLBACK")

    def _write(self, transaction: Transaction) -> None:
        started = time.perf_counter()
        if not self.gate.enter(GATE_TIMEOUT):
            raise RuntimeError(f"the write gate was held for {GATE_TIMEOUT:.0f} s")
        try:
            ours = self.gate.contended()
            if ours != self.synced_by_us:  # as the ledger does: outside the lock while contended
                self.writes.execute(f"PRAGMA synchronous={'NORMAL' if ours else 'FULL'}")
                self.synced_by_us = ours
            self.writes.execute("BEGIN IMMEDIATE")
            begun = time.perf_counter()
            try:
                self._send(self.writes, transaction)
            except BaseException:
                self.writes.execute("ROLLBACK")
                raise
            self.writes.execute("COMMIT")
            self.lock_times.append(time.perf_counter() - begun)
        finally:
            self.gate.leave()
        if ours:
            self.sync()
        if transaction.records_a_step:
            self.commits.append(time.perf_counter() - started)

    @staticmethod
    def _send(conn: sqlite3.Connection, transaction: Transaction) -> None:
        cursor = conn.cursor()
        for sql, params, many in transaction.statements:
            if many:
                cursor.executemany(sql, params)
            else:
                cursor.execute(sql, params).fetchall()

    def close(self) -> None:
        self.writes.close()
        self.reads.close()
        self.gate.close()
