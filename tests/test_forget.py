"""Forgetting on request and retention: ``Ledger.forget``, ``forget_owner``, ``forget_inactive``
and ``agentledger forget``, on SQLite and PostgreSQL.

A conversation is recorded with its text in every place the ledger keeps text (a user message,
an answer, reasoning, tool arguments, a tool result, the buffer of a failed run, a compaction's
summary, a subagent's messages), each a word found nowhere else; after it is forgotten, SQL on
the database finds none of its rows, the log holds only ids and counts, ``verify`` passes and,
on SQLite, no byte of the file spells any of the words.
"""

from __future__ import annotations

import json
import os
import pty
import re
import sqlite3
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select, update

from agentledger import AgentBuilder, Message, SubagentSpec, ToolCall, tool
from agentledger._values import Role
from agentledger.cli import cli
from agentledger.errors import (
    ConversationBusyError,
    LedgerReadOnlyError,
    NotFoundError,
    UsageError,
)
from agentledger.ledger import Forgotten, Ledger
from agentledger.ledger.checksums import checksum
from agentledger.ledger.tables import conversations
from agentledger.llm import InferenceResponse, ScriptedLLM
from support.cli import CONSOLE_SCRIPT
from support.clocks import FakeClock
from support.ledger import Database
from support.subagents import SPAWN, Router, Script, answer, prompt

FRAMEWORK_TABLES = (
    *("graph_checkpoints", "graph_channel_values", "graph_writes"),
    *("stored_records", "stored_entries"),
    *("adk_sessions", "adk_events", "adk_states"),
)
"""Tables a framework's store writes (tests/test_langgraph_saver.py, test_pydantic_ai_store.py,
test_adk_sessions.py)."""

TABLES = (
    "conversations",
    "conversation_messages",
    "agent_runs",
    "step_executions",
    "tool_executions",
    "execution_buffer_rows",
    "context_compactions",
)

SECRETS = {
    "user message": "Quokkauser",
    "answer": "Quokkaanswer",
    "reasoning": "Quokkareasoning",
    "tool arguments": "Quokkaargument",
    "tool result": "Quokkaresult",
    "failed buffer": "Quokkabuffer",
    "compaction summary": "Quokkasummary",
    "subagent task": "Quokkatask",
    "subagent answer": "Quokkasubanswer",
}
"""The words only the forgotten conversation holds, by where it holds them."""

KEPT = "Wombatkept"
"""A word only the conversation that stays holds."""


@tool
def archive(topic: str) -> str:
    """What the archive holds on a topic."""
    return f"The archive on {topic}: {SECRETS['tool result']} and more."


RESEARCHER = "researcher"


def _lead(llm: Any, ledger: Ledger, clock: FakeClock, **context: Any) -> AgentBuilder:
    builder = (
        AgentBuilder()
        .with_llm(llm)
        .with_name("lead")
        .with_system_prompt(prompt("lead"))
        .with_tools([archive])
        .with_subagents(
            [
                SubagentSpec(
                    name=RESEARCHER, description="Researches.", system_prompt=prompt(RESEARCHER)
                )
            ]
        )
        .with_clock(clock)
        .with_ledger(ledger)
    )
    return builder.with_context_budget(**context) if context else builder


