"""The write gate of a SQLite ledger and the sync outside its lock (docs/guarantees.md, "Many
writers"): writers queue at an advisory ``flock`` on ``<ledger>-lock``, a file that goes away with
the last writer; the gate only orders them (SQLite's lock still guards the file); while writers
wait for one another, a commit is synced to disk after the lock is let go and before the write
returns (else SQLite syncs it in the commit)."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentledger.ledger import Ledger


@contextmanager
def gate_held(path: Path) -> Iterator[None]:
    """The ledger's write gate held by someone else (another program's descriptor)."""
    fd = os.open(f"{path}-lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def gate_free(path: Path) -> bool:
    fd = os.open(f"{path}-lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_writer_makes_the_gate_beside_the_ledger_and_takes_it_away_when_it_closes(
    tmp_path: Path,
):
    path = tmp_path / "ledger.db"
    with Ledger.open(path) as ledger:
        ledger.create_conversation(title="one")
        assert "ledger.db-lock" in files(tmp_path)
        with Ledger.open(path, read_only=True) as reader:  # a reader neither takes nor removes it
            assert [c.title for c in reader.conversations()] == ["one"]
        assert "ledger.db-lock" in files(tmp_path)
    assert files(tmp_path) == ["ledger.db"]


def test_the_gate_only_orders_writers_a_write_goes_on_when_another_holds_it_too_long(
    tmp_path: Path,
):
    path = tmp_path / "ledger.db"
    with Ledger.open(path, busy_timeout=0.2) as ledger, gate_held(path):
        made = ledger.create_conversation(title="past a stuck gate")
        assert ledger.conversation(made.id).title == "past a stuck gate"
        assert ledger.lock_retries == 0  # SQLite's own lock was free all along


def test_a_write_waiting_at_the_gate_goes_in_when_it_is_let_go(tmp_path: Path):
    path = tmp_path / "ledger.db"
    events: list[str] = []
    with Ledger.open(path, busy_timeout=30) as ledger:
        ledger.create_conversation()
        held, let_go = threading.Event(), threading.Event()

        def holder() -> None:
            with gate_held(path):
                held.set()
                let_go.wait(30)
                events.append("let go")

        thread = threading.Thread(target=holder)
        thread.start()
        held.wait(30)
        writer = threading.Thread(
            target=lambda: events.append(f"wrote {ledger.create_conversation().id}")
        )
        writer.start()
        writer.join(0.3)
        assert writer.is_alive() and events == []  # waiting at the gate
        let_go.set()
        writer.join(30)
        thread.join(30)
    assert events[0] == "let go" and events[1].startswith("wrote ")


def test_a_gate_removed_by_hand_is_made_again_and_writes_go_on(tmp_path: Path):
    path = tmp_path / "ledger.db"
    with Ledger.open(path) as ledger, Ledger.open(path) as other:
        ledger.create_conversation()
        other.create_conversation()
        os.unlink(f"{path}-lock")
        ledger.create_conversation()
        other.create_conversation()
        assert (tmp_path / "ledger.db-lock").exists()
        assert len(ledger.conversations()) == 4


def test_each_commit_is_synced_after_the_lock_is_let_go_and_before_the_write_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    path = tmp_path / "ledger.db"
    synced: list[tuple[bool, bool, int]] = []
    real_sync = os.fdatasync

    def fdatasync(fd: int) -> None:
        real_sync(fd)
        if Path(os.readlink(f"/proc/self/fd/{fd}")) == Path(f"{path}-wal"):
            with sqlite3.connect(path, timeout=0) as other:  # SQLite's lock: free
                free = other.execute("BEGIN IMMEDIATE") is not None
                other.rollback()
            synced.append((free, gate_free(path), len(rows())))

    def rows() -> list[tuple[str]]:
        with sqlite3.connect(path) as reader:
            return reader.execute("SELECT title FROM conversations").fetchall()

    with Ledger.open(path) as ledger:
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        ledger.create_conversation(title="c0")
        assert synced == []  # no writer waited: SQLite synced it in the commit (FULL)
        wait_at_the_gate(path, ledger)  # another writer held the gate: c1
        for n in range(2, 5):
            ledger.create_conversation(title=f"c{n}")
            assert synced[-1] == (True, True, n + 1)  # synced, free, the row committed
        assert len(synced) == 4
        assert len(ledger.write_lock_times) >= 5 and min(ledger.write_lock_times) > 0


def wait_at_the_gate(path: Path, ledger: Ledger) -> None:
    """A write of ``ledger``'s that finds the gate held by another writer, and waits."""
    held, let_go = threading.Event(), threading.Event()

    def holder() -> None:
        with gate_held(path):
            held.set()
            let_go.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(30)
    writer = threading.Thread(target=lambda: ledger.create_conversation(title="c1"))
    writer.start()
    writer.join(0.1)
    let_go.set()
    writer.join(30)
    thread.join(30)


def test_with_synchronous_normal_the_ledger_syncs_nothing_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    path = tmp_path / "ledger.db"
    synced: list[int] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda fd, real=real: synced.append(fd) or real(fd))
    with Ledger.open(path, synchronous="NORMAL") as ledger:
        ledger.create_conversation()
        assert synced == []
