"""Retention of a LangGraph thread's checkpoints (``LedgerSaver.retain``, ``prune`` and
``agentledger prune``) on SQLite and PostgreSQL: the latest N of each namespace, or those newer
than a time, stay; every survivor reads back as it was (its messages, stored as ids against
versions that are gone, and its pending writes), the oldest survivor starts the history, the
graph goes on from the latest, and the conversation's rows all stay. A DeltaChannel keeps
the checkpoints it is rebuilt from; a scoped handle keeps to its tenant's threads."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import CheckpointTuple

from agentledger.errors import UsageError
from agentledger.integrations.langgraph import LedgerSaver
from agentledger.ledger import Ledger
from support.cli import flat, invoke, ok
from support.graphs import CONFIG, ask, delta_chat, react, replies
from support.ledger import Database


def _replies(turns: range) -> list[AIMessage]:
    return [m for turn in turns for m in replies(turn)]


TURNS = 17
"""Five checkpoints and four versions of the messages a turn: 85 checkpoints, and a chain of
versions longer than the one stored whole every 64."""


def _checkpoints(ledger: Ledger) -> dict[str, CheckpointTuple]:
    """The thread's checkpoints by id, newest first, read by a saver that never saw them."""
    return {t.config["configurable"]["checkpoint_id"]: t for t in LedgerSaver(ledger).list(CONFIG)}


def _at(checkpoint_id: str) -> Any:
    return {"configurable": {**CONFIG["configurable"], "checkpoint_id": checkpoint_id}}


def _assert_survivors_as_they_were(
    ledger: Ledger, before: dict[str, CheckpointTuple], kept: list[str]
) -> None:
    saver = LedgerSaver(ledger)
    for checkpoint_id in kept:
        now, then = saver.get_tuple(_at(checkpoint_id)), before[checkpoint_id]
        assert now is not None
        assert now.checkpoint["channel_values"] == then.checkpoint["channel_values"]
        assert (now.metadata, now.pending_writes) == (then.metadata, then.pending_writes)
        parent = then.parent_config["configurable"]["checkpoint_id"] if then.parent_config else None
        assert now.parent_config == (then.parent_config if parent in kept else None)
    history = list(react(saver, []).get_state_history(CONFIG))
    assert [s.config["configurable"]["checkpoint_id"] for s in history] == kept
    assert history[-1].parent_config is None  # the oldest survivor starts the history


def _time(value: Any) -> datetime:
    """A time as SQL reads it back: aware on PostgreSQL, UTC text on SQLite."""
    return (
        value if isinstance(value, datetime) else datetime.fromisoformat(value).replace(tzinfo=UTC)
    )


def test_retention_by_date_then_by_count_keeps_every_survivor_as_it_was(
    ledger: Ledger, db: Database, db_url: str
):
    graph = react(LedgerSaver(ledger), _replies(range(TURNS)))
    for turn in range(TURNS):
        ask(graph, turn)
    before = _checkpoints(ledger)
    assert len(before) == 5 * TURNS
    rows = {t: db.count(t) for t in ("conversation_messages", "step_executions", "tool_executions")}
    versions = db.count("graph_channel_values")
    made = db.rows("SELECT checkpoint_id, created_at FROM graph_checkpoints")
    times = {r["checkpoint_id"]: _time(r["created_at"]) for r in made}
    cutoff = times[list(before)[40]]
    newer = [c for c in before if times[c] > cutoff]

    assert LedgerSaver(ledger).retain(newer_than=cutoff) == len(before) - len(newer)
    _assert_survivors_as_they_were(ledger, before, newer)

    preview = ok("--db", db_url, "prune", "chat", "--keep-latest", "10", "--dry-run", "--json")
    assert json.loads(preview) == {"checkpoints": len(newer) - 10, "dry_run": True}
    assert db.count("graph_checkpoints") == len(newer)
    done = flat(ok("--db", db_url, "prune", "chat", "--keep-latest", "10", "--yes"))
    assert done == f"{len(newer) - 10} checkpoints deleted"
    _assert_survivors_as_they_were(ledger, before, newer[:10])

    assert db.count("graph_checkpoints") == 10
    assert db.count("graph_channel_values") < versions
    written = set(db.column("SELECT DISTINCT checkpoint_id FROM graph_writes"))
    assert written and written <= set(newer[:10])
    assert {t: db.count(t) for t in rows} == rows  # the conversation and its trace stay
    assert ledger.verify() == []

    state = ask(react(LedgerSaver(ledger), replies(TURNS)), TURNS)
    latest = before[newer[0]].checkpoint["channel_values"]["messages"]
    assert state["messages"][: len(latest)] == latest
    assert state["messages"][-1].content == f"Sunny, 22C ({TURNS})."


