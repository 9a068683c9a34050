"""What lets many writer processes of one SQLite ledger take turns at its write lock quickly.

SQLite lets one transaction write at a time. A writer that finds the lock taken waits in SQLite's
busy handler, which sleeps 1, 2, 5, 10, 15, 20, 25 ms and on between tries: behind writers whose
transactions hold the lock for a fraction of a millisecond, it wakes long after the lock was
freed, and the writers of one file take turns far below the rate the lock allows. So each
ledger writer first takes the file's *write gate*, an advisory ``flock`` on a file beside the
ledger (``<ledger>-lock``, empty): the kernel queues the waiters and wakes one the moment the
gate is let go, and the writer then finds SQLite's lock free. The gate only orders writers:
SQLite's lock still guards the file, so a writer that does not take the gate (another program,
a platform without ``flock``) is as safe as before, and a writer that waited
``busy_timeout`` for the gate goes on to SQLite's own wait and errors.

While writers wait for one another (this handle found the gate held in the last second), the
gate is let go at the commit, before the commit is synced to disk: :class:`WalSync` makes the
write-ahead log durable afterwards, outside the lock (the connection commits with
``synchronous=NORMAL``, which syncs the log at checkpoints only), so that one writer's sync does
not hold up the next writer's statements, and one sync covers the commits of every writer
before it. A transaction is reported committed only once its sync returned: what
``synchronous=FULL`` promises. A writer alone lets SQLite sync in the commit, one call fewer.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock, SQLite's own wait alone
    fcntl = None  # type: ignore[assignment]

CONTENDED_FOR = 1.0
"""Seconds after a writer last found the gate held during which its commits are synced outside
the lock (while no writer waits, SQLite syncs them in the commit: one call fewer)."""

TRY_FOR = 0.002
"""Seconds a writer that finds the gate held tries it again (after sleeps from
:data:`FIRST_PAUSE` doubling to :data:`LAST_PAUSE` seconds) before it waits in ``flock``."""
FIRST_PAUSE, LAST_PAUSE = 0.00002, 0.0002

SUFFIX = "-lock"
"""The name of the gate's file: the ledger's, with this after it."""


def gate_path(database: Path) -> Path:
    """The gate's file of the SQLite ledger at ``database``."""
    return database.with_name(database.name + SUFFIX)


class WriteGate:
    """The write gate of one SQLite ledger file, for the threads of one ledger handle (see the
    module). :meth:`enter` waits for it (``True``) or gives up after ``timeout`` seconds
    (``False``); :meth:`leave` lets it go; :meth:`close` removes its file when no writer holds
    it (as SQLite removes its ``-wal`` and ``-shm`` files), so that a ledger at rest is one
    file. A writer that finds it held on a file no longer at its path (removed so, or by
    hand) takes it again on the file there."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._threads = threading.Lock()
        """Held by the thread that holds the gate: the threads of one process share the
        file's descriptor, and ``flock`` tells no thread from another."""
        self._fd: int | None = None
        self._pid = os.getpid()
        self._waiter: _Waiter | None = None
        self._waited_at = -CONTENDED_FOR
        """When this handle last found the gate held (``time.monotonic()``)."""

    @staticmethod
    def available() -> bool:
        return fcntl is not None

    def contended(self) -> bool:
        """Whether this handle found the gate held in the last :data:`CONTENDED_FOR` seconds:
        other writers are at work, and a commit's sync is better made outside the lock."""
        return time.monotonic() - self._waited_at < CONTENDED_FOR

    def enter(self, timeout: float) -> bool:
        if self._pid != os.getpid():  # forked: a thread of the parent's may have held it
            self._threads = threading.Lock()
        if not self._threads.acquire(timeout=timeout):
            return False
        deadline = time.monotonic() + timeout
        try:
            while self._take(deadline - time.monotonic()):
                if self._still_there():
                    return True
                self._drop()  # held on a file removed meanwhile: take the one there now
        except OSError:
            self._drop()  # no gate (a file it may not create): SQLite's own wait alone
        self._threads.release()
        return False

    def leave(self) -> None:
        try:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def close(self) -> None:
        """Let go of the gate's file, removing it when no writer holds the gate."""
        with self._threads:
            if self._pid != os.getpid():
                return  # the parent's, which closes it
            fd = self._fd
            if fd is not None:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    if self._still_there():
                        os.unlink(self.path)
            self._drop()

    def _take(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the gate's file lock (``False``: not had): tried
        again after short sleeps for :data:`TRY_FOR` seconds (a transaction holds it for a
        fraction of a millisecond), then waited for in ``flock`` by the waiter thread (which
        costs two threads' wake-ups a wait)."""
        fd = self._descriptor()
        started = time.monotonic()
        pause, trying_until = FIRST_PAUSE, started + min(TRY_FOR, max(timeout, 0.0))
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                self._waited_at = now = time.monotonic()
            if now >= trying_until:
                break
            time.sleep(pause)
            pause = min(pause * 2, LAST_PAUSE)
        left = timeout - (now - started)
        if left <= 0:
            return False
        if self._waiter is None:
            self._waiter = _Waiter(fd)
        return self._waiter.wait(left)

    def _still_there(self) -> bool:
        """Whether the file the gate is held on is still the one at its path."""
        assert self._fd is not None
        held, there = os.fstat(self._fd), _stat(self.path)
        return there is not None and (held.st_dev, held.st_ino) == there

    def _descriptor(self) -> int:
        if self._pid != os.getpid():
            # Forked: the parent's descriptor is the parent's gate (unlocking it would let
            # the parent's go); this process opens one of its own, and has no waiter yet.
            self._fd, self._waiter, self._pid = None, None, os.getpid()
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0))
        return self._fd

    def _drop(self) -> None:
        """Close the descriptor (letting go of the gate if held) and stop the waiter."""
        fd, self._fd = self._fd, None
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.stop()
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


