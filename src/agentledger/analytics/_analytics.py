"""``Analytics``: DuckDB over a ledger attached read-only, with the views of ``sql/``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Self

from sqlalchemy.engine import make_url

from .._values import SHORT_ID_LENGTH, find_unstorable, short_ids
from ..errors import ConfigurationError, LedgerOpenError, SchemaVersionError
from ..ledger import Scope, file_to_read, normalize_url, sqlite_path
from ..ledger.migrate import VERSION_TABLE, check_not_newer, head
from . import _cache, _extensions, _rollup, _scope
from ._cache import Progress, SyncResult
from ._duckdb import quoted, require_duckdb
from ._parquet import write_parquet

if TYPE_CHECKING:  # imported when first used: DuckDB comes with the analytics extra
    import duckdb

LEDGER = "ledger"
"""The name the ledger is attached under; the views read ``ledger.<table>``."""

Unit = Literal["minute", "hour", "day", "week", "month"]
ToolGrouping = Literal["agent", "model", "server"]


def view_files() -> list[tuple[str, str]]:
    """The analytics SQL files, in the order they run: ``(file name, SQL)``."""
    folder = resources.files(__package__).joinpath("sql")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return [(f.name, f.read_text(encoding="utf-8")) for f in files]


def attach_statement(
    url: str | os.PathLike[str], *, name: str = LEDGER, tenant_id: str | None = None
) -> tuple[str, str]:
    """The extension to load and the ``ATTACH`` statement for the ledger at ``url``, attached
    as ``name``. With ``tenant_id``, a PostgreSQL ledger's connections start with
    ``agentledger.tenant_id`` set to it, as its row-level security policies expect."""
    normalized = normalize_url(url)
    path = sqlite_path(normalized)
    if path is not None:
        attach = f"ATTACH {quoted(str(path.resolve()))} AS {name} (TYPE sqlite, READ_ONLY)"
        return "sqlite_scanner", attach
    target = _scope.libpq_target(make_url(normalized).set(drivername="postgresql"), tenant_id)
    return "postgres_scanner", f"ATTACH {quoted(target)} AS {name} (TYPE postgres, READ_ONLY)"


def script(
    url: str | os.PathLike[str], *, tenant_id: str | None = None, owner_id: str | None = None
) -> str:
    """A script for the ``duckdb`` command line: attach the ledger at ``url``, define the views.

    ``agentledger analytics sql > views.sql && duckdb -init views.sql`` opens a DuckDB shell
    with every view of :class:`Analytics`. With ``tenant_id`` or ``owner_id``, the views see
    that scope's rows only, as :meth:`Analytics.open` gives them: the ledger is attached as
    ``scoped_source`` and ``ledger`` holds views of its scope's rows.
    """
    scope = Scope(tenant_id, owner_id)
    normalized = normalize_url(url)
    name = LEDGER if scope.everything else _scope.SOURCE
    extension, attach = attach_statement(normalized, name=name, tenant_id=scope.tenant_id)
    header = [
        f"LOAD {quoted(str(_extensions.extension_path(extension)))};",
        f"{attach};",
        "SET TimeZone = 'UTC';",
        *(
            f"{statement};"
            for statement in _scope.scoped_ledger(scope, LEDGER, postgres=_is_postgres(normalized))
        ),
    ]
    return "\n".join([*header, *(sql for _, sql in view_files())])


class Analytics:
    """An in-memory DuckDB connection over a ledger attached read-only, with its views.

    Open one with :meth:`open`. Every method returns a DuckDB relation: print it, filter it
    further (``.filter()``, ``.order()``, ``.limit()``), or turn it into rows (``.fetchall()``),
    a pandas DataFrame (``.df()``, with the ``pandas`` extra), an Arrow table (``.arrow()``, with
    the ``arrow`` extra) or a polars DataFrame (``.pl()``, with the ``polars`` extra; each of
    these installs the ``analytics`` extra too). ``.arrow()`` gives a record batch reader:
    ``.read_all()`` makes it a table. :meth:`sql` runs any query over the views
    and over the ledger's tables (``ledger.agent_runs``, ...).
    """

    def __init__(
        self,
        connection: duckdb.DuckDBPyConnection,
        url: str,
        *,
        files: contextlib.ExitStack | None = None,
        cache: Path | None = None,
        last_sync: SyncResult | None = None,
        scope: Scope | None = None,
        source: str | None = None,
    ) -> None:
        self.connection = connection
        self.url = url
        self.cache = cache
        """The DuckDB file holding the copy the views read, or ``None`` (the ledger itself)."""
        self.last_sync = last_sync
        """What the last sync of the cache did (``None`` without a cache)."""
        self._scope = scope or Scope()
        self.tenant_id = self._scope.tenant_id
        """The tenant whose rows alone this ``Analytics`` sees (``None``: every tenant's)."""
        self.owner_id = self._scope.owner_id
        """The owner whose rows alone this ``Analytics`` sees (``None``: every owner's)."""
        self._source = source
        """The ``ATTACH`` statement of the ledger a scoped cache syncs from: attached for the
        sync only, so that no SQL run here can read another scope's rows in it."""
        self._files = files or contextlib.ExitStack()
        """What to do with the files beside a SQLite ledger once the connection is closed."""

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str] = "agentledger.db",
        *,
        threads: int | None = None,
        cache: str | os.PathLike[str] | None = None,
        progress: Progress | None = None,
        tenant_id: str | None = None,
        owner_id: str | None = None,
    ) -> Analytics:
        """Attach the ledger at ``url`` (a SQLite file path or URL, or a PostgreSQL URL).

        Nothing is written to the ledger, and no extension is downloaded: DuckDB and the
        scanner come from their PyPI packages, which the ``analytics`` extra installs
        (:class:`ConfigurationError` says what to install when one is missing). A file that is
        not an agentledger ledger raises :class:`LedgerOpenError`; one migrated by a newer
        agentledger, :class:`SchemaVersionError`. ``threads`` caps
        DuckDB's threads; on PostgreSQL it defaults to 1, because DuckDB's postgres scanner can
        hang when one query reads the same table in parallel twice (for large PostgreSQL
        ledgers, ``export_parquet`` and query the files with all cores).

        A SQLite ledger's directory is left as it was found: the ``-wal`` and ``-shm`` files
        DuckDB's reader makes are removed when the connection closes. Where this user may not
        write the ledger's file or directory (and no writer is at work), DuckDB reads a
        snapshot of it copied to the temporary directory, removed on close.

        With ``cache`` (a file path, such as ``"ledger.duckdb"``), the views read a copy of the
        ledger's tables kept in that DuckDB file, in DuckDB's columnar storage: many times
        faster than reading the ledger. Opening brings the copy up to date, reading only what
        changed since its last sync (:meth:`sync` does it again later); the first sync copies
        everything. A cache of another ledger, or of an older schema revision, is rebuilt; one
        written by a newer agentledger raises :class:`SchemaVersionError`. ``progress`` is
        called with a line of text as a long sync goes.

        With ``tenant_id`` or ``owner_id`` (or both), everything this object gives keeps to
        that scope: the views, the methods, the ledger's tables as :meth:`sql` reads them
        (``ledger.<table>``), the Parquet export and the reports hold that tenant's (and
        owner's) rows only, and the ledger's other tables (the full-text index, the change
        bookkeeping) are left out. A cache opened in a scope copies only its rows and records
        the scope; opened in another scope, or in none, it is rebuilt (``progress`` says why).
        On PostgreSQL the scanner's connections also carry the tenant in the setting
        ``agentledger.tenant_id``, which the ledger's row-level security policies read.
        Over the ledger itself (no ``cache``) the ledger stays attached, as
        ``scoped_source``, and SQL that names it reads past the scope (DuckDB has no
        per-database permissions); with a cache it is attached only while a sync runs. A
        blank ``tenant_id`` or ``owner_id``, or one holding a control character, raises
        :class:`UsageError`.
        """
        require_duckdb()

        scope = Scope(tenant_id, owner_id)
        normalized = normalize_url(url)
        _check_sqlite_file(normalized)
        files = contextlib.ExitStack()
        target = None if cache is None else Path(cache)
        try:
            connection, source = _connect(normalized, files, threads, scope, cache=target)
            last = (
                None
                if target is None
                else _sync_and_define(connection, normalized, progress, scope)
            )
        except BaseException:
            files.close()
            raise
        kept = None if target is None or scope.everything else source
        return cls(
            connection,
            normalized,
            files=files,
            cache=target,
            last_sync=last,
            scope=scope,
            source=kept,
        )

    def sync(self, *, progress: Progress | None = None) -> SyncResult:
        """Bring the cache up to date with the ledger: only the rows added, changed or deleted
        since the last sync are read, in one DuckDB transaction (a sync that fails or is
        killed midway leaves the last good copy, and the next one completes it). Only for an
        ``Analytics`` opened with ``cache=``."""
        if self.cache is None:
            raise ConfigurationError(
                "sync() updates an analytics cache, and this Analytics reads the ledger itself: "
                "open it with Analytics.open(url, cache='ledger.duckdb')"
            )
        with _attached(self.connection, self._source, self.url):
            self.last_sync = _cache.sync(
                self.connection,
                postgres=_is_postgres(self.url),
                progress=progress,
                scope=self._scope,
            )
        return self.last_sync

    # -- the views ----------------------------------------------------------------------------

    def run_tree(self) -> duckdb.DuckDBPyRelation:
        """Every run with its root, depth and path (run ids and agent names from the root)."""
        return self._view("run_tree")

    def run_rollup(self) -> duckdb.DuckDBPyRelation:
        """Per run: exclusive (own steps) and inclusive (whole subtree) tokens, cost, steps,
        tool calls and errors; wall time of the run and of its own steps."""
        return self._view("run_rollup")

    def tool_stats(self, by: ToolGrouping | None = None) -> duckdb.DuckDBPyRelation:
        """Per tool (and per agent or model with ``by``): calls, errors, error rate and
        p50/p95/p99 duration. ``by="server"``: the same per MCP server the tools came from
        (``server``, NULL for the agent's own tools), with how many of its ``tools`` were
        called."""
        if by not in (None, "agent", "model", "server"):  # it names a view: never SQL
            raise ConfigurationError(
                f"tool_stats(by={by!r}): give agent, model or server (or nothing, per tool)"
            )
        return self._view("tool_stats" if by is None else f"tool_stats_by_{by}")

    def model_usage(self) -> duckdb.DuckDBPyRelation:
        return self._view("model_usage")

    def agent_usage(self) -> duckdb.DuckDBPyRelation:
        return self._view("agent_usage")

    def conversation_usage(self) -> duckdb.DuckDBPyRelation:
        """Per conversation, its runs' usage including the subagent runs they started."""
        return self._view("conversation_usage")

    def usage_over_time(self, unit: Unit = "day") -> duckdb.DuckDBPyRelation:
        """Usage per time bucket (``hour``, ``day``, ...), agent and model."""
        if unit not in ("minute", "hour", "day", "week", "month"):
            raise ConfigurationError(
                f"usage_over_time(unit={unit!r}): give minute, hour, day, week or month"
            )
        return self.connection.sql(f"SELECT * FROM usage_over_time('{unit}')")

    def tree_shape(self) -> duckdb.DuckDBPyRelation:
        """Per run tree: runs, depth, fan-out."""
        return self._view("tree_shape")

    def tree_shape_summary(self) -> duckdb.DuckDBPyRelation:
        return self._view("tree_shape_summary")

    def running_runs(self) -> duckdb.DuckDBPyRelation:
        return self._view("running_runs")

    def unpriced_steps(self) -> duckdb.DuckDBPyRelation:
        return self._view("unpriced_steps")

    def completeness(self) -> duckdb.DuckDBPyRelation:
        """Runs still running and steps without a price, counted: what totals do not cover."""
        return self._view("completeness")

    def compaction_events(self) -> duckdb.DuckDBPyRelation:
        """Every compaction of a conversation's context, oldest first: observation masking
        within a run (``kind`` ``'masking'``, before the step ``step_index`` of ``run_id``) and
        summaries between runs (``'summary'``), completed or failed; the messages taken out,
        ``tokens_before``, ``tokens_after`` and ``tokens_saved``, and what a summary's model call
        spent (``input_tokens``, ..., ``cost_usd``: not counted in the usage views, which sum
        steps). ``before_run_id`` and ``before_step_index`` name the step whose context it
        shrank first (for a summary, the first step of the conversation's next run)."""
        return self._view("compaction_events")

    def context_size(self) -> duckdb.DuckDBPyRelation:
        """The context over each main conversation's life: one row per step of its runs, in
        order (``run_number``, ``step_index``, ``step_number`` over the conversation), with the
        ``input_tokens`` the provider reported for it (the real size of the context), what the
        compactions just before it saved (``compactions``, ``tokens_saved``,
        ``masked_results``, ``summarized_messages``), and the conversation's messages in and out
        of the context when its run began."""
        return self._view("context_size")

    def short_ids(
        self, ids: Iterable[str], *, of: Literal["run", "conversation"]
    ) -> dict[str, str]:
        """Each of ``ids`` (of runs or of conversations) by its shortest prefix, of at least
        ``SHORT_ID_LENGTH`` characters, that begins no other id of its kind in the ledger: what
        ``Ledger.short_ids`` gives, and what the command line takes for the id."""
        wanted = list(ids)
        heads = sorted(
            {
                i[:SHORT_ID_LENGTH]
                for i in wanted
                # No id holds a NUL or a lone surrogate (DuckDB cannot even take the latter).
                if len(i) > SHORT_ID_LENGTH and find_unstorable(i) is None
            }
        )
        if not heads:
            return short_ids(wanted)
        table = "agent_runs" if of == "run" else "conversations"
        alike = self.connection.execute(
            f"SELECT id FROM {LEDGER}.{table} WHERE list_contains(?, left(id, {SHORT_ID_LENGTH}))",
            [heads],
        ).fetchall()
        return short_ids(wanted, [row[0] for row in alike])

    def sql(self, query: str, params: Sequence[object] | None = None) -> duckdb.DuckDBPyRelation:
        """Any query over the views and the ledger's tables (``ledger.<table>``: in a scope,
        the scope's rows of them)."""
        return self.connection.sql(query, params=params)

    def _view(self, name: str) -> duckdb.DuckDBPyRelation:
        return self.connection.sql(f"SELECT * FROM {name}")

    # -- export -------------------------------------------------------------------------------

    def export_parquet(self, directory: str | os.PathLike[str]) -> list[Path]:
        """Every ledger table as Parquet under ``directory/<table>/``, partitioned by day
        (``day=YYYY-MM-DD/``) on its start or creation time (``forget_log``: when it
        forgot); the files written. A table with no rows is one file of no rows, with its
        columns, under ``directory/<table>/empty/``; a table with no time column (the schema
        version) is one file. ``read_parquet('<directory>/<table>/**/*.parquet')`` reads any
        of them (:func:`read_back`). Left out: :data:`LEFT_OUT`. A table's folder from an
        earlier export is replaced whole: none of its days is left beside this export's, so no
        row of an earlier export in another scope survives. In a scope, the files hold the
        scope's rows only."""
        return write_parquet(self.connection, LEDGER, directory)

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        self.connection.close()
        self._files.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        shown = make_url(self.url).render_as_string(hide_password=True)
        given = {"cache": None if self.cache is None else str(self.cache)}
        given |= {"tenant_id": self.tenant_id, "owner_id": self.owner_id}
        options = "".join(f", {name}={value!r}" for name, value in given.items() if value)
        return f"Analytics({shown!r}{options})"