def record_secret_conversation(ledger: Ledger, clock: FakeClock) -> str:
    """A conversation holding each of ``SECRETS`` where its name says: a run that calls a tool
    and a subagent, a compaction, and a run whose model fails after a step (buffer kept)."""
    calls = InferenceResponse(
        tool_calls=[
            ToolCall(id="call_a", name="archive", arguments={"topic": SECRETS["tool arguments"]}),
            ToolCall(
                id="call_s",
                name=SPAWN,
                arguments={"subagent": RESEARCHER, "task": f"Find {SECRETS['subagent task']}."},
            ),
        ],
        reasoning=f"Two tools: {SECRETS['reasoning']}.",
        finish_reason="tool_calls",
    )
    router = Router(
        {
            "lead": Script([calls, answer(f"Here it is: {SECRETS['answer']}.")]),
            RESEARCHER: Script([answer(f"Found {SECRETS['subagent answer']}.")]),
        }
    )
    first = _lead(router, ledger, clock).build().run(f"Tell me of {SECRETS['user message']}.")
    agent = _lead(
        ScriptedLLM([answer("A plain answer.")]),
        ledger,
        clock,
        max_tokens=60,
        keep_recent=1,
        summarize_at=1.0,
        summarizer=ScriptedLLM([answer(f"They asked of {SECRETS['compaction summary']}.")]),
    ).build()
    agent.run("And then?", first.conversation_id)
    assert agent.compact(first.conversation_id, force=True) is not None
    buffered = InferenceResponse(
        tool_calls=[
            ToolCall(id="call_b", name="archive", arguments={"topic": SECRETS["failed buffer"]})
        ],
        finish_reason="tool_calls",
    )
    failed = (
        _lead(ScriptedLLM([buffered]), ledger, clock)
        .build()
        .run("Once more?", first.conversation_id)
    )
    assert failed.state.status.value == "failed"
    return first.conversation_id


def record_kept_conversation(ledger: Ledger, clock: FakeClock) -> str:
    agent = _lead(ScriptedLLM([answer(f"Kept: {KEPT}.")]), ledger, clock).build()
    return agent.run(f"Keep {KEPT}, please.").conversation_id


def row_counts(db: Database) -> dict[str, int]:
    return {t: db.scalar(f"SELECT COUNT(*) FROM {t}") for t in TABLES}


@pytest.fixture
def clock() -> FakeClock:
    """A month ago, as the command line's clock (the real one) sees it."""
    return FakeClock(start=datetime.now(UTC) - timedelta(days=30))


@pytest.fixture
def ledger(db_url: str, clock: FakeClock) -> Iterator[Ledger]:
    with Ledger.open(db_url, clock=clock) as opened:
        yield opened


@pytest.fixture
def db(db_url: str, ledger: Ledger) -> Iterator[Database]:
    database = Database(db_url)
    yield database
    database.engine.dispose()


@pytest.fixture
def recorded(ledger: Ledger, clock: FakeClock) -> tuple[str, str]:
    """(the conversation to forget, the one that stays)."""
    return record_secret_conversation(ledger, clock), record_kept_conversation(ledger, clock)


def own(ledger: Ledger, conversation_id: str, *, tenant: str | None, owner: str | None) -> None:
    """Give a conversation a tenant and an owner, as an app would, its checksum made again."""
    with ledger.engine.begin() as conn:
        row = dict(
            conn.execute(select(conversations).where(conversations.c.id == conversation_id))
            .mappings()
            .one()
        )
        row.update(tenant_id=tenant, owner_id=owner)
        conn.execute(
            update(conversations)
            .where(conversations.c.id == conversation_id)
            .values(tenant_id=tenant, owner_id=owner, checksum=checksum(conversations, row))
        )


# --- the library --------------------------------------------------------------------------------


