"""Opening a ledger's database: check it can be read, then bring it to the newest schema (or
say why not), turning what the driver raised into the ledger's errors. The schema's revision
is read without Alembic (:mod:`._revisions`), which loads only when there is something to
migrate."""

from __future__ import annotations

import sqlite3

from sqlalchemy import Engine
from sqlalchemy.exc import DatabaseError

from ..errors import ConfigurationError, LedgerError, LedgerOpenError
from ._access import ReadOnly
from ._failures import is_busy, is_read_only, is_refused, open_error
from ._revisions import HEAD, check_not_newer, not_at_head, schema_revision
from ._verification import probe_sqlite


def prepare(engine: Engine, *, migrate: bool, verify: bool, read_only: ReadOnly | None) -> None:
    """Check the database can be opened, then bring it to the newest schema (a read-only
    handle only checks that it is there already)."""
    where = engine.url.render_as_string(hide_password=True)
    try:
        if engine.dialect.name == "sqlite":
            probe_sqlite(engine, integrity=verify)
        with engine.connect() as conn:
            dialect, query = engine.dialect.name, lambda sql: conn.exec_driver_sql(sql).all()
            revision = schema_revision(dialect, query)
            check_not_newer(revision)
        if revision == HEAD:
            return
        if migrate and read_only is None:
            from . import migrate as migrations  # Alembic loads only to migrate

            migrations.upgrade(engine)
        elif migrate and read_only is not None:
            raise read_only.refusal(f"upgrading the ledger to the newest schema ({HEAD})", where)
        else:
            raise not_at_head(where)
    except (ConfigurationError, LedgerError):
        raise
    except (DatabaseError, sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        if is_busy(exc) or is_read_only(exc) or is_refused(exc):
            # with_retries tries again, or says the database refused to write, or refused the
            # role (one not granted what `agentledger db app-role` prints)
            raise
        raise LedgerOpenError(open_error(where, exc)) from exc
