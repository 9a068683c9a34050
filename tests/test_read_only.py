"""Read-only ledgers: ``Ledger.open(url, read_only=True)``, ``--read-only``, and a SQLite
ledger this user may not write, which opens read-only by itself.

Every read, search, verification, listing, trace, analytics and export works; every write
raises ``LedgerReadOnlyError`` before it touches the database; and nothing is created beside a
SQLite ledger (no ``-wal``, no ``-shm``), nor is its file changed (bytes and mtime).

The suite may run as root, which writes any file whatever its mode: the tests of a ledger
this user may not write run their plays in a worker that gave root up for ``nobody``
(``support.unprivileged``), over a ledger in a directory ``nobody`` may read but not write.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

import agentledger
from agentledger import AgentBuilder, LedgerError
from agentledger.analytics import Analytics
from agentledger.cli import cli
from agentledger.errors import LedgerOpenError, LedgerReadOnlyError, SchemaVersionError
from agentledger.ledger import Ledger, migrate
from agentledger.llm import InferenceResponse, ScriptedLLM
from support import unprivileged as play
from support.migration_harness import (
    SEARCH_WORD,
    Database,
    begin_stale_run,
    record_representative_runs,
)
from support.unprivileged import UNPRIVILEGED_USER, unprivileged_worker

# --- a recorded ledger, and what may not change ---------------------------------------------


@dataclass(frozen=True)
class Source:
    """A real ledger (every table holds rows; one run is stale), its ids, and what a writable
    handle reads of it."""

    data: bytes
    ids: dict[str, str]
    reads: dict[str, Any]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    path = tmp_path_factory.mktemp("source") / "ledger.db"
    with Ledger.open(path) as ledger:
        ids = record_representative_runs(ledger)
    reads = play.read_everything(str(path), ids)
    assert reads.pop("read_only") is False
    return Source(path.read_bytes(), ids, reads)


@dataclass(frozen=True)
class Files:
    """What a directory holds: the names, and each file's bytes and mtime."""

    names: list[str]
    contents: dict[str, tuple[str, int]]

    @classmethod
    def of(cls, directory: Path) -> Files:
        names = sorted(p.name for p in directory.iterdir())
        return cls(
            names,
            {
                n: (hashlib.sha256((directory / n).read_bytes()).hexdigest(), _mtime(directory / n))
                for n in names
            },
        )


def _mtime(path: Path) -> int:
    return os.stat(path).st_mtime_ns


@dataclass(frozen=True)
class Shelf:
    """A copy of the source ledger in a directory of its own, readable by every user."""

    directory: Path
    ledger: Path
    spare: Path
    """A directory every user may write (for exports)."""

    def files(self) -> Files:
        return Files.of(self.directory)

    @contextlib.contextmanager
    def read_only(self, modes: tuple[int, int] = (0o444, 0o555)) -> Iterator[None]:
        """The ledger's file and its directory in ``modes``: see :data:`UNWRITABLE`."""
        file_mode, directory_mode = modes
        self.ledger.chmod(file_mode)
        self.directory.chmod(directory_mode)
        try:
            yield
        finally:
            self.directory.chmod(0o755)
            self.ledger.chmod(0o644)


UNWRITABLE = {
    "file": (0o444, 0o777),
    "directory": (0o666, 0o555),
    "file and directory": (0o444, 0o555),
}
"""The modes (the file's, its directory's) that keep a user who is not root from writing a
SQLite ledger: a read-only file in a directory anyone may write (where SQLite would create
its -wal and -shm files), a writable file in a read-only directory, and both read-only."""


@pytest.fixture
def shelf(source: Source) -> Iterator[Shelf]:
    # Not under pytest's tmp_path: its base directory is private to the user running the suite.
    base = Path(tempfile.mkdtemp(prefix="agentledger-read-only-"))
    try:
        base.chmod(0o755)
        directory, spare = base / "shelf", base / "spare"
        directory.mkdir()
        spare.mkdir(mode=0o777)
        spare.chmod(0o777)
        ledger = directory / "ledger.db"
        ledger.write_bytes(source.data)
        yield Shelf(directory, ledger, spare)
    finally:
        for folder, _, _ in os.walk(base):
            Path(folder).chmod(0o755)
        shutil.rmtree(base)


