"""The ``agentledger`` command line over a ledger a scripted agent filled: listing, showing,
tracing, searching, recovering, and the ``db`` commands that migrate it. Through click's
``CliRunner`` on both backends, and as the installed console script in a real process."""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

import support.migration_harness as harness
from agentledger import AgentBuilder, ToolCall, __version__, tool
from agentledger.ledger import Ledger
from agentledger.llm import InferenceResponse, ScriptedLLM
from support.cli import (
    ANSWER,
    QUESTION,
    Recorded,
    console,
    flat,
    get_weather,
    invoke,
    ok,
    record_a_run,
    record_a_run_and_a_stale_one,
)
from support.databases import BACKENDS, fresh_database
from support.migration_harness import Database

ROOT = Path(__file__).resolve().parents[1]
HEAD = harness.head()
PREVIOUS = harness.predecessor(HEAD)


@pytest.fixture(autouse=True)
def no_connection_left_open() -> Iterator[None]:
    """Connections a command forgot to close are reported by the test that ran it: the garbage
    collector runs over what the test made. What existed before it is frozen out of that
    collection (``gc.freeze``): a full collection over the heap of a whole session took up to
    seconds a test."""
    gc.freeze()
    try:
        yield
        gc.collect()
    finally:
        gc.unfreeze()


@pytest.fixture
def recorded(db_url: str) -> Recorded:
    """A ledger of its own holding one finished run, for a test that changes it."""
    return record_a_run(db_url)


@pytest.fixture(
    scope="module",
    params=BACKENDS,
)
def shared(request: pytest.FixtureRequest) -> Iterator[Recorded]:
    """A ledger holding one finished run and one stale run, shared by tests that only read."""
    with fresh_database(request.param, request) as url:
        yield record_a_run_and_a_stale_one(url)


def sqlite_file(url: str) -> Path | None:
    parsed = make_url(url)
    return Path(parsed.database) if parsed.get_backend_name() == "sqlite" else None


# --- reading the ledger ---------------------------------------------------------------------------


def _rows(output: str) -> list[list[str]]:
    """The cells of a table's body rows (a cell wrapped over two lines gives two rows)."""
    return [
        [cell.strip() for cell in line.strip("│").split("│")]
        for line in output.splitlines()
        if line.startswith("│")
    ]


def test_conversations_lists_each_conversation_with_its_version_and_message_count(shared):
    output = ok("--db", shared.url, "conversations")
    listed = [row for row in _rows(output) if row[1] == "main"]
    # The finished run's question and answer (its tool trace is not the conversation), and the
    # stale run's question, which is stored as soon as the run begins.
    assert sorted((row[3], row[4]) for row in listed) == [("0", "1"), ("1", "2")]


def shown_id(output: str, full_id: str) -> str:
    """The prefix of ``full_id`` that ``output`` shows (the longest, when it shows several)."""
    shown = [word for word in re.findall(r"[0-9a-f-]{8,}", output) if full_id.startswith(word)]
    assert shown, f"{full_id} is not shown in:\n{output}"
    return max(shown, key=len)


@pytest.mark.parametrize(
    "command", [["conversations"], ["runs"], ["search", "marmalade"]], ids=" ".join
)
def test_listings_show_each_id_by_its_shortest_unique_prefix_of_at_least_8_characters(
    shared, command
):
    output = ok("--db", shared.url, *command)
    wanted = {
        "conversations": [
            (shared.conversation_id, "conversation"),
            (shared.stale_conversation_id, "conversation"),
        ],
        "runs": [(shared.run_id, "run"), (shared.stale_run_id, "run")],
        "search": [(shared.conversation_id, "conversation")],
    }[command[0]]
    with Ledger.open(shared.url) as ledger:
        for identifier, kind in wanted:
            assert identifier is not None
            expected = ledger.short_ids([identifier], of=kind)[identifier]
            # The first column's: ids are time-ordered, so another column (a run's
            # conversation, made in the same millisecond) may show a prefix of this id too.
            firsts = [r[0] for r in _rows(output) if r and r[0] and identifier.startswith(r[0])]
            assert firsts == [expected]
            assert len(expected) >= 8 and identifier not in output