def test_forgetting_a_conversation_deletes_every_row_that_came_from_it_in_one_logged_transaction(
    ledger: Ledger, db: Database, recorded: tuple[str, str]
) -> None:
    secret, kept = recorded
    subagent = db.scalar("SELECT id FROM conversations WHERE kind = 'subagent'")
    before = row_counts(db)
    kept_before = len(ledger.history(kept))

    forgotten = ledger.forget(ledger.short_ids([secret], of="conversation")[secret])

    assert isinstance(forgotten, Forgotten) and not forgotten.dry_run
    assert forgotten.conversation_ids == (secret, subagent)
    assert forgotten.reason == "conversation"
    after = row_counts(db)
    framework = dict.fromkeys(FRAMEWORK_TABLES, 0)  # none here
    assert forgotten.counts == {**{t: before[t] - after[t] for t in TABLES}, **framework}
    assert forgotten.counts["conversations"] == 2 and forgotten.counts["agent_runs"] == 4
    assert all(forgotten.counts[t] > 0 for t in TABLES), forgotten.counts
    assert forgotten.rows == sum(forgotten.counts.values())
    for table, column in (
        ("conversation_messages", "conversation_id"),
        ("agent_runs", "conversation_id"),
    ):
        assert (
            db.scalar(
                f"SELECT COUNT(*) FROM {table} WHERE {column} IN (:a, :b)", a=secret, b=subagent
            )
            == 0
        )
    with pytest.raises(NotFoundError):
        ledger.conversation(secret)
    assert len(ledger.history(kept)) == kept_before
    assert ledger.verify() == []
    log = db.row("SELECT * FROM forget_log")
    assert log["id"] == forgotten.log_id and log["reason"] == "conversation"
    assert log["tenant_id"] is None and log["owner_id"] is None
    ids, counts = (
        json.loads(v) if isinstance(v, str) else v for v in (log["conversation_ids"], log["counts"])
    )
    assert ids == [secret, subagent] and counts == forgotten.counts
    assert not any(
        word.lower() in json.dumps(log, default=str).lower() for word in SECRETS.values()
    )
    deleted = db.rows("SELECT table_name, row_id FROM agentledger_deletions")
    assert {"table_name": "conversations", "row_id": secret} in deleted
    assert len(deleted) == sum(
        n for t, n in forgotten.counts.items() if t != "execution_buffer_rows"
    )


def test_nothing_of_a_forgotten_conversation_is_found_by_search_and_the_other_is(
    ledger: Ledger, recorded: tuple[str, str]
) -> None:
    secret, kept = recorded
    assert ledger.search(SECRETS["answer"])
    ledger.forget(secret)
    for word in SECRETS.values():
        assert ledger.search(word) == [], word
    assert [h.conversation_id for h in ledger.search(KEPT)] == [kept, kept]


def test_no_byte_of_the_sqlite_file_spells_a_word_of_a_forgotten_conversation(
    tmp_path: Path,
) -> None:
    path, clock = tmp_path / "ledger.db", FakeClock()
    with Ledger.open(path, clock=clock) as ledger:
        secret = record_secret_conversation(ledger, clock)
        record_kept_conversation(ledger, clock)

        def held() -> bytes:
            files = [path, path.with_name(path.name + "-wal")]
            return b"".join(f.read_bytes() for f in files if f.exists()).lower()

        assert all(w.lower().encode() in held() for w in SECRETS.values())
        with ledger.engine.connect() as conn:  # what a write deletes is zeroed, not left
            assert conn.exec_driver_sql("PRAGMA secure_delete").scalar() == 1
        forgotten = ledger.forget(secret)
        assert forgotten.checkpointed is True
        assert not path.with_name(path.name + "-wal").stat().st_size
        found = [where for where, w in SECRETS.items() if w.lower().encode() in held()]
        assert found == []
        assert KEPT.lower().encode() in held()
        assert ledger.search(KEPT)
        assert ledger.verify() == []


def test_a_dry_run_deletes_and_logs_nothing_and_says_what_would_go(
    ledger: Ledger, db: Database, recorded: tuple[str, str]
) -> None:
    secret, _ = recorded
    before = row_counts(db)
    preview = ledger.forget(secret, dry_run=True)
    assert preview.dry_run and preview.log_id is None and preview.checkpointed is None
    assert row_counts(db) == before and db.scalar("SELECT COUNT(*) FROM forget_log") == 0
    done = ledger.forget(secret)
    assert done.counts == preview.counts and done.conversation_ids == preview.conversation_ids


