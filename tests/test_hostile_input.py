"""Hostile input through every public entry point: the Python API and the command line, on
SQLite and (for what reaches SQL: ids, search, titles and metadata) on PostgreSQL.

Each value either works as data (stored and read back exactly, found as the literal words it
holds) or gets one of the library's own errors (a command-line error) that names it; nothing in
it is ever executed (as SQL, as a full-text query, as markup, as a terminal sequence, as HTML),
no path is made of it, and nothing else is lost: the other rows are unchanged and
``Ledger.verify()`` finds nothing wrong.

The value lists are module-level constants, for other tests to import (the scoped handles and
metadata filters take the same). ``tests/reliability/test_bad_input_reliability.py`` puts NUL
characters, lone surrogates and SQL into every field a run writes; here the values go through
the entry points a caller or a model reaches.
"""

from __future__ import annotations

import asyncio
import html
import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from agentledger import AgentBuilder, NotFoundError, ToolCall, UsageError, tool
from agentledger.analytics import Analytics
from agentledger.errors import AmbiguousIdError, ConfigurationError, UnstorableTextError
from agentledger.ledger import Ledger
from agentledger.ledger._search import MAX_SEARCH_WORDS
from agentledger.llm import InferenceResponse, OpenAIChat, ScriptedLLM
from support.cli import ANSWER, Recorded, console, invoke, record_a_run
from support.databases import BACKENDS, fresh_database
from support.fake_provider import FakeProvider, Reply, openai_completion, openai_tool_call
from support.migration_harness import Database

# --- the values -----------------------------------------------------------------------------------

SQL_SYNTAX = [
    "' OR 1=1 --",
    '"; DROP TABLE conversations; --',
    "'); DELETE FROM agent_runs; --",
    "1; SELECT pg_sleep(10); --",
    "%s %(x)s {0} :name ? $1",
]
"""SQL, quotes and the placeholders of every driver's parameter style."""

LIKE_WILDCARDS = ["%", "_", "%%%%%%%%", "________", "0%", "01a_____-%"]
"""What a LIKE pattern gives a meaning: a prefix is a prefix, never a pattern."""

FTS_SYNTAX = [
    '"',
    '""',
    '"unbalanced',
    "*",
    "word*",
    "NEAR(",
    "NEAR(a b, 2)",
    "AND OR NOT",
    "a AND",
    "NOT",
    "-",
    "-word",
    "^word",
    "content:word",
    "{content}: word",
    "{}",
    "(",
    ")",
    "((word",
    "word)",
    "!word & word | word <-> word",
]
"""FTS5's query syntax (and tsquery's operators): searched for as the words they hold."""

BLANK = ["", " ", "\t\n ", "\u00a0\u2003"]
"""Nothing, or only white space."""

CONTROL = [
    "\x01\x02\x07\x08",
    "\x1b[31mred\x1b[0m",
    "\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\",
    "\x1b[2J\x1b[H",
    "over\rwritten",
    "\x7f\x9b31m",
]
"""Control characters the ledger can store, terminal escape sequences among them."""

UNSTORABLE = ["a\x00b", "\x00", "\ud800", "a\udfffb", "0abcdefg-\ud800"]
"""A NUL character (PostgreSQL refuses it) and lone surrogates (no UTF-8 holds one)."""

UNICODE = ["ünïcødé-日本語-🎉", "\U0010ffff" * 9, "\u202eevil\u202c-rtl", "ﬁ-ligature-İ"]
"""Text beyond ASCII, up to the last code point."""

HTML = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "javascript:alert(1)",
    "<a href=\"javascript:alert('x')\">click</a>",
]
"""Markup a page would run."""

RICH_MARKUP = ["[bold red]x[/]", "[link=https://evil.example]click[/link]"]
"""rich's console markup: printed literally, never as style."""

PATHS = ["../../x", "/etc/passwd", "..\\..\\x", "a/../../b", "~/x", "C:\\x", "./.hidden"]
"""Path pieces: data holding them never becomes a path."""

LONG = "x" * 100_000
"""A 100 KB value."""

IDS = [*SQL_SYNTAX, *LIKE_WILDCARDS, *BLANK, *CONTROL, *UNSTORABLE, *UNICODE, *PATHS, LONG]
"""What a caller may give for a conversation's or a run's id (or a prefix of one)."""

STORABLE_IDS = [*SQL_SYNTAX, *LIKE_WILDCARDS, *CONTROL, *UNICODE, *HTML, *PATHS, LONG]
"""Hostile text a conversation's id may be: stored as given."""

WORD = "marmalade"
"""A word of the recorded answer (``support.cli.ANSWER``)."""


def value_id(value: object) -> str:
    """A short, printable test id for a value."""
    text = ascii(value)
    return text if len(text) <= 40 else f"{text[:30]}...({len(str(value))} chars)"


