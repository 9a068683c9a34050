"""What a database's failures mean to the ledger: a transaction tried again while the database
is locked, and what cannot be cured by trying again said as the ledger's errors (read-only,
refused, damaged, gone), with what to do. Also a value that cannot be decoded, which is damage.

It imports no SQLAlchemy, so that :class:`~agentledger.ledger.LedgerReader` (the standard
library's ``sqlite3``) and the SQLAlchemy engine of :class:`~agentledger.ledger.Ledger` read
failures the same way: an error SQLAlchemy raised is read through the driver's error it wraps
(:func:`driver_error`).
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar, get_args

from ..errors import (
    ConfigurationError,
    LedgerBusyError,
    LedgerCorruptError,
    LedgerPermissionError,
    LedgerReadOnlyError,
    LedgerUnavailableError,
)

Synchronous = Literal["FULL", "NORMAL"]
T = TypeVar("T")


@dataclass(frozen=True)
class EngineSettings:
    """How the ledger talks to its database.

    ``synchronous="NORMAL"`` (SQLite only) is faster and may lose the last commits on power
    loss; it never corrupts the database. ``busy_timeout`` is how long one attempt waits for
    another writer; ``retries`` how many more attempts a write transaction gets.
    """

    synchronous: Synchronous = "FULL"
    busy_timeout: float = 5.0
    retries: int = 8

    def __post_init__(self) -> None:
        if self.synchronous not in get_args(Synchronous):
            raise ConfigurationError(
                f"synchronous={self.synchronous!r} is not a setting of the ledger: use 'FULL' "
                "(the default: every commit synced to disk before it is reported) or 'NORMAL' "
                "(SQLite only: faster, and the last commits may be lost on power loss). "
                "Nothing was opened."
            )


def driver_error(exc: BaseException) -> BaseException:
    """The driver's own error: the one SQLAlchemy's ``DBAPIError`` wraps (its ``orig``), or
    ``exc`` itself."""
    orig = getattr(exc, "orig", None)
    return orig if isinstance(orig, BaseException) else exc


_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03"})
"""PostgreSQL: serialization failure, deadlock detected, lock not available."""


def is_busy(exc: BaseException) -> bool:
    """True for "database is locked" style errors, and PostgreSQL's deadlocks and
    serialization failures: the transaction was rolled back whole, and a retry may cure it."""
    cause = driver_error(exc)
    if getattr(cause, "sqlstate", None) in _RETRYABLE_SQLSTATES:
        return True
    if not isinstance(cause, sqlite3.OperationalError):
        return False
    text = str(cause).lower()
    return "database is locked" in text or "database is busy" in text


def with_retries(
    settings: EngineSettings,
    work: Callable[[], T],
    *,
    what: str,
    on_retry: Callable[[], None] | None = None,
    errors: tuple[type[Exception], ...] = (sqlite3.DatabaseError,),
) -> T:
    """Run ``work`` (one whole transaction), again after busy errors, with jittered backoff;
    ``on_retry`` is told of each attempt made again. ``errors`` are what the database's driver
    raises (SQLAlchemy's engine adds its ``DBAPIError``, which wraps the driver's)."""
    delay = 0.05
    for attempt in range(settings.retries + 1):
        if attempt and on_retry is not None:
            on_retry()
        try:
            return work()
        except errors as exc:
            if not is_busy(exc):
                if is_read_only(exc):
                    raise LedgerReadOnlyError(
                        f"{what}: the database refused to write ({_cause(exc)}), so nothing "
                        "was written. Point the ledger at a database this process may write "
                        "(for SQLite, a file and directory this user may write; for "
                        "PostgreSQL, the primary server and a role that may write), or open "
                        "it with read_only=True to read it."
                    ) from exc
                if is_refused(exc):
                    raise LedgerPermissionError(_refusal(what, exc)) from exc
                if _is_damage(exc):
                    raise LedgerCorruptError(
                        f"{what}: the database file is damaged ({_cause(exc)}). Restore it from "
                        "a backup (with its -wal and -shm files); `agentledger db verify` says "
                        "what is damaged."
                    ) from exc
                if getattr(exc, "connection_invalidated", False) or _is_outage(exc):
                    raise LedgerUnavailableError(
                        f"{what}: the database failed ({_cause(exc)}). What was committed "
                        "before is kept; once the database is back, resume the run "
                        "(agent.resume(run_id), or `agentledger recover`)."
                    ) from exc
                raise
            if attempt == settings.retries:
                raise LedgerBusyError(
                    f"{what}: the database stayed locked by other writers through "
                    f"{settings.retries + 1} attempts of {settings.busy_timeout}s each. "
                    "Fewer concurrent writers, or a longer busy_timeout, will help."
                ) from exc
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable")


_READ_ONLY_SQLSTATE = "25006"
"""PostgreSQL: read_only_sql_transaction (a read-only session or transaction, a standby)."""


def is_read_only(exc: BaseException) -> bool:
    """True when the database refused a write because it may only be read: SQLite's
    SQLITE_READONLY family, PostgreSQL's read-only transactions."""
    cause = driver_error(exc)
    if getattr(cause, "sqlstate", None) == _READ_ONLY_SQLSTATE:
        return True
    code = getattr(cause, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_READONLY


INSUFFICIENT_PRIVILEGE = "42501"
"""PostgreSQL: insufficient_privilege (a privilege not granted, a row refused by row-level
security)."""


def is_refused(exc: BaseException) -> bool:
    """True when PostgreSQL refused the role what was asked (:data:`INSUFFICIENT_PRIVILEGE`)."""
    cause = driver_error(exc)
    return getattr(cause, "sqlstate", None) == INSUFFICIENT_PRIVILEGE


def _refusal(what: str, exc: BaseException) -> str:
    """What to do about a refusal: scope the handle when row-level security refused a row (the
    application role writing outside its tenant, or with none), else use the right role."""
    if "row-level security" in _cause(exc):
        return (
            f"{what}: the database refused the row ({_cause(exc)}), so the transaction was "
            "rolled back. This role is under row-level security (the application role): it "
            "sees and writes only the rows of the tenant its transaction is scoped to, and an "
            "unscoped handle none at all. Scope the handle to the tenant, "
            "ledger.scoped(tenant_id=...) (--tenant on the command line), or connect as the "
            "role that owns the ledger's tables."
        )
    return (
        f"{what}: the database refused this role ({_cause(exc)}), so the transaction was rolled "
        "back. Grant the role what `agentledger db app-role` prints, or connect as the role that "
        "owns the ledger's tables."
    )


def _is_outage(exc: BaseException) -> bool:
    """An operational failure of the database itself (I/O, connection, shutdown), as opposed
    to a constraint or a programming error."""
    cause = driver_error(exc)
    return type(cause).__name__ in ("OperationalError", "InterfaceError") or isinstance(
        cause, sqlite3.OperationalError
    )


def _is_damage(exc: BaseException) -> bool:
    """SQLite found the file damaged: SQLITE_CORRUPT or SQLITE_NOTADB."""
    cause = driver_error(exc)
    if type(cause) is sqlite3.DatabaseError:
        return True
    text = str(cause).lower()
    return isinstance(cause, sqlite3.OperationalError) and any(sign in text for sign in _DAMAGE)


_DAMAGE = ("malformed", "not a database", "could not decode to utf-8", "no such column")
"""What SQLite says when a file's pages, text or schema were damaged (the schema was checked at
open, so a column of ours that is missing means its definition was damaged)."""


def _cause(exc: BaseException) -> str:
    """The database's own message, without the SQL statement and its parameters."""
    cause = driver_error(exc)
    text = " ".join(str(cause).split())
    return f"{type(cause).__name__}: {text[:300]}"


UNDECODABLE = (ValueError, TypeError)
"""What reading a damaged row raises once its checksum matched (or it has none): JSON, UTF-8,
a time or an enum value that cannot be decoded, a value of the wrong type (pydantic's
ValidationError and UnicodeDecodeError are ValueErrors). Anything else is a bug, not damage,
and is not dressed up as a damaged database."""


def decoded(what: str, decode: Callable[[], T]) -> T:
    """``decode()``, with what a damaged row raises (:data:`UNDECODABLE`) as a
    :class:`LedgerCorruptError` saying what was being read."""
    try:
        return decode()
    except UNDECODABLE as exc:
        raise LedgerCorruptError(
            f"{what}: a row could not be decoded ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:300]}). The database is damaged; restore it from "
            "a backup (for SQLite, with its -wal and -shm files)."
        ) from exc


def open_error(where: str, exc: BaseException) -> str:
    """Why the ledger at ``where`` could not be opened (``exc``: what the driver raised), and
    what to do."""
    detail = str(driver_error(exc)).strip()
    if isinstance(exc, UnicodeDecodeError) or any(
        word in detail for word in ("malformed", "not a database", "encrypted", "corrupt")
    ):
        hint = "the file is corrupt; restore it from a backup (its -wal and -shm files with it)"
    elif "unable to open" in detail:
        hint = "check the path and the permissions of the file and its directory"
    else:
        hint = "check the URL, and that the server is up and reachable"
    return f"cannot open the ledger at {where}: {detail}. {hint}"
