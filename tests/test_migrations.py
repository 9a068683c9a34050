"""The ledger's migrations: from nothing to the newest schema, revision by revision with data in
every table, a ledger written by hand at every revision upgraded whole and downgraded back, down
and up again, refusing a newer database, under concurrency, through Alembic's own command line,
and from an installed wheel. On SQLite and PostgreSQL alike."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url

import support.migration_harness as harness
from agentledger import AgentBuilder, ToolCall, tool
from agentledger.cli import cli
from agentledger.errors import SchemaVersionError
from agentledger.ledger import Ledger, TraceHit
from agentledger.ledger import tables as ledger_tables
from agentledger.llm import InferenceResponse, ScriptedLLM
from support import old_ledgers
from support.databases import SQLITE_UNLESS_SOAK, fresh_database
from support.migration_harness import Database, Rows
from support.sizes import SOAK

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
HEAD = harness.head()
PREVIOUS = harness.predecessor(HEAD)
OLDEST = harness.revisions()[0]
MODEL_TABLES = sorted(set(ledger_tables.metadata.tables) - harness.CHANGE_TABLES)
"""The tables that hold the ledger's data (not revision 0008's change bookkeeping)."""


def sqlite_file(url: str) -> Path | None:
    parsed = make_url(url)
    return Path(parsed.database) if parsed.get_backend_name() == "sqlite" else None


def search_objects(database: Database) -> set[str]:
    """The full-text search objects the migrations made."""
    if database.dialect == "sqlite":
        found = database.all_table_names()
        return {n for n in found if n in harness.FTS_PREFIXES}
    with database.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT indexname FROM pg_indexes "
            "WHERE tablename IN ('conversation_messages', 'tool_executions')"
        )
        return {n for (n,) in rows if n in harness.FTS_PREFIXES}


@contextlib.contextmanager
def statements() -> Iterator[list[str]]:
    """Every SQL statement any engine of this process executes meanwhile."""
    seen: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        seen.append(" ".join(statement.split()))

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", record)


def creates_of_conversations(seen: list[str]) -> int:
    return sum(s.upper().count("CREATE TABLE CONVERSATIONS ") for s in seen)


@pytest.fixture(scope="module")
def representative_rows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rows]:
    with harness.representative_source(tmp_path_factory.mktemp("source")) as (rows, _ids):
        yield rows


# --- from nothing to the newest schema ----------------------------------------------------------


def test_the_migrations_form_one_line_of_revisions_ending_at_the_head():
    assert harness.revisions()[-1] == HEAD
    assert harness.predecessor(harness.revisions()[0]) is None
    assert len(harness.upgrade_steps()) == len(harness.revisions()) - 1


@pytest.mark.parametrize("how", ["Ledger.open", "agentledger db upgrade"])
def test_an_empty_database_is_upgraded_to_the_head_with_every_table(db_url, how):
    if how == "Ledger.open":
        Ledger.open(db_url).close()
    else:
        assert f"at revision {HEAD}" in harness.migrate(db_url, "head")
    with Database(db_url) as database:
        assert database.table_names() == MODEL_TABLES
        assert database.versions() == [HEAD]
        assert search_objects(database) == set(harness.FTS_PREFIXES)


# --- every revision keeps the rows of its predecessor -----------------------------------------


def test_the_representative_rows_fill_every_table_and_every_column(tmp_path):
    with harness.representative_source(tmp_path) as (rows, ids):
        assert sorted(rows) == MODEL_TABLES
        for table in ledger_tables.metadata.sorted_tables:
            if table.name in harness.CHANGE_TABLES:
                continue
            for column in table.columns:
                if column.name == harness.CHANGE_COLUMN:
                    continue
                values = [r[column.name] for r in rows[table.name]]
                assert any(v is not None for v in values), f"{table.name}.{column.name} is empty"
        statuses = {r["id"]: r["status"] for r in rows["agent_runs"]}
        assert statuses[ids["trip_run"]] == "completed"
        assert statuses[ids["failed_run"]] == "failed"
        assert statuses[ids["stale_run"]] == "running"


UPGRADES_ON_POSTGRESQL = harness.upgrade_steps() if SOAK else harness.upgrade_steps()[-2:]
"""The upgrades played on PostgreSQL too: the two newest in ``make test`` (an older revision's
upgrade was played there when it was new, and its code does not change), every one in ``make
soak``. SQLite plays every upgrade in both."""
EVERY_UPGRADE = [
    *(pytest.param("sqlite", p, r, id=f"sqlite-{p}->{r}") for p, r in harness.upgrade_steps()),
    *(
        pytest.param("postgresql", p, r, id=f"postgresql-{p}->{r}", marks=pytest.mark.postgresql)
        for p, r in UPGRADES_ON_POSTGRESQL
    ),
]


@pytest.mark.parametrize(("backend", "previous", "revision"), EVERY_UPGRADE)
def test_upgrading_to_a_revision_keeps_every_row_its_predecessor_held(
    backend, previous, revision, representative_rows, request, tmp_path
):
    with fresh_database(backend, request, tmp_path) as url:
        harness.check_upgrade_keeps_rows(url, previous, revision, representative_rows)


# --- a ledger written at any revision reads whole at the newest ---------------------------------

ON_POSTGRESQL = harness.revisions() if SOAK else [OLDEST, PREVIOUS]
"""The revisions whose ledger is upgraded on PostgreSQL too: the oldest and the one before the
newest in ``make test``, every one under ``AGENTLEDGER_SOAK=1`` (``make soak``)."""
EVERY_REVISION = [
    *(pytest.param("sqlite", r, id=f"sqlite-{r}") for r in harness.revisions()),
    *(
        pytest.param("postgresql", r, id=f"postgresql-{r}", marks=pytest.mark.postgresql)
        for r in ON_POSTGRESQL
    ),
]


def stored(database: Database) -> Rows:
    """Every row as stored (but the change stamps), JSON decoded: a revision that writes a
    JSON value back writes the same value, in the text its own engine writes."""
    snapshot = database.snapshot()
    for rows in snapshot.values():
        for row in rows:
            for name in old_ledgers.JSON_COLUMNS & row.keys():
                if isinstance(row[name], str):
                    row[name] = json.loads(row[name])
        rows.sort(key=lambda row: str(row["id"]))
    return snapshot


@pytest.mark.parametrize(("backend", "revision"), EVERY_REVISION)
def test_a_ledger_written_at_any_revision_reads_whole_at_the_head_and_downgrades_back(
    backend, revision, request, tmp_path
):
    with fresh_database(backend, request, tmp_path) as url:
        harness.migrate(url, revision)
        old_ledgers.write(harness.sqlalchemy_url(url), old_ledgers.ledger_at(revision))
        with Database(url) as database:
            written = stored(database)

        harness.migrate(url, "head")
        with Ledger.open(url, migrate=False) as ledger:
            assert ledger.verify() == []
            reads_back_the_story(ledger, revision)
        with Database(url) as database:
            sealed = {
                row["id"]: row["checksum"]
                for rows in database.snapshot().values()
                for row in rows
                if "checksum" in row
            }
        assert sealed == old_ledgers.checksums_after_upgrade(revision)

        harness.migrate(url, revision, direction="downgrade")
        with Database(url) as database:
            assert database.versions() == [revision]
            assert stored(database) == written
        if revision == OLDEST:
            harness.migrate(url, "base", direction="downgrade")
            with Database(url) as database:
                assert (database.table_names(), database.versions()) == ([], [])


def reads_back_the_story(ledger: Ledger, revision: str) -> None:
    """What the public API reads of the rows ``old_ledgers`` wrote at ``revision``."""
    story = old_ledgers
    conversations = {story.A, story.B}
    conversations |= {story.C} if revision >= "0010" else set()
    conversations |= {story.D} if revision >= "0012" else set()
    assert {c.id for c in ledger.conversations()} == conversations
    assert [m.content for m in ledger.messages(story.A)] == [story.QUESTION, story.ANSWER]
    *_, answered = ledger.model_context(story.A)  # a cold load: the stored values checked
    assert (answered.content, answered.metadata) == (story.ANSWER, story.ANSWER_METADATA)
    (run,) = ledger.runs(story.A)
    assert (run.id, run.status, run.cost_usd) == (story.R1, "completed", 0.0021)
    assert (run.input_tokens, run.cache_write_1h_tokens) == (270, 64 if revision >= "0007" else 0)
    first, answer = ledger.steps(story.R1)
    (call,) = first.step.tool_executions
    assert (call.tool_call.name, call.tool_call.arguments) == ("get_weather", {"city": "Lisbon"})
    assert call.result == story.LISBON_WEATHER
    assert answer.step.assistant_message is not None
    assert answer.step.assistant_message.content == story.ANSWER
    assert [m.content for m in ledger.buffer(story.R2)] == ["Looking it up.", story.PORTO_WEATHER]
    assert [r.id for r in ledger.stale_runs(stale_after=0)] == [story.R2]
    assert ledger.run(story.R2).partial_output == ("Porto is" if revision >= "0006" else None)
    masked = [c.id for c in ledger.compactions(story.A)]
    assert masked == ([story.K1] if revision >= "0004" else [])
    assert {h.message.content for h in ledger.search("Lisbon")} == {story.QUESTION, story.ANSWER}
    trace = [h for h in ledger.search("sunny", trace=True) if isinstance(h, TraceHit)]
    assert {h.tool_execution.result for h in trace} == {story.LISBON_WEATHER, story.PORTO_WEATHER}
    if revision >= "0010":
        assert ledger.conversation(story.C).owner_id == "ana"
    if revision >= "0012":
        (cut,) = ledger.steps(story.R4)
        assert cut.step.interrupted and cut.step.tool_executions[0].is_error


assert PREVIOUS is not None
ONLY_AT_HEAD = harness.CANNOT_HOLD.get(PREVIOUS, {})
"""What the previous revision cannot hold: a ledger holding it is not downgraded (below)."""


def test_downgrading_to_the_previous_revision_and_upgrading_again_loses_nothing(db_url):
    assert PREVIOUS is not None
    with Ledger.open(db_url) as ledger:
        compactions = ledger_tables.context_compactions
        cannot = ONLY_AT_HEAD.get(compactions.name, ())
        ids = harness.record_representative_runs(
            ledger,
            compaction=len(cannot) < len(compactions.columns),
            forgetting=ledger_tables.forget_log.name not in ONLY_AT_HEAD,
            graph=ledger_tables.graph_checkpoints.name not in ONLY_AT_HEAD,
            stored=ledger_tables.stored_records.name not in ONLY_AT_HEAD,
            sessions=ledger_tables.adk_sessions.name not in ONLY_AT_HEAD,
        )
    with Database(db_url) as database:
        database.fill_empty_columns(skip=ONLY_AT_HEAD)
        assert database.empty_columns() == ONLY_AT_HEAD
        columns = database.columns()
        before = database.snapshot(columns)

    harness.migrate(db_url, PREVIOUS, direction="downgrade")
    rewritten = harness.rewritten_between(PREVIOUS, HEAD)
    with Database(db_url) as database:
        assert database.versions() == [PREVIOUS]
        kept = {
            t: [c for c in names if c in columns[t] and (t, c) not in rewritten]
            for t, names in database.columns().items()
        }
        assert database.snapshot(kept) == harness.restrict(before, kept)

    harness.migrate(db_url, "head")
    with Database(db_url) as database:
        assert database.versions() == [HEAD]
        assert database.snapshot() == before
        assert search_objects(database) == set(harness.FTS_PREFIXES)

    with Ledger.open(db_url, migrate=False) as ledger:
        hits = ledger.search(harness.SEARCH_WORD)
        found = {(h.conversation_id, h.message.content) for h in hits}
        answers = {
            (m_conversation, m.content)
            for m_conversation in (ids["trip"], ids["inline"])
            for m in ledger.messages(m_conversation)
            if harness.SEARCH_WORD in m.content
        }
        assert len(answers) == 3
        assert found == answers
        porto = [h for h in ledger.search("Porto") if h.conversation_id != ids.get("compacted")]
        assert [h.message.content for h in porto] == [harness.STALE_USER_TEXT]


@pytest.mark.parametrize(
    ("record", "target", "said"),
    [
        pytest.param(
            harness.record_compactions,
            "0003",
            [
                "cannot downgrade below revision 0004",
                "2 context compaction event(s) and 2 message(s)",
                "Nothing was changed",
            ],
            id="compactions",
        ),
        pytest.param(
            harness.record_stored_conversations,
            "0014",
            ["holds 2 stored conversation record(s)", "agentledger forget"],
            id="stored conversations",
        ),
        pytest.param(
            harness.record_adk_session,
            "0015",
            ["adk_sessions holds 1 sessions", "delete_session"],
            id="adk sessions",
        ),
    ],
)
def test_a_ledger_holding_what_an_older_revision_cannot_is_not_downgraded_and_left_untouched(
    db_url, record, target, said
):
    with Ledger.open(db_url) as ledger:
        record(ledger)
    with Database(db_url) as database:
        before = database.snapshot()

    result = CliRunner().invoke(cli, ["--db", db_url, "db", "downgrade", target])

    assert result.exit_code == 1
    assert all(words in result.output for words in said), result.output
    with Database(db_url) as database:
        assert database.versions() == [HEAD]
        assert database.snapshot() == before


def test_search_finds_messages_written_after_a_downgrade_and_upgrade(db_url):
    assert PREVIOUS is not None
    Ledger.open(db_url).close()
    harness.migrate(db_url, PREVIOUS, direction="downgrade")
    harness.migrate(db_url, "head")
    with Ledger.open(db_url, migrate=False) as ledger:
        llm = ScriptedLLM([InferenceResponse(content="Quinces ripen in autumn.")])
        agent = AgentBuilder().with_llm(llm).with_ledger(ledger).build()
        result = agent.run("When do quinces ripen?")
        hits = ledger.search("quinces")
        assert {h.message.content for h in hits} == {
            "When do quinces ripen?",
            "Quinces ripen in autumn.",
        }
        assert {h.conversation_id for h in hits} == {result.conversation_id}


def test_an_interrupted_step_is_kept_by_a_downgrade_to_0011_and_flagged_again_after(db_url):
    @tool
    def press_ctrl_c(city: str) -> str:
        """Stands for the user pressing Ctrl-C while a tool runs."""
        raise KeyboardInterrupt

    calls = [ToolCall(id="call_c", name="press_ctrl_c", arguments={"city": "Lisbon"})]
    llm = ScriptedLLM([InferenceResponse(content="Let me look.", tool_calls=calls)])
    with Ledger.open(db_url) as ledger:
        agent = AgentBuilder().with_llm(llm).with_ledger(ledger).with_tools([press_ctrl_c])
        with pytest.raises(KeyboardInterrupt):
            agent.build().run("Weather in Lisbon?")
    step_of = "SELECT decided_by, content, checksum FROM step_executions"

    harness.migrate(db_url, "0011", direction="downgrade")
    with Database(db_url) as database, database.engine.connect() as conn:
        (kept,) = conn.exec_driver_sql(step_of).all()
    assert (kept.decided_by, kept.content, kept.checksum) == ("interrupted", "Let me look.", None)

    harness.migrate(db_url, "head")
    with Ledger.open(db_url, migrate=False) as ledger:
        (run,) = ledger.runs()
        (step,) = ledger.steps(run.id)
        assert step.step.interrupted and step.step.tool_executions[0].is_error
        assert ledger.verify() == []


# --- refusing what this code cannot handle ------------------------------------------------------


@pytest.mark.parametrize("migrate", [True, False], ids=["migrate", "no-migrate"])
def test_a_database_from_a_newer_agentledger_is_refused_and_left_untouched(db_url, migrate):
    with Ledger.open(db_url) as ledger:
        harness.record_representative_runs(ledger)
    with Database(db_url) as database, database.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {harness.VERSION_TABLE} SET version_num = '9999'")
    with Database(db_url) as database:
        before = database.snapshot()
    path = sqlite_file(db_url)
    file_before = path.read_bytes() if path else None

    with pytest.raises(SchemaVersionError) as raised:
        Ledger.open(db_url, migrate=migrate)

    message = str(raised.value)
    assert "9999" in message and repr(HEAD) in message
    with Database(db_url) as database:
        assert database.versions() == ["9999"]
        assert database.snapshot() == before
    if path is not None:
        assert path.read_bytes() == file_before


@pytest.mark.parametrize("at", ["the previous revision", "no ledger schema yet"])
def test_opening_an_outdated_database_without_migrating_says_to_run_db_upgrade(db_url, at):
    if at == "the previous revision":
        assert PREVIOUS is not None
        harness.migrate(db_url, PREVIOUS)
    else:  # a database an application already uses for tables of its own
        with Database(db_url) as database, database.engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE application_table (id INTEGER PRIMARY KEY)")
    with Database(db_url) as database:
        before = database.all_table_names()

    with pytest.raises(SchemaVersionError, match="agentledger db upgrade"):
        Ledger.open(db_url, migrate=False)

    with Database(db_url) as database:
        assert database.all_table_names() == before
        if at == "the previous revision":
            assert database.versions() == [PREVIOUS]


# --- concurrency ------------------------------------------------------------------------------


def test_threads_opening_a_fresh_database_at_once_all_succeed_and_migrate_it_once(db_url):
    openers = 4
    barrier = threading.Barrier(openers)
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            barrier.wait(timeout=10)
            Ledger.open(db_url).close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    with statements() as seen:
        threads = [threading.Thread(target=open_it) for _ in range(openers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert errors == []
    assert creates_of_conversations(seen) == 1
    with Database(db_url) as database:
        assert database.versions() == [HEAD]
        assert database.table_names() == MODEL_TABLES


_OPENER = """
import json, pathlib, sys, time
from sqlalchemy import Engine, event
seen = []
event.listen(Engine, "before_cursor_execute", lambda c, cur, s, *a: seen.append(s))
from agentledger.ledger import Ledger
print("ready", flush=True)
go = pathlib.Path(sys.argv[2])
while not go.exists():
    time.sleep(0.002)