def test_the_ids_runs_and_conversations_list_are_taken_by_trace_and_show(shared):
    run = shown_id(ok("--db", shared.url, "runs"), shared.run_id)
    assert "get_weather" in ok("--db", shared.url, "trace", run)
    conversation = shown_id(ok("--db", shared.url, "conversations"), shared.conversation_id)
    shown = ok("--db", shared.url, "show", conversation)
    assert shared.conversation_id in shown and QUESTION in shown
    listed = _rows(ok("--db", shared.url, "runs", "--conversation", conversation))
    assert [row[2] for row in listed if row[2]] == ["weather-bot"]
    found = ok("--db", shared.url, "search", "marmalade", "--conversation", conversation)
    assert "marmalade" in found


def test_an_ambiguous_prefix_exits_1_listing_the_ids_it_begins(recorded):
    with Ledger.open(recorded.url) as ledger:
        for n in (1, 2):
            ledger.create_conversation(conversation_id=f"samesame-{n}")
    for command in (["show", "samesame"], ["runs", "--conversation", "samesame"]):
        result = invoke("--db", recorded.url, *command)
        assert result.exit_code == 1, result.output
        said = flat(result.output)
        assert "'samesame' begins the ids of 2 conversations: samesame-1, samesame-2" in said
        assert "Traceback" not in result.output
    assert "samesame-1" in ok("--db", recorded.url, "show", "samesame-1")


def test_show_prints_the_question_and_the_answer_and_no_tool_output(shared):
    output = ok("--db", shared.url, "show", shared.conversation_id)
    assert shared.conversation_id in output
    assert QUESTION in output
    assert ANSWER in flat(output)
    assert "TOOL-OUTPUT" not in output
    assert "get_weather" not in output


def test_show_prints_the_conversation_as_the_user_saw_it_and_as_the_model_sees_it(db_url):
    with Ledger.open(db_url) as ledger:
        ids = harness.record_compactions(ledger)
    conversation = ids["compacted"]
    question = "Weather in Lisbon and in Porto, one after the other?"

    as_user = flat(ok("--db", db_url, "show", conversation))
    assert "as the user saw it" in as_user
    assert question in as_user and "(summarized)" in as_user
    assert "And now?" in as_user and "Still sunny." in as_user
    assert "Summary of the earlier conversation" not in as_user

    as_model = flat(ok("--db", db_url, "show", conversation, "--as", "model"))
    assert "as the model sees it" in as_model
    assert as_model.index("Summary of the earlier conversation") < as_model.index("And now?")
    assert question not in as_model and "(summarized)" not in as_model

    summaries = flat(ok("--db", db_url, "show", conversation, "--section", "summary"))
    assert "They asked about the weather in Lisbon and Porto." in summaries


def test_trace_prints_the_steps_the_tool_and_the_tokens(shared):
    output = flat(ok("--db", shared.url, "trace", shared.run_id))
    with Ledger.open(shared.url) as ledger:
        assert f"run {ledger.short_ids([shared.run_id], of='run')[shared.run_id]} " in output
    assert "weather-bot" in output and "completed" in output
    assert "step 0 · tool_use · 123 in / 45 out" in output
    assert "step 1 · response · 200 in / 17 out" in output
    assert "323 in / 62 out" in output  # the run's totals
    assert "get_weather" in output and "TOOL-OUTPUT" in output
    assert "answer: Paris is sunny" in output


@tool
def book_flight(to: str) -> str:
    """Books a flight; this one always fails, deep in its own code."""
    return _reserve_seat(to)


def _reserve_seat(to: str) -> str:
    raise ConnectionError(f"the airline refused {to}")


def test_trace_verbose_shows_where_a_failed_tool_raised_and_plain_trace_does_not(db_url):
    llm = ScriptedLLM(
        [
            InferenceResponse(
                tool_calls=[ToolCall(id="call_1", name="book_flight", arguments={"to": "Oslo"})]
            ),
            InferenceResponse(content="The airline said no."),
        ]
    )
    with Ledger.open(db_url) as ledger:
        agent = AgentBuilder().with_llm(llm).with_tools([book_flight]).with_ledger(ledger).build()
        run_id = agent.run("Book me a flight to Oslo.").run_id

    plain = ok("--db", db_url, "trace", run_id)
    assert "book_flight" in plain and "ConnectionError" in plain
    assert "Traceback" not in plain and "_reserve_seat" not in plain

    verbose = ok("--db", db_url, "trace", run_id, "--verbose")
    assert "Tool 'book_flight' raised ConnectionError: the airline refused Oslo" in flat(verbose)
    assert "Traceback (most recent call last):" in verbose
    assert "in _reserve_seat" in verbose
    assert 'raise ConnectionError(f"the airline refused {to}")' in verbose
    assert "answer: The airline said no." in flat(verbose)