@pytest.fixture(params=list(UNWRITABLE))
def unwritable(request: pytest.FixtureRequest, shelf: Shelf) -> Iterator[Shelf]:
    """The shelf, its ledger made unwritable (for users who are not root) in each way."""
    with shelf.read_only(UNWRITABLE[request.param]):
        yield shelf


@pytest.fixture(scope="module")
def nobody() -> Iterator[ProcessPoolExecutor]:
    """A worker that runs the plays as ``nobody`` (or as this user, when it is not root)."""
    blocked = play.unreachable()
    if blocked:
        pytest.skip(
            f"{UNPRIVILEGED_USER} may not enter {', '.join(blocked)} (on the way to this checkout "
            "or to Python): give them o+x, or clone elsewhere, to run the unprivileged tests"
        )
    with unprivileged_worker() as worker:
        uid, euid = worker.submit(play.user_id).result()
        assert uid == euid and (euid != 0 or os.geteuid() != 0)
        yield worker


def as_nobody(worker: ProcessPoolExecutor, function: Any, *args: Any) -> Any:
    return worker.submit(function, *args).result(timeout=120)


# --- a ledger this user may not write ---------------------------------------------------------


def test_the_worker_is_not_root_so_the_file_modes_hold(nobody, shelf):
    with shelf.read_only():
        assert as_nobody(nobody, play.user_id)[1] != 0
        with pytest.raises(PermissionError):
            as_nobody(nobody, play.append_to, str(shelf.ledger))
        with pytest.raises(PermissionError):
            as_nobody(nobody, play.append_to, str(shelf.directory / "new-file"))


def test_a_ledger_this_user_may_not_write_opens_read_only_and_reads_as_a_writer_would(
    nobody, source, unwritable
):
    before = unwritable.files()

    reads = as_nobody(nobody, play.read_everything, str(unwritable.ledger), source.ids)

    assert unwritable.files() == before
    assert reads.pop("read_only") is True
    assert reads == source.reads
    assert reads["verify"] == [] and reads["search"] == 3 and reads["stale"]


def test_db_verify_says_ok_on_a_healthy_read_only_ledger_and_writes_nothing(nobody, unwritable):
    before = unwritable.files()

    code, output = as_nobody(nobody, play.command, str(unwritable.ledger), "db", "verify")

    assert unwritable.files() == before
    assert code == 0, output
    assert output.startswith("ok: 9 conversations"), output
    assert "the full-text index check found nothing" in output
    assert "problem" not in output and "readonly" not in output


def test_plain_sql_reads_a_read_only_ledger_through_read_only_uri(nobody, unwritable):
    before = unwritable.files()

    assert as_nobody(nobody, play.count_runs_in_plain_sql, str(unwritable.ledger)) == 8

    assert unwritable.files() == before


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["conversations"], "conversations"),
        (["runs", "--status", "running"], "stale-planner"),
        (["show", "{trip}"], "Bring marmalade"),
        (["show", "{compacted}", "--as", "model"], "They asked about the weather"),
        (["trace", "{trip_run}"], "get_weather"),
        (["search", SEARCH_WORD], "marmalade"),
        (["recover", "--dry-run", "--stale-after", "0"], "1 run stale"),
        (["db", "current"], "(head)"),
        (["db", "check"], "up to date"),
        (["analytics", "report"], "trip-planner"),
    ],
    ids=lambda value: value[0] if isinstance(value, list) else None,
)
def test_the_commands_that_read_work_on_a_read_only_ledger_and_leave_it_as_it_was(
    nobody, shelf, source, args, expected
):
    args = [a.format(**source.ids) for a in args]
    before = shelf.files()
    with shelf.read_only():
        code, output = as_nobody(nobody, play.command, str(shelf.ledger), *args)
        assert shelf.files() == before

    assert code == 0, output
    assert expected in output


def test_analytics_and_the_parquet_export_work_on_a_read_only_ledger(nobody, unwritable):
    before, spare = unwritable.files(), unwritable.spare

    found = as_nobody(nobody, play.analyze, str(unwritable.ledger), str(spare / "api"))
    code, output = as_nobody(
        nobody, play.command, str(unwritable.ledger), "export", "parquet", str(spare / "cli")
    )

    assert unwritable.files() == before
    assert found["runs"] == 8
    assert found["tools"] == ["convert", "forecast", "get_weather"]
    assert "tool_executions" in found["exported"]
    assert code == 0, output
    assert sorted(p.name for p in (spare / "cli").iterdir()) == found["exported"]


