"""Read-only ledgers: when a handle may only read, why, and how SQLite reads a file without
writing it or leaving files beside it.

A handle is read-only when it was opened with ``read_only=True`` (``--read-only``), or by
itself when this user may not write a SQLite ledger's file or its directory (SQLite keeps a
WAL database's ``-wal`` and ``-shm`` files in that directory). Its writes are refused before
anything is touched, with :class:`LedgerReadOnlyError` saying why and what to do.

SQLite's own read-only mode (``mode=ro``) still wants a WAL database's ``-shm`` file: it
creates one (and a ``-wal``) where the directory allows it and leaves them behind, owned by
the reader, and it cannot open the database at all where the directory does not. So a
read-only connection uses ``mode=ro`` only when both files already exist (a writer is at work,
or left them: the committed transactions in the ``-wal`` file are read through them), and
otherwise opens the file as ``immutable``: with no ``-wal`` file, the database file holds
every committed transaction. Each read-only transaction opens its own connection, so a writer
that starts meanwhile is seen through its ``-wal`` and ``-shm`` files from the next
transaction on.

Another program's reader (DuckDB's SQLite scanner, which takes no URI) is given
:func:`file_to_read`: the ledger itself, with the files its reader made removed after, or a
snapshot in the temporary directory where this user may not write the ledger.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LedgerOpenError, LedgerReadOnlyError

_COPY_REMEDY = (
    "To write to it, run as a user who may write the file and its directory, or copy it (with "
    "its -wal and -shm files, if any) to a place you may write and open the copy."
)


@dataclass(frozen=True)
class ReadOnly:
    """Why a ledger handle may only read, and what to do to write."""

    reason: str
    remedy: str

    def refusal(self, what: str, where: str) -> LedgerReadOnlyError:
        """The error for the write ``what`` (the ledger at ``where``): nothing was written."""
        return LedgerReadOnlyError(
            f"{what}: the ledger {where} is read-only here: {self.reason}. Nothing was "
            f"written. {self.remedy}"
        )

    def cannot_create(self, path: Path) -> LedgerReadOnlyError:
        """The error for a ledger that does not exist yet: creating it would write."""
        return LedgerReadOnlyError(
            f"no ledger at {path}, and a read-only handle creates none (it is read-only: "
            f"{self.reason}). Give the path of an existing ledger, or create it where it may "
            "be written (`agentledger db upgrade`, or Ledger.open without read_only)."
        )


ASKED = ReadOnly(
    "it was opened with read_only=True (--read-only on the command line)",
    "Open it without read_only=True (on the command line, without --read-only) to write to it.",
)


def read_only_access(path: Path | None, *, asked: bool) -> ReadOnly | None:
    """Why a handle on a ledger may only read, or ``None`` when it may write: ``asked``
    (``read_only=True``), or a SQLite database at ``path`` (``None`` for a server) whose file
    or directory this user may not write."""
    if asked:
        return ASKED
    reason = None if path is None else read_only_reason(path)
    return None if reason is None else ReadOnly(reason, _COPY_REMEDY)


def read_only_reason(path: Path) -> str | None:
    """Why this user may not write the SQLite database at ``path`` (``None`` when it may)."""
    if path.exists() and not os.access(path, os.W_OK):
        return f"this user may not write {path}"
    if path.parent.is_dir() and not os.access(path.parent, os.W_OK):
        return (
            f"this user may not write its directory {path.parent}, where SQLite keeps the "
            "database's -wal and -shm files"
        )
    return None


def read_only_uri(path: Path) -> str:
    """The URI of a connection that reads the SQLite database at ``path`` without writing it
    or creating a file beside it (see the module)."""
    location = path.absolute().as_uri()  # percent-encoded: a name may hold '#', '%' or '?'.
    wal, shm = wal_files(path)
    if wal.exists() and shm.exists():
        return f"{location}?mode=ro"
    if wal.exists() and wal.stat().st_size > 0:
        raise LedgerOpenError(
            f"cannot read the ledger at {path} without writing: its {wal.name} file may hold "
            f"committed transactions, and reading them needs a {shm.name} file, which a "
            "read-only open does not create. Open the ledger once where it may be written "
            "(any agentledger command folds the -wal file into the database), or copy the "
            "database with its -wal file to a place you may write and read the copy."
        )
    return f"{location}?mode=ro&immutable=1"


def check_sqlite_path(path: Path) -> None:
    """Refuse, before SQLite opens it, a path that cannot be a SQLite ledger: a directory, a
    file in a directory that does not exist, a file that is not a SQLite database."""
    if path.is_dir():
        raise LedgerOpenError(f"{path} is a directory; give the path of a database file")
    if not path.parent.exists():
        raise LedgerOpenError(f"the directory {path.parent} does not exist; create it first")
    if path.exists() and path.stat().st_size >= 16:
        with path.open("rb") as handle:
            header = handle.read(16)
        if header != b"SQLite format 3\x00":
            raise LedgerOpenError(
                f"{path} is not a SQLite database (its header is {header[:16]!r}); "
                "give the path of an agentledger database or of a file that does not exist yet"
            )


PROBED_TABLES = (
    "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'"
)
"""The tables whose first page opening a SQLite ledger reads (the full-text tables' shadow
tables among them; the virtual tables themselves are not read)."""


def probe_sqlite_tables(query: Callable[[str], Sequence[Sequence[Any]]]) -> None:
    """Read the first row of every table of a SQLite database (``query`` runs a statement on
    it): damage shows here as an error instead of later as a wrong answer."""
    for (table,) in list(query(PROBED_TABLES)):
        query(f'SELECT * FROM "{table}" LIMIT 1')


def wal_files(path: Path) -> tuple[Path, Path]:
    """The ``-wal`` and ``-shm`` files SQLite keeps beside a WAL database at ``path``."""
    return Path(f"{path}-wal"), Path(f"{path}-shm")


@contextlib.contextmanager
def file_to_read(path: Path) -> Iterator[Path]:
    """A SQLite file that another program's read-only connection may read as the ledger at
    ``path``, leaving the ledger's directory as it was found once the block ends.

    That is the ledger itself when its ``-wal`` and ``-shm`` files are there (a writer is at
    work: the reader uses them as they are) or when this user may write it (the files the
    reader made are removed after, as SQLite removes them: by the last connection to close).
    Otherwise it is a snapshot of the ledger in the temporary directory, removed after.
    """
    wal, shm = wal_files(path)
    if wal.exists() and shm.exists():
        yield path
    elif read_only_reason(path) is None:
        found = wal.exists() or shm.exists()
        try:
            yield path
        finally:
            if not found and (wal.exists() or shm.exists()):
                _close_last(path)
    else:
        import tempfile  # only here: a reader that may write the ledger never needs it

        with tempfile.TemporaryDirectory(prefix="agentledger-") as folder:
            yield _snapshot(path, Path(folder))


def _close_last(path: Path) -> None:
    """Open the WAL database at ``path`` and close it: the last connection to close folds the
    ``-wal`` file into the database and removes both files (another still open keeps them)."""
    with (
        contextlib.suppress(sqlite3.Error),  # then the files stay, as SQLite would leave them
        contextlib.closing(sqlite3.connect(path)) as connection,
    ):
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()


def _snapshot(path: Path, folder: Path) -> Path:
    """A copy of the database at ``path`` in ``folder``, out of WAL mode (so that a read-only
    reader of it needs no ``-shm`` file)."""
    copy = folder / path.name
    try:
        with (
            contextlib.closing(sqlite3.connect(read_only_uri(path), uri=True)) as source,
            contextlib.closing(sqlite3.connect(copy)) as target,
        ):
            source.backup(target)
            target.execute("PRAGMA journal_mode=DELETE")
    except sqlite3.DatabaseError as exc:
        raise LedgerOpenError(
            f"cannot read the ledger at {path}: {exc}. Check that it is an agentledger ledger "
            "(`agentledger db verify` says what is damaged)."
        ) from exc
    return copy
