"""What the ledger does with input it cannot use: corrupt files, directories, missing places,
URLs it does not support, servers that are not there, ids it does not hold. (A ledger this
user may not write opens read-only: ``test_read_only.py``.)

Every refusal is one of the library's own errors with a message that names the place, never a
raw driver exception and never a silent success; and a refusal writes nothing."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentledger import AgentBuilder, NotFoundError
from agentledger.errors import (
    ConfigurationError,
    LedgerOpenError,
    SchemaVersionError,
    UsageError,
)
from agentledger.ledger import Ledger
from agentledger.llm import InferenceResponse, ScriptedLLM
from support.databases import BACKENDS, fresh_database
from support.migration_harness import (
    UNKNOWN_ID,
    Database,
    record_representative_runs,
)


def as_given(path: Path, form: str) -> Any:
    """``path`` the ways a user may give it."""
    return {"a Path": path, "a str": str(path), "a sqlite:/// URL": f"sqlite:///{path}"}[form]


FORMS = ["a Path", "a str", "a sqlite:/// URL"]


def siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


@dataclass(frozen=True)
class RealLedger:
    """The bytes of a real SQLite ledger holding a few recorded runs, and where one of its
    tables starts."""

    data: bytes
    page_size: int
    step_executions_root_page: int


@pytest.fixture(scope="module")
def real_ledger(tmp_path_factory: pytest.TempPathFactory) -> RealLedger:
    path = tmp_path_factory.mktemp("real") / "ledger.db"
    with Ledger.open(path) as ledger:
        record_representative_runs(ledger)
    assert not Path(f"{path}-wal").exists()
    data = path.read_bytes()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'step_executions'"
        ).fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    return RealLedger(data, size, root)


# --- corrupt files ------------------------------------------------------------------------------


def _flip(data: bytearray, start: int, stop: int) -> None:
    for i in range(start, stop):
        data[i] ^= 0xFF


def _random_bytes(_ledger: RealLedger) -> bytes:
    return random.Random(7).randbytes(8 * 4096)


def _middle_third_flipped(ledger: RealLedger) -> bytes:
    data = bytearray(ledger.data)
    _flip(data, len(data) // 3, 2 * len(data) // 3)
    return bytes(data)


def _middle_of_every_page_flipped(ledger: RealLedger) -> bytes:
    data = bytearray(ledger.data)
    size = ledger.page_size
    for page in range(len(data) // size):
        middle = page * size + size // 2
        _flip(data, middle, middle + 64)
    return bytes(data)


def _a_table_root_page_damaged(ledger: RealLedger) -> bytes:
    """The b-tree header of ``step_executions``' root page overwritten: SQLite only notices
    when something reads that table."""
    data = bytearray(ledger.data)
    start = (ledger.step_executions_root_page - 1) * ledger.page_size
    _flip(data, start, start + 8)
    return bytes(data)


def _cut_in_half(ledger: RealLedger) -> bytes:
    return ledger.data[: len(ledger.data) // 2]


def _a_few_bytes(_ledger: RealLedger) -> bytes:
    return b"ledger?"


def _a_csv_file(_ledger: RealLedger) -> bytes:
    return b"id,name\n1,alice\n2,bob\n" * 20


CORRUPTIONS: list[tuple[str, Callable[[RealLedger], bytes]]] = [
    ("random bytes", _random_bytes),
    ("a real ledger with its middle third flipped", _middle_third_flipped),
    ("a real ledger with the middle of every page flipped", _middle_of_every_page_flipped),
    ("a real ledger with a table's root page damaged", _a_table_root_page_damaged),
    ("a real ledger cut in half", _cut_in_half),
    ("a file of a few bytes", _a_few_bytes),
    ("a CSV file", _a_csv_file),
]


@pytest.mark.parametrize(("what", "corrupt"), CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_opening_a_corrupt_file_raises_ledger_open_error_naming_it_and_leaves_it_alone(
    tmp_path, real_ledger, what, corrupt
):
    path = tmp_path / "ledger.db"
    data = corrupt(real_ledger)
    path.write_bytes(data)

    with pytest.raises(LedgerOpenError) as raised:
        Ledger.open(path).close()

    assert str(path) in str(raised.value), f"the error does not name the file: {raised.value}"
    assert path.read_bytes() == data
    assert siblings(path) == ["ledger.db"]


@pytest.mark.parametrize("form", FORMS)
def test_a_path_that_is_a_directory_is_refused_as_a_directory(tmp_path, form):
    directory = tmp_path / "ledgers"
    directory.mkdir()

    with pytest.raises(LedgerOpenError, match="is a directory") as raised:
        Ledger.open(as_given(directory, form))

    assert str(directory) in str(raised.value)
    assert list(directory.iterdir()) == []
    assert siblings(directory) == ["ledgers"]


@pytest.mark.parametrize("form", FORMS)
def test_a_path_in_a_missing_directory_is_refused_and_no_directory_is_made(tmp_path, form):
    missing = tmp_path / "nowhere" / "deeper"

    with pytest.raises(LedgerOpenError, match="does not exist") as raised:
        Ledger.open(as_given(missing / "ledger.db", form))

    assert str(missing) in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_opening_a_missing_file_without_migrating_refuses_and_creates_no_file(tmp_path):
    path = tmp_path / "ledger.db"

    with pytest.raises(SchemaVersionError, match="agentledger db upgrade"):
        Ledger.open(path, migrate=False)

    assert list(tmp_path.iterdir()) == [], "a refused open left a file behind"


@pytest.mark.parametrize("setting", ["OFF", "full", "EXTRA", ""])
def test_a_synchronous_setting_the_ledger_does_not_know_is_refused_before_any_file(
    tmp_path, setting
):
    # SQLite would take OFF (no sync at all) or a word it does not know without a word.
    path = tmp_path / "ledger.db"

    with pytest.raises(ConfigurationError) as raised:
        Ledger.open(path, synchronous=setting)

    message = str(raised.value)
    assert repr(setting) in message and "'FULL'" in message and "'NORMAL'" in message
    assert list(tmp_path.iterdir()) == [], "a refused open left a file behind"


# --- URLs and servers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "mysql://agent:s3cret@db.example.com/ledger",
        "mysql+pymysql://agent:s3cret@localhost/ledger",
        "mongodb://agent:s3cret@localhost/ledger",
        "http://agent:s3cret@example.com/ledger.db",
        "oracle://agent:s3cret@localhost/ledger",
    ],
)
def test_an_unsupported_database_url_raises_configuration_error_without_the_password(url):
    with pytest.raises(ConfigurationError) as raised:
        Ledger.open(url)
    message = str(raised.value)
    assert "s3cret" not in message
    assert "unsupported" in message and "postgresql://" in message


def test_a_postgresql_server_that_is_not_there_raises_ledger_open_error_without_the_password():
    url = "postgresql://agent:s3cret@127.0.0.1:1/ledger"  # nothing listens on port 1
    with pytest.raises(LedgerOpenError) as raised:
        Ledger.open(url)
    message = str(raised.value)
    assert "s3cret" not in message
    assert "127.0.0.1" in message


def test_a_postgresql_database_that_does_not_exist_raises_ledger_open_error_naming_it(pg_server):
    url = pg_server.url("agentledger_no_such_database")
    with pytest.raises(LedgerOpenError, match="agentledger_no_such_database"):
        Ledger.open(url)


# --- ids the ledger does not hold -------------------------------------------------------------

UNKNOWN = UNKNOWN_ID


def _run_on_unknown_conversation(ledger: Ledger) -> object:
    llm = ScriptedLLM([InferenceResponse(content="never sent")])
    agent = AgentBuilder().with_llm(llm).with_ledger(ledger).build()
    return agent.run("Hello?", UNKNOWN)


def _resume_unknown_run(ledger: Ledger) -> object:
    llm = ScriptedLLM([InferenceResponse(content="never sent")])
    agent = AgentBuilder().with_llm(llm).with_ledger(ledger).build()
    return agent.resume(UNKNOWN)


LOOKUPS: list[tuple[str, Callable[[Ledger], object]]] = [
    ("conversation", lambda ledger: ledger.conversation(UNKNOWN)),
    ("messages", lambda ledger: ledger.messages(UNKNOWN)),
    ("messages of the summary section", lambda ledger: ledger.messages(UNKNOWN, "summary")),
    ("runs of a conversation", lambda ledger: ledger.runs(UNKNOWN)),
    ("load_conversation", lambda ledger: ledger.recorder.load_conversation(UNKNOWN)),
    ("run", lambda ledger: ledger.run(UNKNOWN)),
    ("steps", lambda ledger: ledger.steps(UNKNOWN)),
    ("tool_executions", lambda ledger: ledger.tool_executions(UNKNOWN)),
    ("trace_messages", lambda ledger: ledger.trace_messages(UNKNOWN)),
    ("buffer", lambda ledger: ledger.buffer(UNKNOWN)),
    ("claim_run", lambda ledger: ledger.recorder.claim_run(UNKNOWN)),
    ("Agent.run on an unknown conversation", _run_on_unknown_conversation),
    ("Agent.resume of an unknown run", _resume_unknown_run),
]


@pytest.fixture(
    scope="module",
    params=BACKENDS,
)
def busy_ledger(request: pytest.FixtureRequest) -> Iterator[str]:
    """A ledger holding finished, failed and stale runs, shared by the tests below (each checks
    that it wrote nothing); its URL."""
    with fresh_database(request.param, request) as url:
        with Ledger.open(url) as ledger:
            record_representative_runs(ledger)
        yield url


@pytest.mark.parametrize(("what", "look_up"), LOOKUPS, ids=[name for name, _ in LOOKUPS])
def test_an_unknown_id_raises_not_found_naming_it_and_writes_nothing(busy_ledger, what, look_up):
    with Database(busy_ledger) as database:
        before = database.snapshot()
    with Ledger.open(busy_ledger) as ledger:
        with pytest.raises(NotFoundError) as raised:
            look_up(ledger)
        assert UNKNOWN in str(raised.value)
    with Database(busy_ledger) as database:
        assert database.snapshot() == before


@pytest.mark.parametrize(
    ("module", "store", "framework"),
    [
        ("agentledger.integrations.langgraph", "LedgerSaver", "langgraph"),
        ("agentledger.integrations.openai_agents", "LedgerSession", "agents"),
        ("agentledger.integrations.pydantic_ai", "LedgerConversationStore", "pydantic_ai"),
        ("agentledger.integrations.adk", "LedgerSessionService", "google.adk"),
    ],
)
def test_a_frameworks_store_given_a_path_for_its_ledger_says_to_open_one(
    module: str, store: str, framework: str
) -> None:
    pytest.importorskip(framework)
    made = getattr(__import__(module, fromlist=[store]), store)
    with pytest.raises(UsageError) as raised:
        made("session-1", "ledger.db") if store == "LedgerSession" else made("ledger.db")
    assert str(raised.value) == (
        f"{store} takes a Ledger (agentledger.ledger.Ledger.open(url)), not str"
    )