def test_a_run_on_a_read_only_ledger_raises_ledger_read_only_error_before_touching_it(
    nobody, unwritable
):
    before = unwritable.files()

    with pytest.raises(LedgerReadOnlyError) as raised:
        as_nobody(nobody, play.record_a_run, str(unwritable.ledger))

    assert unwritable.files() == before
    message = str(raised.value)
    assert "is read-only here: this user may not write" in message
    assert "Nothing was written" in message and "run as a user who may write" in message
    assert "resume" not in message


@pytest.mark.parametrize(
    "write",
    [play.recover, play.upgrade],
    ids=["Ledger.recover", "migrate.upgrade"],
)
def test_recover_and_upgrade_raise_ledger_read_only_error_before_any_file_is_created(
    nobody, unwritable, write
):
    before = unwritable.files()

    with pytest.raises(LedgerReadOnlyError, match="this user may not write"):
        as_nobody(nobody, write, str(unwritable.ledger))

    assert unwritable.files() == before


LOCAL_MODEL = ["--provider", "openai", "--model", "local", "--base-url", "http://127.0.0.1:9"]
"""A model server that needs no key (never reached: the ledger is refused first)."""


@pytest.mark.parametrize(
    "args",
    [
        ["recover"],
        ["db", "upgrade"],
        ["db", "downgrade", "0004"],
        ["run", "Remember this.", *LOCAL_MODEL],
        ["chat", *LOCAL_MODEL],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_the_commands_that_write_exit_1_saying_why_before_any_file_is_created(nobody, shelf, args):
    before = shelf.files()
    with shelf.read_only():
        code, output = as_nobody(nobody, play.command, str(shelf.ledger), *args)
        assert shelf.files() == before

    assert code == 1, output
    assert "is read-only here: this user may not write" in " ".join(output.split())


def test_no_ledger_is_created_in_a_directory_this_user_may_not_write(nobody, shelf):
    before = shelf.files()
    with shelf.read_only(UNWRITABLE["directory"]):
        with pytest.raises(LedgerReadOnlyError, match=r"no ledger at .*creates none.*directory"):
            as_nobody(nobody, play.create, str(shelf.directory / "new.db"))
        assert shelf.files() == before


def test_a_writer_at_work_is_read_through_its_wal_files_which_are_left_as_they_were(nobody, shelf):
    with Ledger.open(shelf.ledger) as writer:
        created = writer.create_conversation(title="committed by a writer at work").id
        during = shelf.files()
        assert {"ledger.db-wal", "ledger.db-shm"} <= set(during.names)
        assert during.contents["ledger.db-wal"][0] != hashlib.sha256(b"").hexdigest()

        with shelf.read_only():
            reads = as_nobody(nobody, play.conversation_titles, str(shelf.ledger))

        assert shelf.files() == during
    assert reads["read_only"] is True
    assert reads["titles"][created] == "committed by a writer at work"


def test_commits_left_in_a_wal_file_without_its_shm_file_are_refused_never_missed(nobody, shelf):
    with Ledger.open(shelf.ledger) as writer:
        writer.create_conversation(title="only in the -wal file")
        wal = Path(f"{shelf.ledger}-wal").read_bytes()
        database = shelf.ledger.read_bytes()
    # What a process killed before its checkpoint leaves, its -shm file since removed.
    shelf.ledger.write_bytes(database)
    Path(f"{shelf.ledger}-wal").write_bytes(wal)
    before = shelf.files()

    with shelf.read_only():
        with pytest.raises(LedgerOpenError, match=r"ledger.db-wal file may hold committed"):
            as_nobody(nobody, play.conversation_titles, str(shelf.ledger))
        assert shelf.files() == before


# --- read_only=True, on a ledger this user may write ------------------------------------------


@pytest.fixture
def writable(tmp_path: Path, source: Source) -> Path:
    """A copy of the source ledger, alone in a directory this user may write."""
    path = tmp_path / "shelf" / "ledger.db"
    path.parent.mkdir()
    path.write_bytes(source.data)
    return path


def test_read_only_true_reads_everything_and_leaves_the_directory_as_it_was(writable, source):
    before = Files.of(writable.parent)

    with Ledger.open(writable, read_only=True) as ledger:
        assert ledger.read_only
        reads = play.read_everything_with(ledger, source.ids)
        assert Files.of(writable.parent) == before

    assert Files.of(writable.parent) == before
    assert reads == source.reads


def test_read_only_true_refuses_every_write_before_touching_the_file(writable, source):
    before = Files.of(writable.parent)

    with Ledger.open(writable, read_only=True) as ledger:
        agent = (
            AgentBuilder()
            .with_llm(ScriptedLLM([InferenceResponse(content="Noted.")]))
            .with_ledger(ledger)
            .build()
        )
        writes = {
            "run": lambda: agent.run("Remember this."),
            "run on a conversation": lambda: agent.run("And this.", source.ids["trip"]),
            "resume": lambda: agent.resume(source.ids["stale_run"], stale_after=0),
            "recover": lambda: ledger.recover(stale_after=0),
            "create_conversation": lambda: ledger.create_conversation(title="new"),
            "check_writable": ledger.check_writable,
        }
        for name, write in writes.items():
            with pytest.raises(LedgerReadOnlyError, match="opened with read_only=True") as raised:
                write()
            assert "Nothing was written" in str(raised.value), name
        assert Files.of(writable.parent) == before
        assert ledger.runs() and len(ledger.stale_runs(stale_after=0)) == 1

    assert Files.of(writable.parent) == before


def test_ledger_read_only_error_is_a_ledger_error_exported_with_the_error_tree():
    assert agentledger.errors.LedgerReadOnlyError is LedgerReadOnlyError
    assert "LedgerReadOnlyError" in agentledger.errors.__all__
    assert issubclass(LedgerReadOnlyError, LedgerError)
    assert not issubclass(LedgerReadOnlyError, LedgerOpenError)
    assert "LedgerReadOnlyError" in agentledger.errors.__doc__


def test_a_writable_handle_says_it_may_write(writable):
    with Ledger.open(writable) as ledger:
        assert not ledger.read_only
        ledger.check_writable()


def test_read_only_true_on_a_missing_file_creates_nothing(tmp_path):
    with pytest.raises(LedgerReadOnlyError, match=r"no ledger at .*creates none"):
        Ledger.open(tmp_path / "missing.db", read_only=True)

    assert list(tmp_path.iterdir()) == []


def test_read_only_true_refuses_to_upgrade_an_older_ledger_and_leaves_it_as_it_was(tmp_path):
    path = tmp_path / "ledger.db"
    migrate.upgrade(path, "0004")
    before = Files.of(tmp_path)

    with pytest.raises(LedgerReadOnlyError, match=r"upgrading the ledger to the newest schema"):
        Ledger.open(path, read_only=True)
    with pytest.raises(SchemaVersionError, match="agentledger db upgrade"):
        Ledger.open(path, read_only=True, migrate=False)

    assert Files.of(tmp_path) == before
    assert migrate.current(path) == "0004"


def test_verify_of_a_read_only_handle_finds_a_damaged_full_text_index(writable):
    with contextlib.closing(sqlite3.connect(writable)) as conn, conn:
        conn.execute(
            "UPDATE conversation_messages_fts_content SET c0 = 'text the index never saw' "
            "WHERE id = (SELECT min(id) FROM conversation_messages_fts_content)"
        )
    before = Files.of(writable.parent)

    with Ledger.open(writable, read_only=True) as ledger:
        read_only_problems = ledger.verify()
    after = Files.of(writable.parent)
    with Ledger.open(writable) as ledger:
        writable_problems = ledger.verify()

    assert after == before
    assert read_only_problems == writable_problems
    assert [p for p in read_only_problems if p.startswith("the full-text index: ")]


def test_analytics_leaves_no_wal_or_shm_file_behind_it(writable):
    before = Files.of(writable.parent)

    with Analytics.open(writable) as analytics:
        assert analytics.run_rollup().fetchall()

    assert Files.of(writable.parent) == before


def test_analytics_leaves_the_wal_files_of_a_writer_at_work_to_it(writable):
    with Ledger.open(writable) as writer:
        writer.create_conversation(title="committed by a writer at work")
        during = Files.of(writable.parent).names

        with Analytics.open(writable) as analytics:
            titles = analytics.sql("SELECT title FROM ledger.conversations").fetchall()

        assert Files.of(writable.parent).names == during
    assert ("committed by a writer at work",) in titles


# --- the command line's --read-only -----------------------------------------------------------


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize(
    "args",
    [
        ["db", "verify"],
        ["conversations"],
        ["runs"],
        ["show", "{trip}"],
        ["trace", "{trip_run}"],
        ["search", SEARCH_WORD],
        ["analytics", "report"],
        ["export", "parquet", "{export}"],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_read_only_commands_work_under_the_read_only_option(writable, source, tmp_path, args):
    fields = {**source.ids, "export": str(tmp_path / "export")}
    before = Files.of(writable.parent)

    code, output = invoke("--db", str(writable), "--read-only", *(a.format(**fields) for a in args))

    assert code == 0, output
    assert Files.of(writable.parent) == before


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["db", "upgrade"], "`agentledger db upgrade` writes the ledger, and --read-only"),
        (["db", "downgrade", "0004"], "`agentledger db downgrade` writes the ledger"),
        (["recover"], "recovering stale runs: the ledger"),
        (["run", "Remember this.", *LOCAL_MODEL], "`agentledger run` writes the ledger"),
        (["chat", *LOCAL_MODEL], "`agentledger chat` writes the ledger"),
    ],
    ids=lambda value: " ".join(value[:2]) if isinstance(value, list) else None,
)
def test_commands_that_write_are_refused_under_the_read_only_option(writable, args, expected):
    before = Files.of(writable.parent)

    code, output = invoke("--db", str(writable), "--read-only", *args)

    assert code == 1, output
    assert expected in output
    assert Files.of(writable.parent) == before


# --- PostgreSQL ---------------------------------------------------------------------------------


@pytest.fixture
def pg_ledger(pg_url: str) -> dict[str, str]:
    with Ledger.open(pg_url) as ledger:
        ids = dict(zip(("stale", "stale_run"), begin_stale_run(ledger), strict=True))
    return {"url": pg_url, **ids}


def test_postgresql_read_only_reads_and_refuses_writes_in_a_read_only_session(pg_ledger):
    with Ledger.open(pg_ledger["url"], read_only=True) as ledger:
        assert ledger.read_only
        assert [r.id for r in ledger.stale_runs(stale_after=0)] == [pg_ledger["stale_run"]]
        assert ledger.verify() == []
        agent = (
            AgentBuilder()
            .with_llm(ScriptedLLM([InferenceResponse(content="Noted.")]))
            .with_ledger(ledger)
            .build()
        )
        with pytest.raises(LedgerReadOnlyError, match="opened with read_only=True"):
            agent.run("Remember this.")
        with pytest.raises(LedgerReadOnlyError, match="opened with read_only=True"):
            ledger.recover(stale_after=0)
        # The server refuses too: the session's transactions are read only.
        with ledger.engine.connect() as conn:
            assert conn.execute(text("SHOW default_transaction_read_only")).scalar() == "on"
            with pytest.raises(DBAPIError, match="read-only transaction"):
                conn.execute(text("DELETE FROM agent_runs"))

    with Database(pg_ledger["url"]) as database:
        assert database.count("agent_runs") == 1
        assert database.count("conversations") == 1


def test_postgresql_refusing_a_write_raises_ledger_read_only_error_not_unavailable(pg_ledger):
    name = make_url(pg_ledger["url"]).database
    with Database(pg_ledger["url"]) as database, database.engine.begin() as conn:
        conn.execute(text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))

    with Ledger.open(pg_ledger["url"]) as ledger:  # a standby, or a database made read only
        assert not ledger.read_only
        agent = (
            AgentBuilder()
            .with_llm(ScriptedLLM([InferenceResponse(content="Noted.")]))
            .with_ledger(ledger)
            .build()
        )
        with pytest.raises(LedgerReadOnlyError, match="the database refused to write") as raised:
            agent.run("Remember this.")
    assert "resume" not in str(raised.value)
    assert "read_only=True" in str(raised.value)


@pytest.mark.parametrize("name", ["a ledger #1.db", "grand livre 100%.db", "carnet-été.db"])
def test_read_only_true_opens_a_file_whose_name_a_uri_must_escape(tmp_path, source, name):
    path = tmp_path / name
    path.write_bytes(source.data)

    with Ledger.open(path, read_only=True) as ledger:
        assert len(ledger.conversations()) == 9  # record_representative_runs's, frameworks' too
        assert ledger.verify() == []

    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_analytics_of_a_file_that_is_no_ledger_this_user_may_not_write_says_so(nobody, shelf):
    shelf.ledger.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4080)
    with shelf.read_only(), pytest.raises(LedgerOpenError, match="cannot read the ledger at"):
        as_nobody(nobody, play.analyze, str(shelf.ledger), str(shelf.spare / "api"))