def test_trace_of_a_run_in_progress_prints_its_recorded_step(shared):
    output = flat(ok("--db", shared.url, "trace", shared.stale_run_id or ""))
    assert "running" in output and "step 0 · tool_use" in output and "get_weather" in output


def test_trace_says_a_runs_status_once_and_counts_its_steps_in_good_english(shared, tmp_path):
    finished = flat(ok("--db", shared.url, "trace", shared.run_id))
    assert " · weather-bot · completed · 2 steps · " in finished
    assert "completed (completed)" not in finished
    assert "went on: 1 tool call " in finished and "tool call(s)" not in finished
    assert "stopped: the model answered" in finished and "tool_calls:" not in finished
    stale = flat(ok("--db", shared.url, "trace", shared.stale_run_id or ""))
    assert " · stale-planner · running · 1 step · " in stale

    url = str(tmp_path / "stopped.db")
    llm = ScriptedLLM(
        [
            InferenceResponse(tool_calls=[ToolCall(id="c1", name="get_weather", arguments={})]),
            InferenceResponse(content="Out of steps: it is sunny."),
        ]
    )
    with Ledger.open(url) as ledger:
        agent = (
            AgentBuilder()
            .with_llm(llm)
            .with_tools([get_weather])
            .with_max_steps(1)
            .with_ledger(ledger)
            .build()
        )
        run_id = agent.run("Weather?").run_id
    stopped = flat(ok("--db", url, "trace", run_id))
    assert " · stopped (steps_limit) · 2 steps · " in stopped
    assert "stopped: 1 of 1 steps (step limit)" in stopped


@pytest.mark.parametrize("section", ["summary", "buffer", "no-such-section"])
def test_show_of_an_empty_section_says_that_it_is_empty(shared, section):
    output = flat(ok("--db", shared.url, "show", shared.conversation_id, "--section", section))
    assert f"section {section} is empty" in output
    assert QUESTION not in output
    assert (
        ok("--db", shared.url, "show", shared.conversation_id, "--section", section, "--json") == ""
    )


def test_runs_lists_each_run_with_its_agent_and_status(shared):
    rows = _rows(ok("--db", shared.url, "runs"))
    assert sorted((row[2], row[3]) for row in rows if row[2]) == [
        ("stale-planner", "running"),
        ("weather-bot", "completed"),
    ]


@pytest.mark.parametrize(
    ("status", "agent"), [("running", "stale-planner"), ("completed", "weather-bot")]
)
def test_runs_filters_by_status(shared, status, agent):
    rows = _rows(ok("--db", shared.url, "runs", "--status", status))
    assert [(row[2], row[3]) for row in rows if row[2]] == [(agent, status)]


def test_search_finds_the_answer_and_not_the_tool_output(shared):
    found = ok("--db", shared.url, "search", "marmalade")
    assert "assistant" in found and "marmalade" in found
    nothing = ok("--db", shared.url, "search", "TOOL-OUTPUT")
    assert "assistant" not in nothing and "user" not in nothing


@pytest.mark.parametrize(
    "command",
    [["show", harness.UNKNOWN_ID], ["trace", harness.UNKNOWN_ID]],
    ids=" ".join,
)
def test_an_unknown_id_exits_non_zero_with_a_message_and_no_traceback(shared, command):
    result = invoke("--db", shared.url, *command)
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    assert harness.UNKNOWN_ID in result.output and "Traceback" not in result.output


# --- recovering stale runs ------------------------------------------------------------------------