Ledger.open(sys.argv[1]).close()
print(json.dumps(seen))
"""


def test_processes_opening_a_fresh_sqlite_database_at_once_all_succeed_and_migrate_it_once(
    tmp_path,
):
    db, go = tmp_path / "ledger.db", tmp_path / "go"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, str(db), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for _ in range(3)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        go.touch()
        outcomes = [process.communicate(timeout=60) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for process, (_out, err) in zip(processes, outcomes, strict=True):
        assert process.returncode == 0, err
    seen = [s for out, _ in outcomes for s in json.loads(out)]
    assert creates_of_conversations([" ".join(s.split()) for s in seen]) == 1
    with Database(db) as database:
        assert database.versions() == [HEAD]
        assert database.table_names() == MODEL_TABLES


# --- Alembic's own command line, from a checkout ----------------------------------------------


def _alembic(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTLEDGER_DB": db}
    return subprocess.run(
        [str(VENV_BIN / "alembic"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@SQLITE_UNLESS_SOAK  # PostgreSQL's migrations are run through Alembic by every other test here
def test_plain_alembic_from_the_repository_root_migrates_a_database_the_ledger_accepts(db_url):
    path = sqlite_file(db_url)
    db = str(path) if path is not None else db_url  # a plain path, as a user would give it

    upgraded = _alembic("upgrade", "head", db=db)
    assert upgraded.returncode == 0, upgraded.stderr

    with Ledger.open(db_url, migrate=False) as ledger:
        assert ledger.conversations() == []
    with Database(db_url) as database:
        assert database.versions() == [HEAD]
    current = _alembic("current", db=db)
    assert current.returncode == 0, current.stderr
    assert f"{HEAD} (head)" in current.stdout
    checked = _alembic("check", db=db)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "No new upgrade operations detected" in checked.stdout + checked.stderr