def export_parquet(
    url: str | os.PathLike[str],
    directory: str | os.PathLike[str],
    *,
    tenant_id: str | None = None,
    owner_id: str | None = None,
) -> list[Path]:
    """Every table of the ledger at ``url`` as Parquet under ``directory``, by day (the rows
    of ``tenant_id`` and ``owner_id`` only, when given)."""
    with Analytics.open(url, tenant_id=tenant_id, owner_id=owner_id) as analytics:
        return analytics.export_parquet(directory)


def _connect(
    url: str,
    files: contextlib.ExitStack,
    threads: int | None,
    scope: Scope,
    *,
    cache: Path | None = None,
) -> tuple[duckdb.DuckDBPyConnection, str]:
    """DuckDB with the ledger at ``url`` attached and checked, and the ``ATTACH`` statement
    that attached it; ``files`` gets what to do beside a SQLite ledger once the connection is
    closed. Without ``cache``, the ledger is attached as ``ledger`` and the views are defined
    over it (in a scope, it is attached as ``scoped_source`` and ``ledger`` holds views of the
    scope's rows of its tables); with one, the ledger is attached as ``source`` and the cache
    file as ``ledger`` (the views wait for its first sync)."""
    import duckdb

    path = sqlite_path(url)
    source = url if path is None else str(files.enter_context(file_to_read(path)))
    name = _cache.SOURCE if cache is not None else LEDGER if scope.everything else _scope.SOURCE
    extension, attach = attach_statement(source, name=name, tenant_id=scope.tenant_id)
    if extension == "postgres_scanner" and threads is None:
        threads = 1  # the scanner can hang when one query scans the same table twice at once
    connection = duckdb.connect(config=_config(threads))
    try:
        _extensions.load(connection, extension)
        _attach(connection, attach, url)
        _check_revision(connection, url, name=name)
        connection.execute("SET TimeZone = 'UTC'")
        if cache is None:
            for statement in _scope.scoped_ledger(scope, LEDGER, postgres=_is_postgres(url)):
                connection.execute(statement)
            _define_views(connection)
        else:
            _cache.attach_cache(connection, str(cache))
    except BaseException:
        connection.close()
        raise
    return connection, attach