# --- ledgers shared by the module -----------------------------------------------------------------


@dataclass(frozen=True)
class Shared:
    """A ledger holding one run of a scripted agent (a tool call, then the answer), and every
    row it held once that run was recorded."""

    ledger: Ledger
    conversation_id: str
    run_id: str
    rows: Any


@pytest.fixture(scope="module", params=BACKENDS)
def recorded(request: pytest.FixtureRequest) -> Iterator[Shared]:
    """The :class:`Shared` ledger of each backend. The tests given it store nothing: each
    checks that it added or removed no row, and the last test of the module that every row
    is still exactly as it was and the ledger verifies."""
    with fresh_database(request.param, request) as url:
        run = record_a_run(url)
        with Database(url) as database:
            rows = database.snapshot()
        with Ledger.open(url) as ledger:
            yield Shared(ledger, run.conversation_id, run.run_id, rows)


def raw_url(ledger: Ledger) -> str:
    return ledger.engine.url.render_as_string(hide_password=False)


@pytest.fixture
def unchanged(recorded: Shared) -> Iterator[None]:
    """The test must add and remove no row of the shared ledger."""
    before = recorded.ledger.row_counts()
    yield
    assert recorded.ledger.row_counts() == before


@pytest.fixture(scope="module", params=BACKENDS)
def data_ledger(request: pytest.FixtureRequest) -> Iterator[Ledger]:
    """An empty ledger (each backend) that the tests storing hostile values fill."""
    with fresh_database(request.param, request) as url, Ledger.open(url) as ledger:
        yield ledger


def answering(*responses: InferenceResponse) -> ScriptedLLM:
    return ScriptedLLM(list(responses))


def agent_on(ledger: Ledger, llm: Any, *tools: Any, name: str = "hostile") -> Any:
    builder = AgentBuilder().with_llm(llm).with_ledger(ledger).with_name(name)
    return builder.with_tools(list(tools)).build() if tools else builder.build()


# --- ids ------------------------------------------------------------------------------------------


def _run_agent_on(ledger: Ledger, conversation_id: str) -> object:
    return agent_on(ledger, answering(InferenceResponse(content="never"))).run(
        "Hello?", conversation_id
    )


def _resume(ledger: Ledger, run_id: str) -> object:
    return agent_on(ledger, answering()).resume(run_id)


CONVERSATION_READS: list[tuple[str, Callable[[Ledger, str], object]]] = [
    ("conversation", lambda ledger, i: ledger.conversation(i)),
    ("messages", lambda ledger, i: ledger.messages(i)),
    ("history", lambda ledger, i: ledger.history(i)),
    ("model_context", lambda ledger, i: ledger.model_context(i)),
    ("compactions", lambda ledger, i: ledger.compactions(i)),
    ("runs", lambda ledger, i: ledger.runs(i)),
    ("search", lambda ledger, i: ledger.search(WORD, conversation_id=i)),
    ("load_conversation", lambda ledger, i: ledger.recorder.load_conversation(i)),
    ("Agent.run", _run_agent_on),
]
RUN_READS: list[tuple[str, Callable[[Ledger, str], object]]] = [
    ("run", lambda ledger, i: ledger.run(i)),
    ("run_tree", lambda ledger, i: ledger.run_tree(i)),
    ("steps", lambda ledger, i: ledger.steps(i)),
    ("tool_executions", lambda ledger, i: ledger.tool_executions(i)),
    ("trace_messages", lambda ledger, i: ledger.trace_messages(i)),
    ("buffer", lambda ledger, i: ledger.buffer(i)),
    ("claim_run", lambda ledger, i: ledger.recorder.claim_run(i)),
    ("Agent.resume", _resume),
]


@pytest.mark.parametrize("given", IDS, ids=value_id)
def test_a_hostile_id_is_not_found_by_any_method_and_changes_nothing(recorded, unchanged, given):
    ledger = recorded.ledger
    for what, call in [*CONVERSATION_READS, *RUN_READS]:
        with pytest.raises(NotFoundError) as raised:
            call(ledger, given)
        assert not isinstance(raised.value, AmbiguousIdError), what
        assert repr(given) in str(raised.value), f"{what}: {raised.value}"
    (shown,) = ledger.short_ids([given], of="run").values()
    assert given.startswith(shown)


@pytest.mark.parametrize("value", STORABLE_IDS, ids=value_id)
def test_hostile_text_is_an_id_like_any_other(data_ledger, value):
    ledger = data_ledger
    conversation_id = f"id:{value}"
    created = ledger.create_conversation(conversation_id=conversation_id, title=value)
    result = agent_on(ledger, answering(InferenceResponse(content=f"quince {value}"))).run(
        value or "?", conversation_id
    )

    assert created.id == result.conversation_id == conversation_id
    assert ledger.conversation(conversation_id).title == value
    assert [m.content for m in ledger.history(conversation_id)] == [value, f"quince {value}"]
    assert [r.id for r in ledger.runs(conversation_id)] == [result.run_id]
    hits = ledger.search("quince", conversation_id=conversation_id)
    assert [h.conversation_id for h in hits] == [conversation_id]