def test_pruning_a_delta_channel_keeps_the_checkpoints_its_value_is_rebuilt_from(
    ledger: Ledger, db: Database
):
    graph = delta_chat(LedgerSaver(ledger))
    for turn in range(5):
        ask(graph, turn)
    values = graph.get_state(CONFIG).values
    assert len(values["messages"]) == 10
    made = db.count("graph_checkpoints")

    LedgerSaver(ledger).prune(["chat"])

    again = delta_chat(LedgerSaver(ledger))
    assert again.get_state(CONFIG).values == values
    assert 1 < db.count("graph_checkpoints") < made
    assert len(ask(again, 5)["messages"]) == 12


def test_retaining_every_thread_keeps_to_the_handles_tenant(ledger: Ledger, db: Database):
    acme, other = LedgerSaver(ledger.scoped("acme")), LedgerSaver(ledger.scoped("other"))
    for saver, thread in ((acme, "acme-chat"), (acme, "acme-2"), (other, "other-chat")):
        config: Any = {"configurable": {"thread_id": thread}}
        react(saver, replies(0)).invoke({"messages": [HumanMessage("Weather?")]}, config)

    assert asyncio.run(acme.aretain(keep_latest=2)) == 2 * 3

    counts = db.rows("SELECT thread_id, COUNT(*) AS n FROM graph_checkpoints GROUP BY thread_id")
    assert {r["thread_id"]: r["n"] for r in counts} == {
        "acme-chat": 2,
        "acme-2": 2,
        "other-chat": 5,
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "retention needs keep_latest"),
        ({"keep_latest": 0}, "keep_latest must be 1 or more"),
        ({"keep_latest": "10"}, "keep_latest must be a whole number"),
        ({"newer_than": datetime(2026, 1, 1)}, "newer_than must be a timezone-aware datetime"),
        ({"thread_ids": "chat", "keep_latest": 1}, r"not one id: give \['chat'\]"),
    ],
)
def test_bad_retention_arguments_are_clear_errors(
    tmp_path: Path, arguments: dict[str, Any], message: str
):
    with Ledger.open(tmp_path / "ledger.db") as ledger, pytest.raises(UsageError, match=message):
        LedgerSaver(ledger).retain(**arguments)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "nothing to prune by: give --keep-latest N"),
        (["--keep-latest", "0"], "0 is not in the range x>=1"),
        (["--older-than", "soon"], "'soon' is not an age"),
    ],
)
def test_bad_prune_options_are_clear_errors(tmp_path: Path, args: list[str], message: str):
    result = invoke("--db", str(tmp_path / "ledger.db"), "prune", *args)
    assert result.exit_code == 2 and message in flat(result.output)


def test_prune_older_than_an_age_deletes_nothing_newer(ledger: Ledger, db_url: str):
    ask(react(LedgerSaver(ledger), replies(0)), 0)
    assert flat(ok("--db", db_url, "prune", "--older-than", "1h")) == "0 checkpoints deleted"
    assert LedgerSaver(ledger).retain(newer_than=datetime.now(UTC) + timedelta(hours=1)) == 5