def _sync_and_define(
    connection: duckdb.DuckDBPyConnection,
    url: str,
    progress: Progress | None,
    scope: Scope,
) -> SyncResult:
    """The first sync of the cache, then the views over it; in a scope, the ledger is
    detached afterwards (and attached again for each :meth:`Analytics.sync`)."""
    try:
        result = _cache.sync(connection, postgres=_is_postgres(url), progress=progress, scope=scope)
        if not scope.everything:
            connection.execute(f"DETACH {_cache.SOURCE}")
        _define_views(connection)
        connection.execute(_rollup.VIEWS)  # the cache keeps the rollup's rows: read them
    except BaseException:
        connection.close()
        raise
    return result


@contextlib.contextmanager
def _attached(
    connection: duckdb.DuckDBPyConnection, attach: str | None, url: str
) -> Iterator[None]:
    """The ledger a scoped cache syncs from, attached (by ``attach``) for the time of the
    sync; nothing to do when it stays attached (``None``)."""
    if attach is None:
        yield
        return
    _attach(connection, attach, url)
    try:
        _check_revision(connection, url, name=_cache.SOURCE)
        yield
    finally:
        connection.execute(f"DETACH {_cache.SOURCE}")


def _define_views(connection: duckdb.DuckDBPyConnection) -> None:
    for _, sql in view_files():
        connection.execute(sql)