@pytest.mark.parametrize(
    ("given", "error", "says"),
    [
        *[(v, UnstorableTextError, "the conversation's id holds") for v in UNSTORABLE],
        *[(v, UsageError, "give an id with a visible character") for v in BLANK[1:]],
    ],
    ids=value_id,
)
def test_an_id_that_cannot_be_one_is_refused_before_anything_is_written(
    recorded, unchanged, given, error, says
):
    with pytest.raises(error, match=says):
        recorded.ledger.create_conversation(conversation_id=given)


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda ledger: ledger.conversations(kind="' OR 1=1 --"), 'kind="\' OR 1=1 --"'),
        (lambda ledger: ledger.create_conversation(kind="<script>"), "kind='<script>'"),
        (lambda ledger: ledger.runs(status="%"), "status='%' is not one of 'ready', 'running'"),
        (lambda ledger: ledger.conversations(limit=-1), "limit=-1: give a number of rows"),
        (lambda ledger: ledger.runs(limit=-5), "limit=-5"),
        (lambda ledger: ledger.search(WORD, limit=-1), "limit=-1"),
    ],
    ids=[
        "conversations kind",
        "create_conversation kind",
        "runs status",
        "limit",
        "runs limit",
        "search limit",
    ],
)
def test_an_argument_out_of_its_range_is_a_usage_error_saying_what_is_accepted(
    recorded, unchanged, call, says
):
    with pytest.raises(UsageError) as raised:
        call(recorded.ledger)
    assert says in str(raised.value)


STALE_AFTER = [-1, float("nan"), float("inf"), 1e20]
"""Seconds no run can have been quiet for."""


@pytest.mark.parametrize("stale_after", STALE_AFTER, ids=value_id)
def test_a_stale_after_no_run_can_be_quiet_for_is_a_usage_error(recorded, unchanged, stale_after):
    ledger = recorded.ledger
    for call in (ledger.stale_runs, lambda s: ledger.recover(stale_after=s)):
        with pytest.raises(UsageError, match=r"stale_after=.*: give a finite number of seconds"):
            call(stale_after)
    with pytest.raises(UsageError, match="give a finite number of seconds"):
        agent_on(ledger, answering()).recover(stale_after=stale_after)
    assert ledger.stale_runs(1e11) == []  # back past the year 1: no heartbeat is that old


# --- search ---------------------------------------------------------------------------------------

SEARCHES = [
    *FTS_SYNTAX,
    *[f"{s}{WORD}" for s in FTS_SYNTAX],
    *[f"{WORD} {s}" for s in FTS_SYNTAX],
    *SQL_SYNTAX,
    *[f"{WORD}{s}" for s in SQL_SYNTAX],
    *LIKE_WILDCARDS,
    f"%{WORD}%",
    "mar_alade",
    *BLANK,
    *CONTROL,
    *UNSTORABLE,
    f"{WORD}\x00skies",
    *HTML,
    *RICH_MARKUP,
    "y" * (1 << 20),
    f"{WORD} " * 100_000,
]
"""What a caller may search for, 1 MB queries among them."""


@pytest.mark.parametrize("query", SEARCHES, ids=value_id)
def test_a_search_finds_the_literal_words_of_any_text_or_nothing(recorded, unchanged, query):
    ledger, conversation_id = recorded.ledger, recorded.conversation_id
    hits = ledger.search(query)
    words = {w.lower() for w in re.findall(r"\w+", query)}
    for hit in hits:
        assert all(w in hit.message.content.lower() for w in words), (query, hit)
    if words == {WORD}:
        assert [(h.conversation_id, h.message.content) for h in hits] == [(conversation_id, ANSWER)]
    if not words:
        assert hits == []


def test_a_search_of_more_different_words_than_it_takes_is_a_usage_error(recorded, unchanged):
    query = " ".join(f"w{n}" for n in range(MAX_SEARCH_WORDS + 1))
    with pytest.raises(UsageError, match=f"{MAX_SEARCH_WORDS + 1:,} different words"):
        recorded.ledger.search(query)
    assert recorded.ledger.search(" ".join([*query.split()[:MAX_SEARCH_WORDS]])) == []


# --- analytics ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def analytics(recorded: Shared) -> Iterator[Analytics]:
    with Analytics.open(raw_url(recorded.ledger)) as opened:
        yield opened