def test_recover_lists_a_stale_run_on_a_dry_run_and_then_abandons_it(recorded):
    with Ledger.open(recorded.url) as ledger:
        conversation_id, run_id = harness.begin_stale_run(ledger)
    # The handle is closed: the run is what a crashed process leaves behind.

    with Ledger.open(recorded.url) as ledger:
        run = ledger.short_ids([run_id], of="run")[run_id]
        conversation = ledger.short_ids([conversation_id], of="conversation")[conversation_id]

    dry = flat(ok("--db", recorded.url, "recover", "--dry-run", "--stale-after", "0"))
    assert f"stale: run {run} of conversation {conversation} (1 step)" in dry
    assert "1 run stale" in dry
    with Ledger.open(recorded.url) as ledger:
        assert ledger.run(run_id).status == "running"
        assert len(ledger.buffer(run_id)) > 0

    done = flat(ok("--db", recorded.url, "recover", "--stale-after", "0"))
    assert f"abandoned: run {run} " in done and "1 run abandoned" in done
    with Ledger.open(recorded.url) as ledger:
        assert ledger.run(run_id).status == "interrupted"
        assert len(ledger.buffer(run_id)) == 0
        assert ledger.conversation(conversation_id).lease_run_id is None
        assert ledger.run(recorded.run_id).status == "completed"

    again = ok("--db", recorded.url, "recover", "--stale-after", "0")
    assert again == "no stale runs: nothing to recover\n"


def test_recover_leaves_a_run_with_a_live_lease_alone(recorded):
    with Ledger.open(recorded.url) as ledger:
        _conversation_id, run_id = harness.begin_stale_run(ledger)
    assert "no stale runs: nothing to recover" in ok("--db", recorded.url, "recover", "--dry-run")
    assert "no stale runs: nothing to recover" in ok("--db", recorded.url, "recover")
    with Ledger.open(recorded.url) as ledger:
        assert ledger.run(run_id).status == "running"


# --- db: migrations -----------------------------------------------------------------------------


def test_db_commands_take_a_ledger_down_and_up_again(recorded):
    url = recorded.url
    assert f"at revision {HEAD}" in ok("--db", url, "db", "upgrade")
    assert ok("--db", url, "db", "current").strip() == f"{HEAD} (head)"
    assert f"up to date at {HEAD}" in ok("--db", url, "db", "check")

    assert PREVIOUS is not None
    assert f"at revision {PREVIOUS}" in ok("--db", url, "db", "downgrade", PREVIOUS)
    assert ok("--db", url, "db", "current").strip() == f"{PREVIOUS} (newest: {HEAD})"
    check = invoke("--db", url, "db", "check")
    assert check.exit_code != 0
    assert "agentledger db upgrade" in check.output
    refused = invoke("--db", url, "conversations")
    assert refused.exit_code != 0 and "agentledger db upgrade" in refused.output

    assert f"at revision {HEAD}" in ok("--db", url, "db", "upgrade")
    assert f"up to date at {HEAD}" in ok("--db", url, "db", "check")
    assert QUESTION in ok("--db", url, "show", recorded.conversation_id)


@pytest.mark.parametrize("command", ["upgrade", "downgrade"])
def test_db_upgrade_and_downgrade_refuse_an_unknown_revision_listing_those_there_are(
    recorded, command
):
    result = invoke("--db", recorded.url, "db", command, "bogus")
    assert result.exit_code == 1
    said = flat(result.output)
    assert "cannot migrate to revision 'bogus'" in said and "Traceback" not in result.output
    assert f"Give head, base or one of the revisions this agentledger ships ({HEAD}," in said
    assert ok("--db", recorded.url, "db", "current").strip() == f"{HEAD} (head)"


def test_db_history_lists_every_revision_newest_first():
    listed = re.findall(r"^(\S+)  ", ok("db", "history"), flags=re.MULTILINE)
    assert listed == list(reversed(harness.revisions()))
    assert "0001" in listed and "0002" in listed


def test_db_upgrade_refuses_a_database_from_a_newer_agentledger(recorded):
    with Database(recorded.url) as database, database.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {harness.VERSION_TABLE} SET version_num = '9999'")
    for command in (["db", "upgrade"], ["db", "check"], ["conversations"]):
        result = invoke("--db", recorded.url, *command)
        assert result.exit_code == 1, command
        assert "9999" in result.output and "newer agentledger" in flat(result.output), command
    with Database(recorded.url) as database:
        assert database.versions() == ["9999"]
    gc.collect()  # a refusal must close its connections too (psycopg warns when it did not)


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_db_schema_prints_the_committed_ddl(dialect):
    expected = (ROOT / "schema" / f"{dialect}.sql").read_text(encoding="utf-8")
    assert ok("db", "schema", "--dialect", dialect) == expected