def _is_postgres(url: str) -> bool:
    return sqlite_path(url) is None


def _config(threads: int | None) -> dict[str, str | bool | int | float | list[str]]:
    config: dict[str, str | bool | int | float | list[str]] = {
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    }
    if threads is not None:
        config["threads"] = threads
    return config


def _check_sqlite_file(url: str) -> None:
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        raise LedgerOpenError(
            f"no ledger at {path}: the file does not exist. Record runs into it first "
            "(`agentledger demo` makes one), or pass the path of an existing ledger."
        )


def _attach(connection: duckdb.DuckDBPyConnection, attach: str, url: str) -> None:
    import duckdb

    try:
        connection.execute(attach)
    except duckdb.Error as exc:
        raise LedgerOpenError(
            f"cannot attach the ledger {make_url(url).render_as_string(hide_password=True)} "
            f"in DuckDB: {exc}"
        ) from exc


def _check_revision(connection: duckdb.DuckDBPyConnection, url: str, *, name: str = LEDGER) -> None:
    import duckdb

    shown = make_url(url).render_as_string(hide_password=True)
    try:
        rows = connection.execute(f"SELECT version_num FROM {name}.{VERSION_TABLE}").fetchall()
    except duckdb.Error:
        raise LedgerOpenError(
            f"{shown} is not an agentledger ledger (it has no {VERSION_TABLE} table). Pass "
            "the ledger's path or URL, or create it with `agentledger db upgrade`."
        ) from None
    revision = rows[0][0] if rows else None
    check_not_newer(revision)
    if revision != head():
        raise SchemaVersionError(
            f"{shown} is at schema revision {revision!r}, older than this agentledger's "
            f"{head()!r}. Upgrade it first: agentledger --db {shown} db upgrade"
        )