@pytest.mark.parametrize("by", ["agent; SELECT 1", "model --", *SQL_SYNTAX[:2]], ids=value_id)
def test_analytics_arguments_that_name_a_view_take_no_sql(analytics, by):
    with pytest.raises(ConfigurationError, match="give agent, model or server"):
        analytics.tool_stats(by=by)
    with pytest.raises(ConfigurationError, match="give minute, hour"):
        analytics.usage_over_time(by)


@pytest.mark.parametrize("given", IDS, ids=value_id)
def test_analytics_shortens_a_hostile_id_as_the_ledger_does(recorded, analytics, given):
    assert analytics.short_ids([given], of="run") == recorded.ledger.short_ids([given], of="run")


# --- the command line -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_ledger(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    directory = tmp_path_factory.mktemp("cli")
    return record_a_run(str(directory / "ledger.db"))


NOWHERE = ["--provider", "openai", "--model", "m", "--base-url", "http://127.0.0.1:1/v1"]
"""A model no request reaches: the conversation is looked up first."""

CLI_IDS = [*SQL_SYNTAX[:2], *LIKE_WILDCARDS[2:4], "a\x00b", "\ud800", "\x1b[31m", *RICH_MARKUP]


@pytest.mark.parametrize("given", CLI_IDS, ids=value_id)
@pytest.mark.parametrize(
    ("command", "kind"),
    [
        (["show"], "conversation"),
        (["trace"], "run"),
        (["runs", "--conversation"], "conversation"),
        (["search", WORD, "--conversation"], "conversation"),
        (["run", *NOWHERE, "Hello?", "--conversation"], "conversation"),
        (["chat", *NOWHERE, "--conversation"], "conversation"),
    ],
    ids=["show", "trace", "runs", "search", "run", "chat"],
)
def test_a_hostile_id_on_the_command_line_is_an_error_naming_it(cli_ledger, command, kind, given):
    result = invoke("--db", cli_ledger.url, *command, given, env={"OPENAI_API_KEY": "sk-test"})
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert f"Error: no {kind} {given!r} in this ledger" in result.output


@pytest.mark.parametrize("stale_after", ["nan", "inf", "1e20"])
def test_recover_refuses_a_stale_after_no_run_can_be_quiet_for(cli_ledger, stale_after):
    result = invoke("--db", cli_ledger.url, "recover", "--dry-run", "--stale-after", stale_after)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert f"Error: stale_after={float(stale_after)!r}: give a finite number" in result.output


@pytest.mark.parametrize("query", [*FTS_SYNTAX, *SQL_SYNTAX, "%", "\x00"], ids=value_id)
def test_search_on_the_command_line_takes_any_text(cli_ledger, query):
    result = invoke("--db", cli_ledger.url, "search", "--", query)
    assert result.exit_code == 0, result.output
    assert result.exception is None


def test_hostile_arguments_of_the_installed_command_are_data(cli_ledger):
    db = cli_ledger.url
    shown = console("--db", db, "show", SQL_SYNTAX[0])
    assert shown.returncode == 1
    assert f"no conversation {SQL_SYNTAX[0]!r} in this ledger" in shown.stderr
    found = console("--db", db, "search", f'"{WORD}* NEAR( {SQL_SYNTAX[1]}', "--json")
    assert found.returncode == 0, found.stderr
    assert found.stdout == ""  # no message holds every word (DROP, TABLE, ...)
    with Ledger.open(db) as ledger:
        assert ledger.verify() == []
        assert len(ledger.conversations()) == 1


# --- tenant and owner ids, metadata filters -------------------------------------------------------

SCOPE_IDS = [*SQL_SYNTAX, *LIKE_WILDCARDS, *UNICODE, *HTML, *PATHS, *RICH_MARKUP]
"""Tenant and owner ids that are plain data: a scope of one sees only its own conversations."""


@pytest.mark.parametrize("given", SCOPE_IDS, ids=value_id)
def test_a_hostile_tenant_or_owner_is_a_scope_like_any_other(data_ledger, given):
    scoped = data_ledger.scoped(tenant_id=given, owner_id=given)
    created = scoped.create_conversation(title="mine")
    assert [c.id for c in scoped.conversations()] == [created.id]
    assert data_ledger.conversation(created.id).tenant_id == given
    other = data_ledger.scoped(tenant_id=given + "-other")
    with pytest.raises(NotFoundError):
        other.conversation(created.id)
    assert other.conversations() == []


@pytest.mark.parametrize("given", [*BLANK, *CONTROL, *UNSTORABLE], ids=value_id)
def test_a_tenant_or_owner_that_cannot_be_one_is_a_usage_error(recorded, unchanged, given):
    for scope in ({"tenant_id": given}, {"owner_id": given}):
        with pytest.raises(UsageError):
            recorded.ledger.scoped(**scope)
    result = invoke("--db", raw_url(recorded.ledger), "--tenant", given, "conversations")
    assert result.exit_code != 0 and "tenant_id" in result.output


