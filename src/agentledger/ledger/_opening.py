"""Opening a ledger's database: check it can be read, then bring it to the newest schema (or
say why not), turning what the driver raised into the ledger's errors."""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DatabaseError

from ..errors import ConfigurationError, LedgerError, LedgerOpenError, SchemaVersionError
from . import migrate as migrations
from ._access import ReadOnly
from ._engine import is_busy, is_read_only, is_refused
from ._verification import probe_sqlite


def prepare(engine: Engine, *, migrate: bool, verify: bool, read_only: ReadOnly | None) -> None:
    """Check the database can be opened, then bring it to the newest schema (a read-only
    handle only checks that it is there already)."""
    url = make_url(str(engine.url))
    where = url.render_as_string(hide_password=True)
    try:
        if engine.dialect.name == "sqlite":
            probe_sqlite(engine, integrity=verify)
        if migrate and read_only is None:
            migrations.upgrade(engine)
        elif not migrations.is_current(engine):
            if migrate and read_only is not None:
                raise read_only.refusal(
                    f"upgrading the ledger to the newest schema ({migrations.head()})", where
                )
            raise SchemaVersionError(
                f"the database at {where} is not at the newest "
                f"schema ({migrations.head()}); run `agentledger db upgrade`"
            )
    except (ConfigurationError, LedgerError):
        raise
    except (DatabaseError, sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        if is_busy(exc) or is_read_only(exc) or is_refused(exc):
            # with_retries tries again, or says the database refused to write, or refused the
            # role (one not granted what `agentledger db app-role` prints)
            raise
        raise LedgerOpenError(_open_error(url, exc)) from exc


def _open_error(url: Any, exc: Exception) -> str:
    detail = str(getattr(exc, "orig", None) or exc).strip()
    where = url.render_as_string(hide_password=True)
    if isinstance(exc, UnicodeDecodeError) or any(
        word in detail for word in ("malformed", "not a database", "encrypted", "corrupt")
    ):
        hint = "the file is corrupt; restore it from a backup (its -wal and -shm files with it)"
    elif "unable to open" in detail:
        hint = "check the path and the permissions of the file and its directory"
    else:
        hint = "check the URL, and that the server is up and reachable"
    return f"cannot open the ledger at {where}: {detail}. {hint}"