def test_a_conversation_a_run_holds_is_refused_whole_until_its_lease_expires(
    ledger: Ledger, db: Database, clock: FakeClock, recorded: tuple[str, str]
) -> None:
    secret, kept = recorded
    agent = _lead(ScriptedLLM([answer("unused")]), ledger, clock).build()
    state = ledger.recorder.load_conversation(kept)
    user = Message(role=Role.USER, content="Still running.")
    state = agent.begin(state.with_messages(state.messages().append(user)))
    ledger.recorder.begin_run(state, user_message=user, agent_name=agent.name)
    before = row_counts(db)
    with pytest.raises(
        ConversationBusyError,
        match=rf"conversation {kept} \(run {state.run_id}\).*agentledger recover",
    ):
        ledger.forget([secret, kept])
    assert row_counts(db) == before and db.scalar("SELECT COUNT(*) FROM forget_log") == 0
    ledger.recorder.close()  # the process "dies": nobody renews the lease
    clock.now += timedelta(minutes=5)
    forgotten = ledger.forget([secret, kept])
    assert kept in forgotten.conversation_ids and ledger.conversations() == []
    assert ledger.verify() == []


def test_forget_takes_prefixes_and_refuses_what_it_cannot_forget(
    ledger: Ledger, recorded: tuple[str, str]
) -> None:
    secret, _ = recorded
    subagent = next(c for c in ledger.conversations() if c.kind == "subagent")
    with pytest.raises(NotFoundError, match="no conversation 'nothing-like-it'"):
        ledger.forget("nothing-like-it")
    with pytest.raises(
        UsageError, match=rf"subagent's.*forgotten with the conversation of that run, {secret}"
    ):
        ledger.forget(subagent.id)
    for nothing, says in (
        ([], "none was given"),
        (None, "not None"),
        ([1], "not 1"),
        ([""], "not ''"),
    ):
        with pytest.raises(UsageError, match=says):
            ledger.forget(nothing)  # type: ignore[arg-type]
    assert len(ledger.conversations()) == 3  # nothing went


def test_a_scoped_handle_forgets_only_in_its_scope(
    ledger: Ledger, recorded: tuple[str, str]
) -> None:
    secret, kept = recorded
    own(ledger, secret, tenant="acme", owner="ann")
    own(ledger, kept, tenant="other", owner="ann")
    acme = ledger.scoped(tenant_id="acme")
    with pytest.raises(NotFoundError):
        acme.forget(kept)
    forgotten = acme.forget_owner("ann")
    assert forgotten.conversation_ids[0] == secret and kept not in forgotten.conversation_ids
    assert [c.id for c in ledger.conversations()] == [kept]
    assert ledger.verify() == []


def test_forget_owner_forgets_every_conversation_of_the_owner_and_logs_even_none(
    ledger: Ledger, db: Database, recorded: tuple[str, str]
) -> None:
    secret, kept = recorded
    own(ledger, secret, tenant=None, owner="ann")
    forgotten = ledger.forget_owner("ann")
    assert forgotten.reason == "owner" and forgotten.conversation_ids[0] == secret
    assert [c.id for c in ledger.conversations()] == [kept]
    nobody = ledger.forget_owner("nobody")
    assert nobody.conversation_ids == () and nobody.rows == 0 and nobody.log_id is not None
    logged = db.rows("SELECT owner_id, reason FROM forget_log ORDER BY forgotten_at, id")
    assert logged == [
        {"owner_id": "ann", "reason": "owner"},
        {"owner_id": "nobody", "reason": "owner"},
    ]
    with pytest.raises(UsageError, match="owner_id"):
        ledger.forget_owner("")


def test_forget_inactive_forgets_the_conversations_quiet_since_then_with_their_subagents(
    ledger: Ledger, clock: FakeClock, recorded: tuple[str, str]
) -> None:
    secret, kept = recorded
    # A compaction's summary is stamped by the real clock: the fake one runs well past it.
    clock.now += timedelta(days=200)
    recent = record_kept_conversation(ledger, clock)
    assert ledger.forget_inactive(timedelta(days=201)).conversation_ids == ()
    forgotten = ledger.forget_inactive(timedelta(days=90))
    assert forgotten.reason.startswith("inactive since ") and forgotten.reason.endswith("+00:00")
    assert (
        set(forgotten.conversation_ids[:2]) == {secret, kept}
        and len(forgotten.conversation_ids) == 3
    )
    assert [c.id for c in ledger.conversations()] == [recent]
    with pytest.raises(UsageError, match="positive timedelta"):
        ledger.forget_inactive(timedelta(0))
    with pytest.raises(UsageError, match="before the year 1"):
        ledger.forget_inactive(timedelta.max)
    assert ledger.verify() == []