METADATA_KEYS = ['a"b', "a.b", "$", "$.a", "[0]", "a'b", *SQL_SYNTAX[:2], "", "ünï"]


@pytest.mark.parametrize("key", METADATA_KEYS, ids=value_id)
def test_a_metadata_filter_takes_any_key_and_value_as_data(data_ledger, key):
    value = f"{key}-{SQL_SYNTAX[0]}"
    kept = data_ledger.create_conversation(metadata={key: value, "n": 1})
    found = data_ledger.conversations(metadata={key: value})
    assert [c.id for c in found] == [kept.id]
    assert data_ledger.conversations(metadata={key: SQL_SYNTAX[0]}) == []


# --- what a model sends: tool names and arguments -------------------------------------------------


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city[:20]}"


DEEP_JSON = '{"a":' * 10_000 + "1" + "}" * 10_000
"""An object nested 10,000 levels deep: more than Python's JSON parser recurses into."""

TOOL_CALLS: dict[str, ToolCall] = {
    "a tool that does not exist": ToolCall(id="c1", name="no_such_tool"),
    "a path for a name": ToolCall(id="c1", name="../../etc/passwd"),
    "markup for a name": ToolCall(id="c1", name=HTML[0]),
    "SQL for a name": ToolCall(id="c1", name=SQL_SYNTAX[1]),
    "a 10 KB name": ToolCall(id="c1", name="t" * 10_000),
    "malformed JSON": ToolCall(id="c1", name="get_weather", raw_arguments='{"city": "Par'),
    "JSON that is no object": ToolCall(id="c1", name="get_weather", raw_arguments='["Paris"]'),
    "JSON nested 10,000 deep": ToolCall(id="c1", name="get_weather", raw_arguments=DEEP_JSON),
    "arguments of the wrong type": ToolCall(id="c1", name="get_weather", arguments={"city": []}),
    "SQL and markup in an argument": ToolCall(
        id="c1", name="no_such_tool", arguments={SQL_SYNTAX[0]: HTML[1], "k": RICH_MARKUP[1]}
    ),
}


@pytest.mark.parametrize("call", TOOL_CALLS.values(), ids=TOOL_CALLS.keys())
def test_a_tool_call_that_cannot_run_is_answered_with_an_error_the_model_sees_and_kept(
    data_ledger, call
):
    llm = answering(InferenceResponse(tool_calls=[call]), InferenceResponse(content="sorry"))
    result = agent_on(data_ledger, llm, get_weather).run("What is the weather?")

    assert result.status == "completed", result.error
    (execution,) = data_ledger.tool_executions(result.run_id)
    assert execution.is_error and execution.error
    assert execution.tool_call == call  # what the model sent, kept as it sent it
    (sent,) = data_ledger.trace_messages(result.run_id)[0].tool_calls
    assert sent == call
    seen = llm.requests[1].messages[-1]
    assert seen.role == "tool" and seen.tool_call_id == "c1"
    assert seen.content.startswith("Error:")


@pytest.mark.parametrize("text", UNSTORABLE[::2], ids=value_id)
@pytest.mark.parametrize("where", ["arguments", "raw_arguments", "name"])
def test_tool_call_text_the_ledger_cannot_store_fails_the_run_with_a_clear_error(
    data_ledger, where, text
):
    fields: dict[str, Any] = {
        "arguments": {"name": "get_weather", "arguments": {"city": text}},
        "raw_arguments": {"name": "get_weather", "raw_arguments": f'{{"city": "{text}'},
        "name": {"name": f"get_{text}"},
    }[where]
    llm = answering(InferenceResponse(tool_calls=[ToolCall(id="c1", **fields)]))
    result = agent_on(data_ledger, llm, get_weather).run("What is the weather?")

    assert result.status == "failed"
    assert "UnstorableTextError" in (result.error or "")
    assert [m.content for m in data_ledger.history(result.conversation_id)] == [
        "What is the weather?"
    ]
    assert data_ledger.conversation(result.conversation_id).lease_holder is None
    assert data_ledger.verify() == []


def test_arguments_nested_deeper_than_json_parses_from_a_provider_are_a_tool_error(
    data_ledger, fake_provider: FakeProvider
):
    """A real provider's client reads the arguments' JSON text itself: nested too deep for
    Python's parser, they are text that is not a JSON object, as malformed JSON is."""
    fake_provider.push(
        Reply(openai_completion(tool_calls=[openai_tool_call("get_weather", DEEP_JSON, "c1")])),
        Reply(openai_completion("sorry")),
    )
    with OpenAIChat("gpt-4o-mini", api_key="sk-test", base_url=fake_provider.openai_url) as llm:
        result = agent_on(data_ledger, llm, get_weather).run("What is the weather?")

    assert result.status == "completed", result.error
    (execution,) = data_ledger.tool_executions(result.run_id)
    assert execution.tool_call.raw_arguments == DEEP_JSON
    assert "not a JSON object" in (execution.error or "")
    sent_back = fake_provider.bodies()[1]["messages"][-1]
    assert sent_back["role"] == "tool" and "not a JSON object" in sent_back["content"]


