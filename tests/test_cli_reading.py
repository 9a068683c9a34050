"""What the read commands print of a ledger: conversations by their title or first message
(the main ones unless --all), a conversation beside its trace (``show --trace``), a search
that finds words in the trace too (marked so, prefixes taken, the text shown around the word),
empty listings said in a line, and a file that is no ledger said to be none. Through click's
``CliRunner`` on both backends; ``Ledger.search(trace=True)`` and ``Ledger.turns`` as well."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentledger import AgentBuilder, InferenceResponse, ScriptedLLM, tool
from agentledger._loop import SubagentSpec
from agentledger.ledger import Ledger, SearchHit, TraceHit, search_snippet
from support.cli import flat, invoke, ok
from support.databases import BACKENDS, fresh_database
from support.interrupted import SHOWN, agent_on, begin, step, stream_shown, tool_step_then_answer
from support.subagents import Router, Script, answer, call, prompt, spawn

LONG = "Lisbon " + "tram " * 120 + "END-OF-RESULT"
"""A tool result longer than any terminal line: cut unless --full."""
QUESTION = "Which museums in Lisbon open on Mondays, and what does the first one cost?"


@tool
def museums(city: str) -> str:
    """Museums of a city."""
    return LONG


@tool
def prices(museum: str) -> str:
    """What a museum costs."""
    raise ValueError(f"no price list for {museum}")


@tool
def archive(topic: str) -> str:
    """The archive's notes on a topic."""
    return f"azulejo tiles of {topic}"


RESEARCHER = SubagentSpec(
    name="researcher",
    description="Finds facts in the archive.",
    system_prompt=prompt("researcher"),
    tools=(archive,),
)


@dataclass(frozen=True)
class Travel:
    url: str
    titled: str
    """A conversation with a title."""
    untitled: str
    """A conversation without one, whose run called tools (one failed) and a subagent."""
    run_id: str
    child_conversation: str
    interrupted: str
    """A conversation whose answer was cut short."""


def record(url: str) -> Travel:
    with Ledger.open(url) as ledger:
        titled = ledger.create_conversation(title="Weekend in Porto").id
        porto = ScriptedLLM([InferenceResponse(content="Porto is lovely in May.")])
        AgentBuilder().with_llm(porto).with_ledger(ledger).build().run("Porto?", titled)
        router = Router(
            {
                "guide": Script(
                    [
                        call("museums", city="Lisbon"),
                        call("prices", museum="Gulbenkian"),
                        spawn(("researcher", "Look up the tiles.")),
                        answer("The Gulbenkian opens on Mondays; its price is unknown."),
                    ]
                ),
                "researcher": Script([call("archive", topic="Lisbon"), answer("Tiles found.")]),
            }
        )
        guide = (
            AgentBuilder()
            .with_llm(router)
            .with_name("guide")
            .with_system_prompt(prompt("guide"))
            .with_tools([museums, prices])
            .with_subagents([RESEARCHER])
            .with_ledger(ledger)
            .build()
        )
        result = guide.run(QUESTION)
        child = ledger.run(result.child_run_ids[0]).conversation_id
        recorder = ledger.recorder
        streamer = agent_on(recorder, tool_step_then_answer())
        state = step(streamer, recorder, begin(streamer, recorder))
        stream_shown(recorder, state)
        assert state.run_id is not None
        recorder.interrupt_run(state.run_id, partial_text=SHOWN[-1])
    return Travel(url, titled, result.conversation_id, result.run_id, child, state.conversation_id)


@pytest.fixture(scope="module", params=BACKENDS)
def travel(request: pytest.FixtureRequest) -> Iterator[Travel]:
    with fresh_database(request.param, request) as url:
        yield record(url)


def json_lines(*args: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in ok(*args, "--json").splitlines()]


def test_conversations_shows_each_by_its_title_else_its_first_message_the_main_ones_only(travel):
    listed = flat(ok("--db", travel.url, "conversations"))
    assert "Weekend in Porto" in listed and QUESTION in listed and "subagent" not in listed
    ids = {c["id"] for c in json_lines("--db", travel.url, "conversations")}
    assert travel.child_conversation not in ids and travel.untitled in ids
    everything = json_lines("--db", travel.url, "conversations", "--all")
    assert travel.child_conversation in {c["id"] for c in everything}
    assert "subagent" in ok("--db", travel.url, "conversations", "--all")


def test_show_trace_prints_each_turn_beside_the_calls_results_errors_and_subagents(travel):
    shown = ok("--db", travel.url, "show", travel.untitled, "--trace")
    (short,) = [w for w in shown.split() if travel.run_id.startswith(w) and len(w) >= 8]
    assert f"run {short} · guide · completed" in shown
    lines = shown.splitlines()
    said, called = (
        lines.index("Which museums in Lisbon open on Mondays, and what does the first one cost?"),
        lines.index('  → museums(city="Lisbon")'),
    )
    answered = next(i for i, line in enumerate(lines) if "opens on Mondays" in line)
    assert said < called < answered  # what was said, what the run did, what it answered
    assert "  ← error: " in shown and "no price list for Gulbenkian" in shown
    assert "subagent run " in shown and "END-OF-RESULT" not in shown  # cut to the width
    assert "END-OF-RESULT" in ok("--db", travel.url, "show", travel.untitled, "--trace", "--full")
    cut = ok("--db", travel.url, "show", travel.interrupted, "--trace")
    assert "assistant (interrupted)" in cut and '→ get_weather(city="Lisbon")' in cut