def test_a_read_only_handle_refuses_to_forget_but_previews(
    db_url: str, recorded: tuple[str, str]
) -> None:
    secret, _ = recorded
    with Ledger.open(db_url, read_only=True) as reader:
        assert reader.forget(secret, dry_run=True).counts["conversations"] == 2
        with pytest.raises(LedgerReadOnlyError):
            reader.forget(secret)


def test_an_analytics_cache_synced_after_a_forget_no_longer_holds_the_conversation(
    tmp_path: Path,
) -> None:
    pytest.importorskip("duckdb")
    from agentledger.analytics import Analytics

    path, clock = tmp_path / "ledger.db", FakeClock()
    with Ledger.open(path, clock=clock) as ledger:
        secret = record_secret_conversation(ledger, clock)
        kept = record_kept_conversation(ledger, clock)
        with Analytics.open(path, cache=tmp_path / "cache.duckdb") as analytics:

            def held(table: str, column: str = "conversation_id") -> set[str]:
                return {
                    r[0] for r in analytics.sql(f"SELECT {column} FROM ledger.{table}").fetchall()
                }

            assert secret in held("agent_runs")
            ledger.forget(secret)
            analytics.sync()
            assert held("conversations", "id") == {kept}
            assert held("agent_runs") == held("conversation_messages") == {kept}
            assert held("context_compactions") == set()


# --- the command line ---------------------------------------------------------------------------


SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
"""The command line is one shell over both backends: the library's tests cover PostgreSQL."""