# --- what a user writes: messages, titles, metadata -----------------------------------------------

TEXTS = [*HTML, *RICH_MARKUP, *CONTROL, *SQL_SYNTAX, *UNICODE, *PATHS, LONG]


@pytest.mark.parametrize("text", TEXTS, ids=value_id)
def test_hostile_text_in_a_message_a_title_and_metadata_is_stored_exactly(data_ledger, text):
    metadata = {text: text, "nested": [{"v": text}], "sql": SQL_SYNTAX[1]}
    conversation = data_ledger.create_conversation(title=text, metadata=metadata)
    llm = answering(InferenceResponse(content=text))
    result = agent_on(data_ledger, llm, name=text).run(text, conversation.id)

    stored = data_ledger.conversation(conversation.id)
    assert (stored.title, stored.metadata_) == (text, metadata)
    assert [m.content for m in data_ledger.history(conversation.id)] == [text, text]
    assert data_ledger.run(result.run_id).agent_name == text
    assert llm.requests[0].messages[-1].content == text  # the model got it as it was written


@pytest.mark.parametrize("text", UNSTORABLE, ids=value_id)
@pytest.mark.parametrize("where", ["message", "title", "metadata value", "metadata key"])
def test_text_the_ledger_cannot_store_is_refused_before_anything_is_written(
    recorded, unchanged, where, text
):
    ledger = recorded.ledger
    with pytest.raises(UnstorableTextError, match=r"NUL character|lone surrogate"):
        if where == "message":
            agent_on(ledger, answering(InferenceResponse(content="never"))).run(text)
        elif where == "title":
            ledger.create_conversation(title=text)
        elif where == "metadata value":
            ledger.create_conversation(metadata={"k": [text]})
        else:
            ledger.create_conversation(metadata={text: 1})