def test_show_trace_json_prints_a_turn_per_run_with_its_messages_and_steps(travel):
    (turn,) = json_lines("--db", travel.url, "show", travel.untitled, "--trace")
    assert turn["run_id"] == travel.run_id
    assert [m["role"] for m in turn["messages"]] == ["user", "assistant"]
    tools = [t["tool_name"] for s in turn["steps"] for t in s["tool_executions"]]
    assert tools == ["museums", "prices", "spawn_subagent"]
    with Ledger.open(travel.url) as ledger:
        turns = ledger.turns(travel.untitled)
    assert [t.run_id for t in turns] == [travel.run_id] and len(turns[0].messages) == 2


def test_search_finds_words_in_the_trace_marked_as_such(travel):
    found = ok("--db", travel.url, "search", "azulejo")
    assert "trace: archive" in found and "azulejo tiles of Lisbon" in found
    (hit,) = json_lines("--db", travel.url, "search", "azulejo")
    assert hit["found_in"] == "trace" and hit["conversation_id"] == travel.child_conversation
    assert hit["tool_execution"]["result"] == "azulejo tiles of Lisbon"
    with Ledger.open(travel.url) as ledger:
        (only,) = ledger.search("azulejo", trace=True)
        assert isinstance(only, TraceHit) and only.tool_execution.tool_name == "archive"
        assert ledger.search("azulejo") == []  # the conversations alone, as before
        assert ledger.scoped(tenant_id="another").search("azulejo", trace=True) == []


def test_search_takes_prefixes_and_shows_the_text_around_the_word(travel):
    hits = json_lines("--db", travel.url, "search", "Gulben*")
    assert {h["found_in"] for h in hits} == {"conversation", "trace"}
    with Ledger.open(travel.url) as ledger:
        assert all(isinstance(h, SearchHit) for h in ledger.search("Gulben*"))
        assert ledger.search("Gulben") == []  # a whole word, without the *
    found = ok("--db", travel.url, "search", "END-OF-RESULT")
    assert "END-OF-RESULT" in found and "…" in found  # the end of a long result, around it


def test_a_snippet_is_centred_on_the_first_word_found():
    text = "a " * 100 + "Lisbon tram " + "b " * 100
    shown = search_snippet(text, "lisb*", 30)
    assert len(shown) <= 30 and shown.startswith("…") and shown.endswith("…")
    assert "Lisbon" in shown and abs(shown.index("Lisbon") - 12) <= 3
    assert shown[1] != " " and shown[-2] != " "  # whole words, no cut one at either end
    words = search_snippet("Lisbon " + "azulejo " * 20, "lisbon", 24)
    assert words == "Lisbon azulejo azulejo…"  # not "…azulej…"
    assert search_snippet("Café\nau lait", "cafe", 30) == "Café au lait"


def test_empty_listings_and_searches_say_so_in_a_line(travel, tmp_path):
    assert ok("--db", travel.url, "runs", "--status", "failed") == "no runs with status failed\n"
    assert ok("--db", travel.url, "search", "zeppelin") == "no matches for zeppelin\n"
    empty = tmp_path / "empty.db"
    ok("--db", str(empty), "db", "upgrade")
    assert ok("--db", str(empty), "conversations") == "no conversations\n"


def test_a_sqlite_file_of_another_application_is_named_no_ledger_and_never_upgraded(tmp_path):
    path = tmp_path / "app.db"
    with closing(sqlite3.connect(path)) as database, database:
        database.execute("CREATE TABLE t (x)")
    for command in (["conversations"], ["runs"], ["search", "x"]):
        result = invoke("--db", str(path), *command)
        assert result.exit_code == 1
        assert "not an agentledger ledger (its tables: t)" in flat(result.output)
        assert "upgrade" not in result.output
    with closing(sqlite3.connect(path)) as database:
        assert [n for (n,) in database.execute("SELECT name FROM sqlite_master")] == ["t"]


def test_a_missing_directory_is_said_to_be_missing(tmp_path):
    result = invoke("--db", str(tmp_path / "nowhere" / "ledger.db"), "runs")
    assert result.exit_code == 1
    assert f"the directory {tmp_path / 'nowhere'} does not exist" in flat(result.output)
    assert "upgrade" not in result.output
    assert not (tmp_path / "nowhere").exists()


def test_forgetting_a_conversation_forgets_its_trace_in_the_index(tmp_path: Path):
    travel = record(str(tmp_path / "forget.db"))
    with Ledger.open(travel.url) as ledger:
        assert ledger.search("azulejo", trace=True)
        ledger.forget(travel.untitled)
        assert ledger.search("azulejo", trace=True) == []
        assert ledger.verify() == []
    with closing(sqlite3.connect(tmp_path / "forget.db")) as database:
        (left,) = database.execute(
            "SELECT count(*) FROM tool_executions_fts WHERE tool_executions_fts MATCH 'azulejo'"
        ).fetchone()
    assert left == 0