class _Waiter:
    """A thread that waits in ``flock`` for the gate on behalf of the thread holding
    :attr:`WriteGate._threads`, which waits for it with a timeout (``flock`` has none). A wait
    given up is let go as soon as the gate is had. It waits on a duplicate of the gate's
    descriptor (the same lock), closed when it ends."""

    def __init__(self, fd: int) -> None:
        self._fd = os.dup(fd)
        self._state = threading.Condition()
        self._asked = False
        self._had = False
        self._stopped = False
        threading.Thread(target=self._run, name="agentledger-write-gate", daemon=True).start()

    def wait(self, timeout: float) -> bool:
        with self._state:
            self._asked, self._had = True, False
            self._state.notify_all()
            had = self._state.wait_for(lambda: self._had, timeout)
            self._asked = False
            if had:
                self._had = False
            return had

    def stop(self) -> None:
        with self._state:
            self._stopped = True
            self._state.notify_all()

    def _run(self) -> None:
        try:
            while self._serve():
                pass
        finally:
            with contextlib.suppress(OSError):
                os.close(self._fd)

    def _serve(self) -> bool:
        """Wait for a request, then for the gate: whether to go on."""
        with self._state:
            self._state.wait_for(lambda: self._asked or self._stopped)
            if self._stopped:
                return False
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except OSError:
            return False
        with self._state:
            if self._asked and not self._stopped:
                self._had, self._asked = True, False
                self._state.notify_all()
                return True
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_UN)  # given up meanwhile: let it go at once
        return not self._stopped


class WalSync:
    """Makes a SQLite ledger's write-ahead log durable after a commit (see the module)."""

    def __init__(self, database: Path) -> None:
        self.wal = database.with_name(database.name + "-wal")
        self._synced_directory_of: int | None = None

    def __call__(self) -> None:
        fd = os.open(self.wal, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            _sync(fd)
            inode = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        if inode != self._synced_directory_of:
            # A log file new to this process: its name in the directory is made durable too,
            # as SQLite does the first time it syncs a file it created.
            sync_directory(self.wal.parent)
            self._synced_directory_of = inode


def _sync(fd: int) -> None:
    """Make the file's data durable: ``fdatasync`` where there is one (what SQLite calls on
    the log: the file's times need not be), else ``fsync``."""
    getattr(os, "fdatasync", os.fsync)(fd)


def sync_directory(directory: Path) -> None:
    """``fsync`` ``directory`` (where the platform can: not on Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