def varied_words(size: int) -> str:
    """``size`` characters of different words (a pasted log or document, say)."""
    digits = random.Random(22).randbytes(size // 2).hex()
    return " ".join(digits[i : i + 9] for i in range(0, size, 10))[:size]


def test_a_long_message_of_varied_words_is_stored_read_back_and_found(data_ledger):
    """On PostgreSQL the full-text index covers the first 100,000 characters of a message:
    over all of it, the tsvector of two megabytes of varied words was over PostgreSQL's limit,
    and the user's message was refused with a driver error."""
    text = f"{WORD} " + varied_words(2_000_000)
    result = agent_on(data_ledger, answering(InferenceResponse(content="noted"))).run(text)

    assert result.status == "completed"
    (question, _) = data_ledger.history(result.conversation_id)
    assert question.content == text
    first_words = " ".join(text.split()[:3])
    hits = data_ledger.search(first_words, conversation_id=result.conversation_id)
    assert [h.message.id for h in hits] == [question.id]
    assert data_ledger.verify() == []


def test_a_ten_megabyte_tool_argument_is_stored_and_read_back_exactly(data_ledger):
    city = "y" * 10_000_000
    call = ToolCall(id="c1", name="get_weather", arguments={"city": city})
    llm = answering(InferenceResponse(tool_calls=[call]), InferenceResponse(content="sunny"))
    result = agent_on(data_ledger, llm, get_weather).run("Weather?")

    (execution,) = data_ledger.tool_executions(result.run_id)
    assert execution.tool_call.arguments == {"city": city}
    assert execution.result == f"sunny in {city[:20]}"


# --- what is rendered: the terminal, HTML, files --------------------------------------------------

MARKUP_TITLE = f"{RICH_MARKUP[0]} {HTML[0]}"
ESCAPES = CONTROL[1]
"""A terminal sequence: red text."""
AGENT = f"../../agent-{HTML[1]}{RICH_MARKUP[0]}"
MODEL = f"{HTML[2]}//{HTML[0]}"
TOOL_NAME = f"../../tool-{HTML[1]}{RICH_MARKUP[0]}"
CONVERSATION = f"../../conversation-{RICH_MARKUP[0]}"


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"{RICH_MARKUP[1]} {ESCAPES} {HTML[0]}"


@tool
def explode(q: str) -> str:
    """Fail."""
    raise RuntimeError(f"{HTML[0]} {RICH_MARKUP[0]} {ESCAPES}")


@pytest.fixture(scope="module")
def rendered_ledger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A SQLite ledger whose data is markup, HTML, terminal sequences and paths everywhere the
    command line, the report and the exports show it (its own directory); its run's id."""
    path = tmp_path_factory.mktemp("rendered") / "ledger.db"
    calls = [
        ToolCall(id="c1", name="lookup", arguments={"q": RICH_MARKUP[0]}),
        ToolCall(id="c2", name=TOOL_NAME, arguments={"q": HTML[1]}),
        ToolCall(id="c3", name="explode", arguments={"q": "x"}),
    ]
    usage = {"input_tokens": 10, "output_tokens": 5}
    llm = answering(
        InferenceResponse(tool_calls=calls, model=MODEL, usage=usage),
        InferenceResponse(
            content=f"{RICH_MARKUP[1]} {ESCAPES} {HTML[0]}", model=MODEL, usage=usage
        ),
    )
    with Ledger.open(path) as ledger:
        ledger.create_conversation(conversation_id=CONVERSATION, title=MARKUP_TITLE)
        agent = agent_on(ledger, llm, lookup, explode, name=AGENT)
        result = agent.run(f"{RICH_MARKUP[0]} {ESCAPES} {HTML[1]}", CONVERSATION)
    return path, result.run_id


def strings_in(value: Any) -> set[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        return {value}
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return {s for item in items for s in strings_in(item)}


def files_under(directory: Path) -> set[Path]:
    return {p for p in directory.rglob("*") if p.is_file()}


RENDERED_COMMANDS = [
    ["conversations"],
    ["show", CONVERSATION],
    ["runs"],
    ["search", "bold"],
    ["trace", "RUN"],
    ["trace", "RUN", "--verbose"],
    ["analytics", "report"],
]


@pytest.mark.parametrize("command", RENDERED_COMMANDS, ids=" ".join)
def test_the_terminal_shows_markup_in_data_literally_and_runs_no_escape_sequence(
    rendered_ledger, command
):
    path, run_id = rendered_ledger
    args = [run_id if a == "RUN" else a for a in command]
    result = invoke("--db", str(path), *args, env={"COLUMNS": "400"})

    assert result.exit_code == 0, result.output
    assert RICH_MARKUP[0] in result.output  # printed, not applied
    assert "\x1b" not in result.output
    if command[0] in ("show", "search", "trace"):
        assert "\\x1b[31m" in result.output  # the sequence, written out


def test_an_html_report_escapes_every_text_from_the_ledger(rendered_ledger, tmp_path):
    path, _ = rendered_ledger
    page_path = tmp_path / "report.html"
    result = invoke("--db", str(path), "analytics", "report", "--html", str(page_path))
    assert result.exit_code == 0, result.output
    page = page_path.read_text("utf-8")

    assert not re.search(r"<script|<img|javascript:[^<]*</a", page, re.IGNORECASE)
    # The only links lead within the page, to a run's tree by its id: no text of the ledger
    # becomes an attribute of its own.
    links = re.findall(r"<a\b[^>]*>", page, re.IGNORECASE)
    assert links and all(re.fullmatch(r'<a href="#run-[0-9a-f-]+">', a) for a in links), links
    assert len(re.findall(r"href=", page, re.IGNORECASE)) == len(links)
    assert all(raw not in page for raw in HTML[:2])
    for shown in (AGENT, MODEL, MARKUP_TITLE):
        assert html.escape(shown) in page, shown
    assert files_under(tmp_path) == {page_path}


def test_exports_write_only_where_they_are_told_whatever_the_data(rendered_ledger, tmp_path):
    """The paths a user gives are theirs to choose; the files made under them are named by the
    ledger's tables and the days of their rows, never by an id, a name or any text in them."""
    path, _ = rendered_ledger
    before = files_under(path.parent)
    parquet, otlp, metadata = tmp_path / "parquet", tmp_path / "spans.jsonl", tmp_path / "m.json"
    for args in (
        ["export", "parquet", str(parquet)],
        ["export", "otlp", "--since", "2000-01-01", "--output", str(otlp)],
        ["datasette-metadata", "--output", str(metadata)],
    ):
        result = invoke("--db", str(path), *args)
        assert result.exit_code == 0, result.output

    assert files_under(path.parent) == before
    made = files_under(tmp_path)
    assert {otlp, metadata} <= made
    for file in made - {otlp, metadata}:
        table, *days, name = file.relative_to(parquet).parts
        assert re.fullmatch(r"[a-z_]+", table) and len(days) <= 1
        assert all(re.fullmatch(r"day=\d{4}-\d{2}-\d{2}|empty", day) for day in days)
        assert re.fullmatch(r"\w+\.parquet", name)
    spans = [json.loads(line) for line in otlp.read_text("utf-8").splitlines()]
    assert f"invoke_agent {AGENT}" in strings_in(spans)  # data, JSON-encoded
    described = metadata.read_text("utf-8")
    assert all(value not in described for value in (AGENT, MODEL, MARKUP_TITLE, TOOL_NAME))


def test_a_path_the_user_gives_is_theirs_even_when_it_climbs(
    rendered_ledger, tmp_path, monkeypatch
):
    path, _ = rendered_ledger
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    monkeypatch.chdir(inner)
    result = invoke("--db", str(path), "analytics", "report", "--html", "../../report.html")
    assert result.exit_code == 0, result.output
    assert files_under(tmp_path) == {tmp_path / "report.html"}


def test_the_viewer_renders_every_text_of_the_ledger_inert(rendered_ledger):
    """Markup, scripts, terminal sequences and paths in a title, an id, an agent's and a
    model's and a tool's name, arguments, results and errors: escaped, their control
    characters written out, and no id makes a link of its own."""
    from markupsafe import escape
    from starlette.testclient import TestClient

    from agentledger.ui import create_app

    path, run_id = rendered_ledger
    with Ledger.open(path, migrate=False, read_only=True) as ledger:
        client = TestClient(create_app(ledger), base_url="http://127.0.0.1:8765")
        pages = [
            client.get(address)
            for address in (
                "/",
                "/c/" + quote(CONVERSATION, safe=""),
                f"/r/{run_id}",
                "/?query=bold",
                "/?query=" + quote(HTML[0], safe=""),
                "/c/" + quote(HTML[0], safe=""),
                "/live/",
                "/live/c/" + quote(CONVERSATION, safe=""),
                f"/live/r/{run_id}",
                "/analytics",
            )
        ]
    assert [p.status_code for p in pages] == [200] * 5 + [404] + [200] * 4
    for page in (p.text for p in pages):
        tags = re.findall(r"<[^>]*>", page)
        assert not [t for t in tags if re.search(r"^<(script(?! src=\"/static/ui\.js\")|img)", t)]
        assert not [t for t in tags if re.search(r"\son\w+=|javascript:", t, re.I)]
        assert all(raw not in page for raw in HTML[:2])
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", page)
        links = re.findall(r'href="([^"]*)"', page)
        shape = r"/(static/ui\.css|analytics|[cr]/[\w%.~-]+(#step-[\w%.~-]+)?)?|#run-[\w.~-]+"
        assert all(re.fullmatch(shape, link) for link in links), links
    listing, conversation, run = (p.text for p in pages[:3])
    assert str(escape(MARKUP_TITLE)) in listing
    assert str(escape(AGENT)) in conversation and str(escape(TOOL_NAME)) in run
    assert str(escape(MODEL)) in run
    assert "\\x1b[31m" in conversation  # the sequence, written out
    assert f'href="/c/{quote(CONVERSATION, safe="")}"' in listing


# --- the example chat app -------------------------------------------------------------------------


def test_the_chat_app_sends_data_as_json_and_its_page_inserts_it_as_text(tmp_path):
    from examples.chat_app.app import OfflineModel, create_app

    app = create_app(str(tmp_path / "chat.db"), OfflineModel(words=3, delay=0.0))
    question = f"{HTML[1]} {HTML[0]} {RICH_MARKUP[0]}"

    async def exchange(client: httpx.AsyncClient) -> list[httpx.Response]:
        started = await client.post("/conversations/new/runs", json={"text": question})
        first = started.text.split("data: ", 1)[1].split("\n", 1)[0]
        conversation_id = json.loads(first)["conversation_id"]
        unstorable = await client.post(
            f"/conversations/{conversation_id}/runs", json={"text": "a\x00b"}
        )
        return [
            await client.get(f"/conversations/{conversation_id}"),
            await client.get("/conversations/" + httpx.URL(HTML[0]).path),
            await client.get("/"),
            unstorable,
        ]

    async def main() -> list[httpx.Response]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://chat") as client:
                return await exchange(client)

    shown, unknown, page, unstorable = asyncio.run(main())
    assert shown.headers["content-type"] == "application/json"
    messages = shown.json()["messages"]
    assert messages[0]["content"] == question
    assert len(messages) == 2  # the refused message left no trace
    assert unknown.status_code == 404 and unknown.headers["content-type"] == "application/json"
    assert "UnstorableTextError" in unstorable.text
    script = page.text
    assert "textContent" in script
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write", script)


# --- afterwards -----------------------------------------------------------------------------------


def test_the_shared_ledger_still_holds_its_run_after_every_hostile_value(recorded):
    with Database(raw_url(recorded.ledger)) as database:
        assert database.snapshot() == recorded.rows
    assert recorded.ledger.history(recorded.conversation_id)[-1].content == ANSWER
    assert recorded.ledger.verify() == []


def test_the_ledger_of_stored_hostile_values_is_sound(data_ledger):
    assert data_ledger.verify() == []