# --- choosing the ledger ------------------------------------------------------------------------


def test_the_agentledger_db_variable_names_the_ledger_when_db_is_not_given(shared):
    output = ok("show", shared.conversation_id, env={"AGENTLEDGER_DB": shared.url})
    assert QUESTION in output and ANSWER in flat(output)


def test_db_wins_over_the_agentledger_db_variable(shared, tmp_path):
    elsewhere = str(tmp_path / "elsewhere.db")
    output = ok(
        "--db", shared.url, "show", shared.conversation_id, env={"AGENTLEDGER_DB": elsewhere}
    )
    assert QUESTION in output
    assert not Path(elsewhere).exists()


MISSING_LEDGER_COMMANDS = [
    ["conversations"],
    ["runs"],
    ["show", "some-conversation"],
    ["trace", "some-run"],
    ["search", "anything"],
    ["recover", "--dry-run"],
    ["recover"],
    ["db", "check"],
    ["forget", "some-conversation", "--dry-run"],
    ["forget", "some-conversation"],
    ["prune", "--keep-latest", "1", "--dry-run"],
    ["prune", "--keep-latest", "1"],
]


@pytest.mark.parametrize("command", MISSING_LEDGER_COMMANDS, ids=" ".join)
def test_a_missing_ledger_file_exits_non_zero_saying_how_to_create_one_and_creates_nothing(
    tmp_path, command
):
    missing = tmp_path / "missing.db"
    result = invoke("--db", str(missing), *command)
    assert result.exit_code != 0
    assert "agentledger db upgrade" in flat(result.output)
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == [], f"`{' '.join(command)}` created {missing}"


def test_db_upgrade_creates_an_empty_ledger_that_the_other_commands_read(tmp_path):
    path = tmp_path / "new.db"
    assert f"at revision {HEAD}" in ok("--db", str(path), "db", "upgrade")
    assert "conversations" in ok("--db", str(path), "conversations")
    assert "no stale runs" in ok("--db", str(path), "recover", "--dry-run")


def test_version_prints_the_package_version():
    assert ok("--version").strip() == f"agentledger, version {__version__}"


# --- the console script, in a process of its own -------------------------------------------------


def test_the_console_script_shows_and_traces_and_refuses_a_missing_ledger(tmp_path):
    recorded = record_a_run(str(tmp_path / "ledger.db"))

    shown = console("--db", "ledger.db", "show", recorded.conversation_id, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert QUESTION in shown.stdout and ANSWER in flat(shown.stdout)
    assert "TOOL-OUTPUT" not in shown.stdout

    traced = console("--db", "ledger.db", "trace", recorded.run_id, cwd=tmp_path)
    assert traced.returncode == 0, traced.stderr
    assert "get_weather" in traced.stdout

    empty = tmp_path / "empty"
    empty.mkdir()
    missing = console("runs", cwd=empty)  # the default, ./agentledger.db, is not there
    assert missing.returncode == 1
    assert "agentledger db upgrade" in flat(missing.stderr)
    assert "Traceback" not in missing.stderr
    assert list(empty.iterdir()) == []

    version = console("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip().endswith(__version__)


def test_the_console_script_in_an_80_column_terminal_lists_ids_that_trace_takes(tmp_path):
    recorded = record_a_run(str(tmp_path / "ledger.db"))
    terminal = {"TTY_COMPATIBLE": "1", "COLUMNS": "80", "NO_COLOR": "1"}
    listed = console("--db", "ledger.db", "runs", cwd=tmp_path, env=terminal)
    assert listed.returncode == 0, listed.stderr
    text = re.sub(r"\x1b\[[0-9;]*m", "", listed.stdout)
    assert max(len(line) for line in text.splitlines()) <= 80
    run = shown_id(text, recorded.run_id)
    traced = console("--db", "ledger.db", "trace", run, cwd=tmp_path, env=terminal)
    assert traced.returncode == 0, traced.stderr
    assert "get_weather" in traced.stdout