def invoke(url: str, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--db", url, *args])


@SQLITE_ONLY
def test_agentledger_forget_ids_prints_the_counts_and_the_log_id(
    db_url: str, ledger: Ledger, db: Database, recorded: tuple[str, str]
) -> None:
    secret, kept = recorded
    result = invoke(db_url, "forget", ledger.short_ids([secret], of="conversation")[secret])
    assert result.exit_code == 0, result.output
    log_id = db.scalar("SELECT id FROM forget_log")
    assert log_id in result.output and "conversation_messages" in result.output
    assert "2 conversations" in result.output
    assert [c.id for c in ledger.conversations()] == [kept]


@SQLITE_ONLY
def test_agentledger_forget_json_is_one_object(db_url: str, recorded: tuple[str, str]) -> None:
    secret, _ = recorded
    result = invoke(db_url, "forget", secret, "--json", "--dry-run")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["dry_run"] is True and record["log_id"] is None
    assert record["conversation_ids"][0] == secret and record["counts"]["conversations"] == 2
    assert record["rows"] == sum(record["counts"].values())


@SQLITE_ONLY
def test_agentledger_forget_with_owner_forgets_the_owner(
    db_url: str, ledger: Ledger, recorded: tuple[str, str]
) -> None:
    secret, kept = recorded
    own(ledger, secret, tenant=None, owner="ann")
    result = invoke(db_url, "--owner", "ann", "forget", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["reason"] == "owner"
    assert [c.id for c in ledger.conversations()] == [kept]


@SQLITE_ONLY
def test_agentledger_forget_older_than_keeps_to_the_tenant_and_a_dry_run_deletes_nothing(
    db_url: str, ledger: Ledger, clock: FakeClock, recorded: tuple[str, str]
) -> None:
    _, kept = recorded  # a month ago
    other = record_kept_conversation(ledger, clock)
    own(ledger, kept, tenant="acme", owner=None)
    own(ledger, other, tenant="other", owner=None)
    result = invoke(db_url, "forget", "--older-than", "1d", "--tenant", "acme", "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"1 conversation would be forgotten (dry run: nothing deleted): {kept}" in result.output
    assert len(ledger.conversations()) == 4
    done = invoke(db_url, "--tenant", "acme", "forget", "--older-than", "1w", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["conversation_ids"] == [kept]
    assert kept not in [c.id for c in ledger.conversations()]
    assert other in [c.id for c in ledger.conversations()]


def test_agentledger_forget_refuses_an_age_it_cannot_read(tmp_path: Path) -> None:
    url = str(tmp_path / "ledger.db")
    Ledger.open(url).close()
    for age in ("90", "ninety days", "0d", "3y", "-1d", "1.5d", "99999999999d"):
        result = invoke(url, "forget", "--older-than", age)
        assert result.exit_code == 2 and "such as 90d" in result.output, result.output


def test_agentledger_forget_refuses_nothing_to_forget_and_mixed_choices(tmp_path: Path) -> None:
    url = str(tmp_path / "ledger.db")
    Ledger.open(url).close()
    nothing = invoke(url, "forget")
    assert (
        nothing.exit_code == 2 and "--older-than" in nothing.output and "--owner" in nothing.output
    )
    both = invoke(url, "forget", "0123456789ab", "--older-than", "9d")
    assert both.exit_code == 2 and "not both" in both.output
    read_only = invoke(url, "--read-only", "forget", "0123456789ab")
    assert read_only.exit_code == 1 and "--read-only" in read_only.output
    missing = invoke(url, "forget", "0123456789ab")
    assert missing.exit_code == 1 and "no conversation '0123456789ab'" in missing.output


def test_agentledger_forget_that_finds_nothing_says_so_in_a_line(tmp_path: Path) -> None:
    url = str(tmp_path / "ledger.db")
    Ledger.open(url).close()
    aged = invoke(url, "forget", "--older-than", "1d", "--dry-run")
    assert aged.exit_code == 0, aged.output
    assert re.fullmatch(
        r"nothing to forget: no conversation has been inactive since "
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\n",
        aged.output,
    )
    owned = invoke(url, "--owner", "ann", "forget", "--dry-run")
    assert owned.exit_code == 0, owned.output
    assert owned.output == "nothing to forget: the owner has no conversation\n"


def test_agentledger_forget_asks_at_a_terminal_and_a_no_forgets_nothing(tmp_path: Path) -> None:
    path, clock = tmp_path / "ledger.db", FakeClock()
    with Ledger.open(path, clock=clock) as ledger:
        kept = record_kept_conversation(ledger, clock)
    for answer_, exit_code, left in (("n", 1, 1), ("y", 0, 0)):
        primary, secondary = pty.openpty()
        os.write(primary, f"{answer_}\n".encode())
        try:
            done = subprocess.run(
                [str(CONSOLE_SCRIPT), "--db", str(path), "forget", kept],
                stdin=secondary,
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            os.close(primary)
            os.close(secondary)
        assert done.returncode == exit_code, done.stdout + done.stderr
        assert "Forget these 5 rows for good? [y/N]" in done.stdout
        with Ledger.open(path) as ledger:
            assert len(ledger.conversations()) == left


def test_a_reader_in_progress_keeps_the_wal_and_the_result_says_so(tmp_path: Path) -> None:
    path, clock = tmp_path / "ledger.db", FakeClock()
    with Ledger.open(path, clock=clock, busy_timeout=0.2) as ledger:
        kept = record_kept_conversation(ledger, clock)
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            reader.execute("BEGIN")
            reader.execute("SELECT COUNT(*) FROM conversation_messages").fetchone()
            forgotten = ledger.forget(kept)
        finally:
            reader.close()
        assert forgotten.checkpointed is False and forgotten.log_id is not None
        assert ledger.conversations() == []


def test_more_conversations_than_a_statement_binds_are_forgotten_together(tmp_path: Path) -> None:
    clock = FakeClock()
    with Ledger.open(tmp_path / "ledger.db", clock=clock, synchronous="NORMAL") as ledger:
        many = {ledger.create_conversation(title=f"n{n}").id for n in range(510)}
        clock.now += timedelta(days=2)
        forgotten = ledger.forget_inactive(timedelta(days=1))
        assert set(forgotten.conversation_ids) == many and forgotten.counts["conversations"] == 510
        assert ledger.conversations() == [] and ledger.verify() == []
