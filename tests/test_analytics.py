"""Analytics: DuckDB over the ledger, attached read-only, with the views of ``sql/``.

The views are checked three ways: against numbers worked out by hand for a small team of
agents recorded through the real ``Agent`` (a lead, a researcher it spawns twice, a checker
one researcher spawns, and a solo agent whose model has no price), on a clock that only moves
when a model "thinks" or a tool "works", so every duration is known; against invariants over
random run trees (hypothesis), on SQLite and PostgreSQL; and against the ``duckdb`` command
line running the same SQL files. The context views are checked against the ledger's rows for a
conversation compacted by observation masking and by summaries (one of them failed).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import math
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agentledger import (
    Agent,
    AgentBuilder,
    AgentState,
    AgentStatus,
    SubagentSpec,
    ToolCall,
    Usage,
    tool,
)
from agentledger._core import FunctionTool, estimate_tokens
from agentledger.analytics import Analytics, export_parquet
from agentledger.analytics._analytics import attach_statement, script
from agentledger.errors import ConfigurationError, LedgerOpenError, SchemaVersionError
from agentledger.ledger import Ledger
from agentledger.llm import InferenceRequest, InferenceResponse, ScriptedLLM
from support import sizes as suite_sizes
from support.clocks import FakeClock
from support.databases import BACKENDS, postgres_database, sqlite_url
from support.ledger import begin_by_hand
from support.migration_harness import migrate
from support.postgres import PostgresServer
from support.subagents import (
    TOKEN_COLUMNS,
    Database,
    Router,
    Script,
    answer,
    prompt,
    spawn,
    usage,
)

# --- the team: a small scenario worked out by hand ----------------------------------------------

DAY_ONE = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
DAY_TWO = datetime(2030, 1, 2, 9, 0, tzinfo=UTC)
DAY_TWO_LATER = datetime(2030, 1, 2, 10, 30, tzinfo=UTC)
LEAD_PAUSE_MS = 5
"""What the lead spends between its steps, outside them (a processor's work)."""


def naive(moment: datetime, ms: float = 0) -> datetime:
    """``moment`` plus ``ms`` as DuckDB hands timestamps back: UTC, without a zone."""
    return (moment + timedelta(milliseconds=ms)).replace(tzinfo=None)


def advancing(
    clock: FakeClock, ms: float, response: InferenceResponse
) -> Callable[[InferenceRequest], InferenceResponse]:
    """A scripted response the model takes ``ms`` milliseconds to give."""

    def respond(_request: InferenceRequest) -> InferenceResponse:
        clock.now += timedelta(milliseconds=ms)
        return response

    return respond


def work_tool(clock: FakeClock) -> FunctionTool:
    """A tool whose calls take exactly the milliseconds they are asked to, on ``clock``."""

    @tool
    def work(ms: int, fail: bool = False) -> str:
        """Work for ``ms`` milliseconds of the test's clock, then fail if asked to."""
        clock.now += timedelta(milliseconds=ms)
        if fail:
            raise RuntimeError(f"gave up after {ms} ms")
        return f"worked {ms} ms"

    return work


def works(*calls: dict[str, Any], usage: Usage, cost_usd: float | None = None) -> InferenceResponse:
    """A response calling the ``work`` tool once per set of arguments."""
    return InferenceResponse(
        tool_calls=[
            ToolCall(id=f"work_{n}", name="work", arguments=a) for n, a in enumerate(calls)
        ],
        usage=usage,
        cost_usd=cost_usd,
        finish_reason="tool_calls",
    )


@dataclass
class Pause:
    """A processor that spends ``ms`` of the clock before each step (between steps)."""

    clock: FakeClock
    ms: float

    def can_process(self, state: AgentState) -> bool:
        return True

    def process(self, state: AgentState, next: Callable[[AgentState], AgentState]) -> AgentState:
        self.clock.now += timedelta(milliseconds=self.ms)
        return next(state)


@dataclass
class Team:
    """The team scenario recorded in one ledger: run ids and conversation ids by label."""

    url: str
    runs: dict[str, str]
    conversations: dict[str, str]
    _analytics: Analytics | None = field(default=None, repr=False)

    @property
    def analytics(self) -> Analytics:
        """One connection shared by the module's tests (they only read)."""
        if self._analytics is None:
            self._analytics = Analytics.open(self.url)
        return self._analytics

    def label(self, run_id: str) -> str:
        return next(label for label, id_ in self.runs.items() if id_ == run_id)

    def labels(self) -> dict[str, str]:
        """Every id of the scenario to a label, to compare two ledgers with different ids: the
        runs, the users' conversations and the subagents' own."""
        labels = {v: k for k, v in {**self.runs, **self.conversations}.items()}
        for run_id, conversation_id in self.analytics.sql(
            "SELECT run_id, conversation_id FROM runs"
        ).fetchall():
            labels.setdefault(conversation_id, f"conversation of {labels[run_id]}")
        return labels

    def close(self) -> None:
        if self._analytics is not None:
            self._analytics.close()


def record_team(url: str) -> Team:
    """Day one, 12:00: the lead works (100 + 300 ms), spawns the researcher twice (the first
    works 200 ms, then 400 ms that fail; the second spawns the checker), then answers. Day two,
    09:00: the lead answers a follow-up in the same conversation, on another model. 10:30: a
    solo agent, whose model has no price, answers a conversation of its own."""
    clock = FakeClock(start=DAY_ONE, tick=timedelta(0))
    work = work_tool(clock)
    checker = SubagentSpec(
        name="checker",
        description="Checks one finding.",
        llm=ScriptedLLM(
            [
                advancing(
                    clock,
                    40,
                    answer("Checked.", usage=usage(30, 3, reasoning_tokens=3), cost_usd=2**-7),
                )
            ],
            model="model-tiny",
        ),
    )
    researcher = SubagentSpec(
        name="researcher",
        description="Researches with the work tool; may have a finding checked.",
        tools=(work,),
        subagents=(checker,),
        llm=ScriptedLLM(
            [
                # first run
                advancing(
                    clock,
                    10,
                    works(
                        {"ms": 200},
                        {"ms": 400, "fail": True},
                        usage=usage(50, 5, cache_write_tokens=10, reasoning_tokens=1),
                        cost_usd=2**-4,
                    ),
                ),
                advancing(clock, 10, answer("Found a.", usage=usage(60, 6), cost_usd=2**-5)),
                # second run: its spawn step has no price
                advancing(clock, 10, spawn(("checker", "check b"), usage=usage(70, 7))),
                advancing(
                    clock,
                    20,
                    answer(
                        "Found b, checked.",
                        usage=usage(80, 8, cache_read_tokens=20, reasoning_tokens=2),
                        cost_usd=2**-6,
                    ),
                ),
            ],
            model="model-small",
        ),
    )
    lead_llm = ScriptedLLM(
        [
            advancing(
                clock,
                20,
                works(
                    {"ms": 100},
                    {"ms": 300},
                    usage=usage(
                        100, 10, cache_read_tokens=40, cache_write_tokens=8, reasoning_tokens=2
                    ),
                    cost_usd=0.5,
                ),
            ),
            advancing(
                clock,
                30,
                spawn(
                    ("researcher", "find a"),
                    ("researcher", "find b"),
                    usage=usage(200, 20, reasoning_tokens=4),
                    cost_usd=0.25,
                ),
            ),
            advancing(
                clock,
                45,
                answer(
                    "Here is the plan.",
                    usage=usage(300, 30, cache_read_tokens=100, reasoning_tokens=6),
                    cost_usd=0.125,
                ),
            ),
            # day two, answered by another model
            advancing(
                clock,
                10,
                answer("Nothing else.", usage=usage(10, 1), cost_usd=2**-9).model_copy(
                    update={"model": "model-small"}
                ),
            ),
        ],
        model="model-large",
    )
    solo_llm = ScriptedLLM([answer("Hello.", usage=usage(5, 1))], model="model-free")
    with Ledger.open(url, clock=clock) as ledger:
        base = AgentBuilder().with_clock(clock).with_ledger(ledger)
        lead = (
            base.with_name("lead")
            .with_llm(lead_llm)
            .with_tools([work])
            .with_subagents([researcher])
            .with_processors(Pause(clock, LEAD_PAUSE_MS))
            .build()
        )
        first = lead.run("Plan the trip.")
        clock.now = DAY_TWO
        second = lead.run("Anything else?", first.conversation_id)
        clock.now = DAY_TWO_LATER
        solo = base.with_name("solo").with_llm(solo_llm).build().run("Hello?")
        r1, r2 = first.child_run_ids
        (checked,) = ledger.run_tree(r2).children
    for result in (first, second, solo):
        assert result.status is AgentStatus.COMPLETED, result
    return Team(
        url=url,
        runs={
            "L": first.run_id,
            "R1": r1,
            "R2": r2,
            "C": checked.run.id,
            "L2": second.run_id,
            "S": solo.run_id,
        },
        conversations={"A": first.conversation_id, "B": solo.conversation_id},
    )


class Teams:
    """The team (or another scenario: ``record``) recorded once per backend for the whole
    module, on first use."""

    def __init__(
        self, tmp: pytest.TempPathFactory, record: Callable[[str], Team] = record_team
    ) -> None:
        self.tmp = tmp
        self.record = record
        self.recorded: dict[str, Team] = {}
        self.databases = contextlib.ExitStack()

    def get(self, backend: str, server: PostgresServer | None = None) -> Team:
        """The team on ``backend``; ``server`` is the PostgreSQL server for ``postgresql``."""
        if backend not in self.recorded:
            self.recorded[backend] = self.record(self._database(backend, server))
        return self.recorded[backend]

    def _database(self, backend: str, server: PostgresServer | None) -> str:
        if backend == "sqlite":
            return sqlite_url(self.tmp.mktemp("team"))
        assert server is not None
        return self.databases.enter_context(postgres_database(server))

    def close(self) -> None:
        for team in self.recorded.values():
            team.close()
        self.databases.close()


@pytest.fixture(scope="module")
def teams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Teams]:
    recorded = Teams(tmp_path_factory)
    yield recorded
    recorded.close()


@pytest.fixture(scope="module", params=BACKENDS)
def team(request: pytest.FixtureRequest, teams: Teams) -> Team:
    if request.param == "sqlite":
        return teams.get("sqlite")
    return teams.get("postgresql", request.getfixturevalue("pg_server"))


def by(relation: duckdb.DuckDBPyRelation, *key: str) -> dict[Any, dict[str, Any]]:
    """The rows of ``relation`` as dicts, keyed by the columns ``key``."""
    rows = [dict(zip(relation.columns, row, strict=True)) for row in relation.fetchall()]
    keyed = {tuple(row[k] for k in key) if len(key) > 1 else row[key[0]]: row for row in rows}
    assert len(keyed) == len(rows), f"{key} is not a key of {rows}"
    return keyed


def one(relation: duckdb.DuckDBPyRelation) -> dict[str, Any]:
    """The one row of ``relation``, as a dict."""
    (row,) = relation.fetchall()
    return dict(zip(relation.columns, row, strict=True))


def pick(row: dict[str, Any], columns: Sequence[str]) -> tuple[Any, ...]:
    return tuple(row[c] for c in columns)


# --- run_rollup ---------------------------------------------------------------------------------

USAGE = ["steps", *TOKEN_COLUMNS, "cost_usd", "unpriced_steps"]
ROLLUP = ["steps", *TOKEN_COLUMNS, "cost_usd", "unpriced_steps", "tool_calls", "tool_errors"]

EXCLUSIVE = {
    #      steps  in   out  cache_r cache_w reason  cost        unpriced tools errors
    "L": (3, 600, 60, 140, 8, 12, 0.875, 0, 4, 0),
    "R1": (2, 110, 11, 0, 10, 1, 0.09375, 0, 2, 1),
    "R2": (2, 150, 15, 20, 0, 2, 0.015625, 1, 1, 0),
    "C": (1, 30, 3, 0, 0, 3, 0.0078125, 0, 0, 0),
    "L2": (1, 10, 1, 0, 0, 0, 0.001953125, 0, 0, 0),
    "S": (1, 5, 1, 0, 0, 0, None, 1, 0, 0),
}
INCLUSIVE = {
    #      runs  steps  in   out  cache_r cache_w reason  cost       unpriced tools errors
    "L": (4, 8, 890, 89, 160, 18, 18, 0.9921875, 1, 7, 1),
    "R1": (1, 2, 110, 11, 0, 10, 1, 0.09375, 0, 2, 1),
    "R2": (2, 3, 180, 18, 20, 0, 5, 0.0234375, 1, 1, 0),
    "C": (1, 1, 30, 3, 0, 0, 3, 0.0078125, 0, 0, 0),
    "L2": (1, 1, 10, 1, 0, 0, 0, 0.001953125, 0, 0, 0),
    "S": (1, 1, 5, 1, 0, 0, 0, None, 1, 0, 0),
}


def test_run_rollup_gives_every_run_its_own_usage_and_its_subtree_usage(team: Team) -> None:
    rows = by(team.analytics.run_rollup(), "run_id")

    assert {team.label(run_id) for run_id in rows} == set(EXCLUSIVE)
    for label, run_id in team.runs.items():
        row = rows[run_id]
        assert pick(row, [f"exclusive_{c}" for c in ROLLUP]) == EXCLUSIVE[label], label
        inclusive = ["runs", *ROLLUP]
        assert pick(row, [f"inclusive_{c}" for c in inclusive]) == INCLUSIVE[label], label


def test_run_rollup_places_every_run_in_its_tree(team: Team) -> None:
    rows = by(team.analytics.run_rollup(), "run_id")
    r = team.runs
    conversation_a, conversation_b = team.conversations["A"], team.conversations["B"]

    expected = {
        # label: depth, root, parent, path, agent path, model of its last step
        "L": (0, "L", None, ["L"], "lead", "model-large"),
        "R1": (1, "L", "L", ["L", "R1"], "lead > researcher", "model-small"),
        "R2": (1, "L", "L", ["L", "R2"], "lead > researcher", "model-small"),
        "C": (2, "L", "R2", ["L", "R2", "C"], "lead > researcher > checker", "model-tiny"),
        "L2": (0, "L2", None, ["L2"], "lead", "model-small"),
        "S": (0, "S", None, ["S"], "solo", "model-free"),
    }
    for label, (depth, root, parent, path, agent_path, model) in expected.items():
        row = rows[r[label]]
        assert row["depth"] == depth, label
        assert row["root_run_id"] == r[root], label
        assert row["parent_run_id"] == (r[parent] if parent else None), label
        assert row["path"] == [r[p] for p in path], label
        assert (row["agent_path"], row["agent_name"]) == (agent_path, agent_path.split(" > ")[-1])
        assert (row["model"], row["status"]) == (model, "completed"), label
    # A subagent run belongs to a conversation of its own, not to the user's.
    assert [rows[r[x]]["conversation_id"] for x in ("L", "L2", "S")] == [
        conversation_a,
        conversation_a,
        conversation_b,
    ]
    assert {rows[r[x]]["conversation_id"] for x in ("R1", "R2", "C")}.isdisjoint(
        {conversation_a, conversation_b}
    )


def test_run_rollup_times_each_run_and_its_own_steps(team: Team) -> None:
    """A run's wall time runs from its start to its end; own_step_ms sums its steps, which
    include the tools they called (a spawn's duration is the subagent's run), and not what
    happens between steps (the lead's pauses)."""
    rows = by(team.analytics.run_rollup(), "run_id")

    expected = {
        # label: started (ms after its day's start), wall_ms, own_step_ms
        "L": (DAY_ONE, 0, 1200, 420 + 720 + 45),
        "R1": (DAY_ONE, 460, 620, 610 + 10),
        "R2": (DAY_ONE, 1080, 70, 50 + 20),
        "C": (DAY_ONE, 1090, 40, 40),
        "L2": (DAY_TWO, 0, 15, 10),
        "S": (DAY_TWO_LATER, 0, 0, 0),
    }
    for label, (day, start, wall, own) in expected.items():
        row = rows[team.runs[label]]
        assert row["started_at"] == naive(day, start), label
        assert row["finished_at"] == naive(day, start + wall), label
        assert (row["wall_ms"], row["own_step_ms"]) == (wall, own), label


# --- tools ----------------------------------------------------------------------------------------

STATS = ["calls", "errors", "error_rate", "mean_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms"]
WORK_ALL = (4, 1, 0.25, 250, 250, 385, 397, 400)  # 100, 200, 300, 400 ms; the 400 failed
SPAWN_ALL = (3, 0, 0.0, 730 / 3, 70, 565, 609, 620)  # the subagent runs: 40, 70, 620 ms
WORK_LEAD = (2, 0, 0.0, 200, 200, 290, 298, 300)  # 100, 300
WORK_RESEARCHER = (2, 1, 0.5, 300, 300, 390, 398, 400)  # 200, 400 (failed)
SPAWN_LEAD = (2, 0, 0.0, 345, 345, 592.5, 614.5, 620)  # the researchers: 70, 620
SPAWN_RESEARCHER = (1, 0, 0.0, 40, 40, 40, 40, 40)  # the checker


@pytest.mark.parametrize(
    ("grouping", "expected"),
    [
        (None, {("work",): WORK_ALL, ("spawn_subagent",): SPAWN_ALL}),
        (
            "agent",
            {
                ("work", "lead"): WORK_LEAD,
                ("work", "researcher"): WORK_RESEARCHER,
                ("spawn_subagent", "lead"): SPAWN_LEAD,
                ("spawn_subagent", "researcher"): SPAWN_RESEARCHER,
            },
        ),
        (
            "model",
            {
                ("work", "model-large"): WORK_LEAD,
                ("work", "model-small"): WORK_RESEARCHER,
                ("spawn_subagent", "model-large"): SPAWN_LEAD,
                ("spawn_subagent", "model-small"): SPAWN_RESEARCHER,
            },
        ),
    ],
    ids=["per-tool", "by-agent", "by-model"],
)
def test_tool_stats_count_calls_and_errors_and_take_percentiles_of_durations(
    team: Team, grouping: Any, expected: dict[tuple[str, ...], tuple[float, ...]]
) -> None:
    relation = team.analytics.tool_stats(by=grouping)
    key = (
        ["tool_name"]
        if grouping is None
        else ["tool_name", grouping if grouping == "model" else "agent_name"]
    )

    rows = {tuple(row[k] for k in key): pick(row, STATS) for row in by(relation, *key).values()}

    assert rows.keys() == expected.keys()
    for group, stats in expected.items():
        assert rows[group] == pytest.approx(stats), group


# --- usage by model, agent, conversation, time --------------------------------------------------


def test_model_usage_sums_steps_by_the_model_that_answered_them(team: Team) -> None:
    rows = by(team.analytics.model_usage(), "model")

    assert {model: pick(row, ["runs", *USAGE]) for model, row in rows.items()} == {
        #              runs steps  in  out cache_r cache_w reason cost         unpriced
        "model-large": (1, 3, 600, 60, 140, 8, 12, 0.875, 0),
        "model-small": (3, 5, 270, 27, 20, 10, 3, 0.111328125, 1),  # R1, R2 and L2
        "model-tiny": (1, 1, 30, 3, 0, 0, 3, 0.0078125, 0),
        "model-free": (1, 1, 5, 1, 0, 0, 0, None, 1),
    }


def test_agent_usage_sums_each_agents_own_steps(team: Team) -> None:
    rows = by(team.analytics.agent_usage(), "agent_name")

    assert {agent: pick(row, ["runs", *USAGE]) for agent, row in rows.items()} == {
        #             runs steps  in  out cache_r cache_w reason cost          unpriced
        "lead": (2, 4, 610, 61, 140, 8, 12, 0.876953125, 0),
        "researcher": (2, 4, 260, 26, 20, 10, 3, 0.109375, 1),
        "checker": (1, 1, 30, 3, 0, 0, 3, 0.0078125, 0),
        "solo": (1, 1, 5, 1, 0, 0, 0, None, 1),
    }


def test_conversation_usage_counts_subagent_runs_into_the_users_conversation(team: Team) -> None:
    rows = by(team.analytics.conversation_usage(), "conversation_id")
    a, b = team.conversations["A"], team.conversations["B"]

    assert rows.keys() == {a, b}  # the subagents' own conversations are not listed apart
    columns = ["kind", "title", "runs", "subagent_runs", "first_run_at", "last_run_at", *USAGE]
    assert pick(rows[a], columns) == (
        "main",
        None,
        2,
        3,
        naive(DAY_ONE),
        naive(DAY_TWO, 15),
        9,
        900,
        90,
        160,
        18,
        18,
        0.994140625,
        1,
    )
    assert pick(rows[b], columns) == (
        "main",
        None,
        1,
        0,
        naive(DAY_TWO_LATER),
        naive(DAY_TWO_LATER),
        1,
        5,
        1,
        0,
        0,
        0,
        None,
        1,
    )


DAY_ONE_USAGE = [
    #  agent         model          steps  in  out cache_r cache_w reason  cost      unpriced
    ("checker", "model-tiny", 1, 30, 3, 0, 0, 3, 0.0078125, 0),
    ("lead", "model-large", 3, 600, 60, 140, 8, 12, 0.875, 0),
    ("researcher", "model-small", 4, 260, 26, 20, 10, 3, 0.109375, 1),
]
LEAD_DAY_TWO = ("lead", "model-small", 1, 10, 1, 0, 0, 0, 0.001953125, 0)
SOLO_DAY_TWO = ("solo", "model-free", 1, 5, 1, 0, 0, 0, None, 1)


@pytest.mark.parametrize(
    ("unit", "expected"),
    [
        (
            "day",
            [
                *((naive(DAY_ONE).replace(hour=0), *row) for row in DAY_ONE_USAGE),
                (naive(DAY_TWO).replace(hour=0), *LEAD_DAY_TWO),
                (naive(DAY_TWO).replace(hour=0), *SOLO_DAY_TWO),
            ],
        ),
        (
            "hour",
            [
                *((naive(DAY_ONE), *row) for row in DAY_ONE_USAGE),
                (naive(DAY_TWO), *LEAD_DAY_TWO),
                (naive(DAY_TWO_LATER).replace(minute=0), *SOLO_DAY_TWO),
            ],
        ),
    ],
)
def test_usage_over_time_buckets_steps_by_when_they_started(
    team: Team, unit: Any, expected: list[tuple[Any, ...]]
) -> None:
    relation = team.analytics.usage_over_time(unit)

    usage = [*USAGE[:6], "cache_write_1h_tokens", *USAGE[6:]]
    assert relation.columns == ["bucket", "agent_name", "model", *usage]
    rows = [(_as_datetime(row[0]), *row[1:]) for row in relation.fetchall()]
    no_hour_writes = [(*row[:9], 0, *row[9:]) for row in expected]
    assert rows == no_hour_writes  # in order: bucket, agent, model


def _as_datetime(value: datetime | date) -> datetime:
    return value if isinstance(value, datetime) else datetime(value.year, value.month, value.day)


# --- tree shape and completeness ------------------------------------------------------------------


def test_tree_shape_measures_every_tree_and_all_of_them(team: Team) -> None:
    rows = by(team.analytics.tree_shape(), "root_run_id")

    assert {
        team.label(root): pick(row, ["runs", "max_depth", "max_fan_out", "mean_fan_out"])
        for root, row in rows.items()
    } == {
        "L": (4, 2, 2, 1.5),  # the lead started two researchers, the second one a checker
        "L2": (1, 0, 0, None),
        "S": (1, 0, 0, None),
    }


def test_tree_shape_summary_measures_all_trees_in_one_row(team: Team) -> None:
    summary = team.analytics.tree_shape_summary()

    assert one(summary) == {
        "trees": 3,
        "trees_with_subagents": 1,
        "mean_runs_per_tree": 2.0,
        "max_runs_per_tree": 4,
        "max_depth": 2,
        "runs_by_depth": {0: 3, 1: 2, 2: 1},
        "mean_fan_out": 1.5,
        "p95_fan_out": pytest.approx(1.95),
        "max_fan_out": 2,
    }


def test_completeness_counts_the_steps_no_cost_covers(team: Team) -> None:
    analytics = team.analytics

    assert one(analytics.completeness()) == {
        "runs": 6,
        "running_runs": 0,
        "failed_runs": 0,
        "interrupted_runs": 0,
        "steps": 10,
        "unpriced_steps": 2,
        "unpriced_models": ["model-free", "model-small"],
    }
    assert analytics.running_runs().fetchall() == []
    unpriced = analytics.unpriced_steps().order("started_at")
    assert [(team.label(run_id), *rest) for _, run_id, *rest in unpriced.fetchall()] == [
        ("R2", "researcher", 0, "model-small", naive(DAY_ONE, 1080)),
        ("S", "solo", 0, "model-free", naive(DAY_TWO_LATER)),
    ]


def test_costs_stay_null_never_zero_where_nothing_is_priced(team: Team) -> None:
    analytics, solo = team.analytics, team.runs["S"]
    rollup = by(analytics.run_rollup(), "run_id")[solo]

    assert (rollup["exclusive_cost_usd"], rollup["inclusive_cost_usd"]) == (None, None)
    assert by(analytics.agent_usage(), "agent_name")["solo"]["cost_usd"] is None
    assert by(analytics.model_usage(), "model")["model-free"]["cost_usd"] is None
    assert (
        by(analytics.conversation_usage(), "conversation_id")[team.conversations["B"]]["cost_usd"]
        is None
    )
    solo_day = analytics.usage_over_time("day").filter("agent_name = 'solo'").fetchall()
    assert [row[-2:] for row in solo_day] == [(None, 1)]
    # ...while a tree with one unpriced step keeps the costs it knows, and says it is partial.
    lead = by(analytics.run_rollup(), "run_id")[team.runs["L"]]
    assert (lead["inclusive_cost_usd"], lead["inclusive_unpriced_steps"]) == (0.9921875, 1)


# --- the Python API -------------------------------------------------------------------------------


def test_relations_convert_to_pandas_arrow_and_polars(team: Team) -> None:
    relation = team.analytics.run_rollup().order("started_at, run_id")
    expected = relation.fetchall()
    columns = relation.columns
    solo = [row[0] for row in expected].index(team.runs["S"])

    frame = relation.df()
    assert list(frame.columns) == columns
    assert frame["run_id"].tolist() == [row[0] for row in expected]
    assert frame["inclusive_input_tokens"].tolist() == [
        row[columns.index("inclusive_input_tokens")] for row in expected
    ]
    assert frame["exclusive_cost_usd"].isna().tolist() == [i == solo for i in range(len(expected))]
    assert frame["path"].iloc[-1].tolist() == [team.runs["S"]]

    table = relation.arrow().read_all()
    assert table.column_names == columns
    assert table.num_rows == len(expected)
    assert table.column("exclusive_cost_usd").null_count == 1
    assert table.column("agent_path").to_pylist() == [
        row[columns.index("agent_path")] for row in expected
    ]

    polars_frame = relation.pl()
    assert polars_frame.columns == columns
    assert polars_frame.height == len(expected)
    assert polars_frame["exclusive_cost_usd"].null_count() == 1
    assert polars_frame["inclusive_steps"].to_list() == [
        row[columns.index("inclusive_steps")] for row in expected
    ]


def test_sql_takes_parameters_over_the_views_and_the_ledger_tables(team: Team) -> None:
    analytics = team.analytics

    researchers = analytics.sql(
        "SELECT run_id, exclusive_input_tokens FROM run_rollup "
        "WHERE depth = ? AND agent_name = ? ORDER BY started_at",
        [1, "researcher"],
    )
    assert researchers.fetchall() == [(team.runs["R1"], 110), (team.runs["R2"], 150)]

    failed = analytics.sql(
        "SELECT r.agent_path, t.tool_name, t.duration_ms, t.error FROM ledger.tool_executions AS t "
        "JOIN run_rollup AS r USING (run_id) WHERE t.tool_name = $tool AND t.is_error",
        params={"tool": "work"},
    ).fetchall()
    assert [(path, name, duration) for path, name, duration, _ in failed] == [
        ("lead > researcher", "work", 400.0)
    ]
    assert "gave up after 400 ms" in failed[0][3]
    # Relations compose: filter, order and limit before fetching.
    cheapest = (
        analytics.run_rollup()
        .filter("exclusive_cost_usd IS NOT NULL")
        .order("exclusive_cost_usd")
        .limit(1)
    )
    assert cheapest.fetchall()[0][0] == team.runs["L2"]


def test_postgresql_and_sqlite_give_the_same_results_for_the_same_runs(
    teams: Teams, pg_server: PostgresServer
) -> None:
    sqlite_team, postgres_team = teams.get("sqlite"), teams.get("postgresql", pg_server)

    def results(team: Team) -> dict[str, Any]:
        analytics, labels = team.analytics, team.labels()
        relations = {
            "run_tree": analytics.run_tree(),
            "run_rollup": analytics.run_rollup(),
            "tool_stats": analytics.tool_stats(),
            "tool_stats_by_agent": analytics.tool_stats(by="agent"),
            "tool_stats_by_model": analytics.tool_stats(by="model"),
            "tool_stats_by_server": analytics.tool_stats(by="server"),
            "model_usage": analytics.model_usage(),
            "agent_usage": analytics.agent_usage(),
            "conversation_usage": analytics.conversation_usage(),
            "usage_over_time_hour": analytics.usage_over_time("hour"),
            "usage_over_time_day": analytics.usage_over_time("day"),
            "tree_shape": analytics.tree_shape(),
            "tree_shape_summary": analytics.tree_shape_summary(),
            "running_runs": analytics.running_runs(),
            "unpriced_steps": analytics.unpriced_steps().project("* EXCLUDE (step_id)"),
            "completeness": analytics.completeness(),
        }
        return {
            name: (
                [str(t) for t in relation.types],
                sorted((_relabelled(row, labels) for row in relation.fetchall()), key=repr),
            )
            for name, relation in relations.items()
        }

    on_sqlite, on_postgres = results(sqlite_team), results(postgres_team)
    for name, result in on_sqlite.items():
        assert on_postgres[name] == result, name


def _relabelled(value: Any, labels: dict[str, str]) -> Any:
    """``value`` with the ids of one ledger replaced by the labels both ledgers share."""
    if isinstance(value, str):
        return labels.get(value, value)
    if isinstance(value, list | tuple):
        return type(value)(_relabelled(v, labels) for v in value)
    if isinstance(value, dict):
        return {k: _relabelled(v, labels) for k, v in value.items()}
    return value


# --- the duckdb command line ----------------------------------------------------------------------


def duckdb_cli() -> str:
    beside = shutil.which("duckdb", path=str(Path(sys.executable).parent))
    found = beside or shutil.which("duckdb")
    if found is None:
        pytest.skip("the duckdb command line is not installed (pip install duckdb-cli)")
    return found


def _same(value: Any, text: str) -> bool:
    """Whether ``text``, as the duckdb command line printed a value in CSV, is ``value``."""
    if value is None:
        return text == "NULL"
    if isinstance(value, bool):
        return text == str(value).lower()
    if isinstance(value, int):
        return int(text) == value
    if isinstance(value, float):
        return math.isclose(float(text), value, rel_tol=1e-12, abs_tol=1e-12)
    if isinstance(value, datetime):
        return datetime.fromisoformat(text) == value
    if isinstance(value, list):
        return text == "[" + ", ".join(map(str, value)) + "]"
    return bool(text == value)


CLI_VIEWS: dict[str, Callable[[Analytics], duckdb.DuckDBPyRelation]] = {
    "run_rollup": lambda a: a.run_rollup(),
    "tool_stats": lambda a: a.tool_stats(),
    "tool_stats_by_agent": lambda a: a.tool_stats(by="agent"),
    "tool_stats_by_server": lambda a: a.tool_stats(by="server"),
    "model_usage": lambda a: a.model_usage(),
    "conversation_usage": lambda a: a.conversation_usage(),
}


def test_the_sql_files_in_the_duckdb_cli_give_the_same_rows_as_the_python_api(
    team: Team, tmp_path: Path
) -> None:
    check_in_duckdb_cli(team, CLI_VIEWS, tmp_path)


def check_in_duckdb_cli(
    team: Team,
    methods: dict[str, Callable[[Analytics], duckdb.DuckDBPyRelation]],
    tmp_path: Path,
) -> None:
    """The views ``methods`` name, queried in the ``duckdb`` command line over ``script()``,
    give the rows (at least one) their methods give."""
    views = tmp_path / "views.sql"
    views.write_text(script(team.url), encoding="utf-8")
    # What a user types at the prompt of `duckdb -init views.sql`: each view into a CSV file.
    typed = [".mode csv", ".nullvalue NULL"]
    for view in methods:
        typed += [f".once {view}.csv", f"SELECT * FROM {view} ORDER BY ALL;"]

    completed = subprocess.run(
        [duckdb_cli(), "-init", str(views)],
        input="\n".join(typed) + "\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr
    assert "Error" not in completed.stderr, completed.stderr
    for view, method in methods.items():
        text = (tmp_path / f"{view}.csv").read_text(encoding="utf-8")
        header, *printed = list(csv.reader(io.StringIO(text)))
        relation = method(team.analytics).order("ALL")
        rows = relation.fetchall()
        assert header == relation.columns, view
        assert len(printed) == len(rows) > 0, view
        for row, texts in zip(rows, printed, strict=True):
            mismatched = [
                (c, v, t) for c, v, t in zip(header, row, texts, strict=True) if not _same(v, t)
            ]
            assert mismatched == [], (view, row)


def test_the_script_loads_the_scanner_from_its_package_and_attaches_read_only(team: Team) -> None:
    text = script(team.url)
    extension, attach = attach_statement(team.url)
    first, second, third, *_ = text.splitlines()

    assert first.startswith("LOAD '") and first.endswith(f"{extension}.duckdb_extension';")
    assert "duckdb_extension_" in first and "INSTALL" not in text
    assert second == f"{attach};"
    assert attach.endswith(
        "AS ledger (TYPE sqlite, READ_ONLY)"
        if extension == "sqlite_scanner"
        else "AS ledger (TYPE postgres, READ_ONLY)"
    )
    assert third == "SET TimeZone = 'UTC';"
    assert "CREATE OR REPLACE VIEW run_rollup" in text


# --- Parquet ------------------------------------------------------------------------------------

LEDGER_TABLES = (
    "agent_runs",
    "agentledger_version",
    "context_compactions",
    "conversation_messages",
    "conversations",
    "execution_buffer_rows",
    "forget_log",
    "step_executions",
    "tool_executions",
)


def test_export_parquet_writes_every_table_by_day_with_all_its_rows(
    team: Team, tmp_path: Path
) -> None:
    target = tmp_path / "parquet"

    files = team.analytics.export_parquet(target)

    assert files == sorted(target.rglob("*.parquet")) and files
    tables = {f.relative_to(target).parts[0] for f in files}
    assert tables == {*LEDGER_TABLES, "agentledger_deletions"}
    # every run committed, nothing compacted or forgotten: those three are empty, one file of
    # no rows each
    empty = {"execution_buffer_rows", "context_compactions", "forget_log"}
    for f in files:
        table, *middle, _ = f.relative_to(target).parts
        single = table in ("agentledger_version", "agentledger_deletions")  # no time column
        assert middle == ([] if single else [middle[0]]), f
        if table in empty:
            assert middle == ["empty"], f
        else:
            assert not middle or middle[0].startswith("day=2030-01-0"), f
    with Database(team.url) as db:
        counts = {t: db.scalar(f"SELECT COUNT(*) FROM {t}") for t in tables}
    reader = duckdb.connect()

    def read(table: str, columns: str = "*") -> duckdb.DuckDBPyRelation:
        pattern = (target / table / "**" / "*.parquet").as_posix()
        return reader.sql(
            f"SELECT {columns} FROM read_parquet('{pattern}', hive_partitioning = true)"
        )

    for table in tables:
        assert len(read(table).fetchall()) == counts[table], table
    by_day = read("step_executions", "day").aggregate("day, count(*)")
    assert sorted(by_day.fetchall()) == [(date(2030, 1, 1), 8), (date(2030, 1, 2), 2)]
    runs = read("agent_runs", "id, day").fetchall()
    assert {team.label(run_id): day for run_id, day in runs} == {
        "L": date(2030, 1, 1),
        "R1": date(2030, 1, 1),
        "R2": date(2030, 1, 1),
        "C": date(2030, 1, 1),
        "L2": date(2030, 1, 2),
        "S": date(2030, 1, 2),
    }
    reader.close()


# --- the context: its compactions, and its size over a conversation's life ------------------------

CONTEXT_BUDGET = 600
"""The talker's context budget, in tokens: small, so a few runs fill it."""
SUMMARY_COST = 2**-10


@tool
def fetch(page: int) -> str:
    """Fetch a page of the archive."""
    return f"page {page}: " + "z" * 400


def reporting(
    output_tokens: int, *, cache_read_tokens: int = 0, **response: Any
) -> Callable[[InferenceRequest], InferenceResponse]:
    """A response whose provider reports, as its input, the tokens ``estimate_tokens`` gives
    the request: the provider's count and the library's agree, so every step was sent exactly
    what the compaction before it left."""

    def respond(request: InferenceRequest) -> InferenceResponse:
        spent = usage(
            estimate_tokens(request.messages), output_tokens, cache_read_tokens=cache_read_tokens
        )
        return InferenceResponse(usage=spent, **response)

    return respond


def fetches(*pages: int) -> Callable[[InferenceRequest], InferenceResponse]:
    calls = [ToolCall(id=f"fetch_{p}", name="fetch", arguments={"page": p}) for p in pages]
    return reporting(10, tool_calls=calls, cost_usd=2**-6, finish_reason="tool_calls")


def summarizer_down(_request: InferenceRequest) -> InferenceResponse:
    raise RuntimeError("the summarizer is down")


@dataclass
class Compacted(Team):
    """The compaction scenario; ``summarizer_inputs``: the estimated tokens of each request
    the summarizer got, in order."""

    summarizer_inputs: list[int] = field(default_factory=list)


def record_compacted(url: str) -> Compacted:
    """The talker keeps its context within 600 tokens, the 2 most recent tool results raw.
    Runs T1 to T3 of its conversation answer; before T4 the conversation is summarized, and T4
    fetches five pages in four steps, the oldest results masked before steps 3 and 4; the
    summary before T5 fails (the run goes on with the whole conversation), the one before T6 is
    made, and after T6 the conversation is compacted again on demand, with no run after it.
    Then a lead, with no budget, has a helper subagent help in a conversation of its own. The
    clock moves a second at every reading."""
    clock = FakeClock(start=DAY_ONE, tick=timedelta(seconds=1))
    answers = reporting(50, content="Answer " + "x" * 200, cost_usd=2**-6, finish_reason="stop")
    chat = ScriptedLLM(
        [answers] * 3 + [fetches(1), fetches(2), fetches(3, 4), fetches(5)] + [answers] * 3,
        model="model-chat",
    )
    summary = reporting(3, cache_read_tokens=2, content="What was said.", cost_usd=SUMMARY_COST)
    summarizer = ScriptedLLM([summary, summarizer_down, summary, summary], model="model-summary")
    helper = SubagentSpec(
        name="helper",
        description="Helps.",
        llm=ScriptedLLM([answer("Helped.", usage=usage(5, 1))], model="model-small"),
    )
    lead_llm = ScriptedLLM(
        [spawn(("helper", "Help."), usage=usage(8, 2)), answer("Done.", usage=usage(20, 2))],
        model="model-chat",
    )
    with Ledger.open(url, clock=clock) as ledger:
        base = AgentBuilder().with_clock(clock).with_ledger(ledger)
        talker = (
            base.with_name("talker")
            .with_llm(chat)
            .with_tools([fetch])
            .with_context_budget(CONTEXT_BUDGET, keep_recent=2, summarizer=summarizer)
            .build()
        )
        first = talker.run("Hello " + "y" * 200)
        talks = [first]
        for n in range(2, 7):
            talks.append(talker.run(f"And {n} " + "y" * 200, first.conversation_id))
        assert talker.compact(first.conversation_id, force=True) is not None
        lead = base.with_name("lead").with_llm(lead_llm).with_subagents([helper]).build()
        delegated = lead.run("Delegate.")
    for result in (*talks, delegated):
        assert result.status is AgentStatus.COMPLETED, result
    return Compacted(
        url=url,
        runs={
            **{f"T{n}": result.run_id for n, result in enumerate(talks, 1)},
            "L": delegated.run_id,
            "H": delegated.child_run_ids[0],
        },
        conversations={"A": first.conversation_id, "B": delegated.conversation_id},
        summarizer_inputs=[estimate_tokens(r.messages) for r in summarizer.requests],
    )


@pytest.fixture(scope="module")
def compacteds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Teams]:
    recorded = Teams(tmp_path_factory, record_compacted)
    yield recorded
    recorded.close()


@pytest.fixture(scope="module", params=BACKENDS)
def compacted(request: pytest.FixtureRequest, compacteds: Teams) -> Compacted:
    if request.param == "sqlite":
        recorded = compacteds.get("sqlite")
    else:
        recorded = compacteds.get("postgresql", request.getfixturevalue("pg_server"))
    assert isinstance(recorded, Compacted)
    return recorded


def rows_of(relation: duckdb.DuckDBPyRelation) -> list[dict[str, Any]]:
    return [dict(zip(relation.columns, row, strict=True)) for row in relation.fetchall()]


def as_duckdb_gives(value: datetime | str) -> datetime:
    """A timestamp as raw SQL gives it (text from SQLite, with a zone from PostgreSQL) as
    DuckDB hands it back: UTC, without a zone."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


COMPACTION_COLUMNS = [
    "run_id",
    "step_index",
    "kind",
    "status",
    "messages",
    "first_seq",
    "last_seq",
    "summary_id",
    "tokens_before",
    "tokens_after",
    "model",
    *TOKEN_COLUMNS,
    "cost_usd",
    "error",
    "duration_ms",
]


def test_compaction_events_give_every_compaction_as_the_ledger_records_it(
    compacted: Compacted,
) -> None:
    events = rows_of(compacted.analytics.compaction_events())
    with Database(compacted.url) as db:
        recorded = db.rows("SELECT * FROM context_compactions ORDER BY created_at, id")
    with Ledger.open(compacted.url) as ledger:
        compactions = ledger.compactions(compacted.conversations["A"])

    assert [e["compaction_id"] for e in events] == [r["id"] for r in recorded]
    assert [c.id for c in compactions] == [r["id"] for r in recorded]
    for event, row in zip(events, recorded, strict=True):
        assert pick(event, COMPACTION_COLUMNS) == pick(row, COMPACTION_COLUMNS)
        assert event["created_at"] == as_duckdb_gives(row["created_at"])
        assert event["tokens_saved"] == row["tokens_before"] - row["tokens_after"]
        assert event["conversation_id"] == row["conversation_id"] == compacted.conversations["A"]
        assert event["conversation_kind"] == "main"
    # the agent of the run each compaction shrank: none yet for the summary made on demand
    assert [e["agent_name"] for e in events] == ["talker"] * 5 + [None]
    # What happened, worked out by hand: the summary before T4 replaced T1's and T2's question
    # and answer (seq 0 to 3; T3's, the 2 most recent, stay); T4 masked one result before its
    # step 3 and two before step 4 (masking starts from the whole results at every step); the
    # summary before T5 failed and changed nothing; the one before T6 replaced the summary
    # before it (seq 6) and T3's and T4's questions and answers (seq 4 to 8); the last, the
    # summary before it and T5's question and answer (seq 9 and 10).
    assert [pick(e, ["kind", "status", "messages", "first_seq", "last_seq"]) for e in events] == [
        ("summary", "completed", 4, 0, 3),
        ("masking", "completed", 1, None, None),
        ("masking", "completed", 2, None, None),
        ("summary", "failed", 3, None, None),
        ("summary", "completed", 5, 4, 8),
        ("summary", "completed", 3, 9, 10),
    ]
    assert all(e["tokens_saved"] > 0 for e in events if e["status"] == "completed")
    failed = events[3]
    assert (failed["tokens_saved"], failed["summary_id"], failed["error"]) == (
        0,
        None,
        "RuntimeError: the summarizer is down",
    )
    # A summary's call spent what the summarizer reported; a masking and a failed call, nothing.
    spent = ["model", *TOKEN_COLUMNS, "cost_usd"]
    first, _, third, fourth = compacted.summarizer_inputs
    assert [pick(e, spent) for e in events] == [
        ("model-summary", first, 3, 2, 0, 0, SUMMARY_COST),
        (None, 0, 0, 0, 0, 0, None),
        (None, 0, 0, 0, 0, 0, None),
        (None, 0, 0, 0, 0, 0, None),
        ("model-summary", third, 3, 2, 0, 0, SUMMARY_COST),
        ("model-summary", fourth, 3, 2, 0, 0, SUMMARY_COST),
    ]


def test_compaction_events_name_the_step_whose_context_each_compaction_shrank(
    compacted: Compacted,
) -> None:
    events = rows_of(compacted.analytics.compaction_events())
    labels = compacted.labels()

    placed = [
        (
            labels.get(e["run_id"]),
            e["step_index"],
            labels.get(e["before_run_id"]),
            e["before_step_index"],
        )
        for e in events
    ]

    # A masking, its own step; a summary, the first step of the conversation's next run: after
    # its summary message, or for a failed summary (which wrote none), started after it. The
    # summary made on demand after T6 has no run after it yet.
    assert placed == [
        (None, None, "T4", 0),
        ("T4", 3, "T4", 3),
        ("T4", 4, "T4", 4),
        (None, None, "T5", 0),
        (None, None, "T6", 0),
        (None, None, None, None),
    ]


SIZE_COLUMNS = ["conversation_id", "run_id", "agent_name", "step_index", "input_tokens"]


def test_context_size_gives_every_step_of_every_main_conversation_in_order(
    compacted: Compacted,
) -> None:
    sizes = rows_of(compacted.analytics.context_size())
    with Database(compacted.url) as db:
        steps = db.rows(
            "SELECT r.conversation_id, s.run_id, r.agent_name, s.step_index, s.input_tokens, "
            "s.started_at, s.message_id FROM step_executions AS s "
            "JOIN agent_runs AS r ON r.id = s.run_id "
            "JOIN conversations AS c ON c.id = r.conversation_id "
            "WHERE c.kind = 'main' ORDER BY r.conversation_id, r.started_at, s.step_index"
        )

    assert [pick(s, SIZE_COLUMNS) for s in sizes] == [pick(s, SIZE_COLUMNS) for s in steps]
    for size, step in zip(sizes, steps, strict=True):
        assert size["started_at"] == as_duckdb_gives(step["started_at"])
        assert size["called_model"] == (step["message_id"] is not None)
    # Runs and steps counted over each conversation; the helper's conversation is a subagent's.
    numbered = [
        (compacted.label(s["run_id"]), s["run_number"], s["step_index"], s["step_number"])
        for s in sizes
    ]
    talker = [
        ("T1", 1, 0, 1),
        ("T2", 2, 0, 2),
        ("T3", 3, 0, 3),
        *(("T4", 4, n, 4 + n) for n in range(5)),
        ("T5", 5, 0, 9),
        ("T6", 6, 0, 10),
    ]
    lead = [("L", 1, 0, 1), ("L", 1, 1, 2)]
    talker_first = compacted.conversations["A"] < compacted.conversations["B"]
    assert numbered == (talker + lead if talker_first else lead + talker)


def test_context_size_shows_what_the_compactions_just_before_each_step_took_out(
    compacted: Compacted,
) -> None:
    sizes = by(compacted.analytics.context_size(), "run_id", "step_index")
    with Database(compacted.url) as db:
        recorded = db.rows("SELECT * FROM context_compactions ORDER BY created_at, id")
    runs = compacted.runs
    # Where each compaction lands (see the test above): a masking on its step, the summaries on
    # the first step of T4, T5 and T6, the last one nowhere (no run came after it).
    summaries_before = iter([runs["T4"], runs["T5"], runs["T6"], "(none)"])
    landed: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in recorded:
        if row["kind"] == "masking":
            landed.setdefault((row["run_id"], row["step_index"]), []).append(row)
        else:
            landed.setdefault((next(summaries_before), 0), []).append(row)

    for key, size in sizes.items():
        rows = landed.get(key, [])
        done = [r for r in rows if r["status"] == "completed"]
        assert size["compactions"] == len(rows), key
        assert size["tokens_saved"] == sum(r["tokens_before"] - r["tokens_after"] for r in done)
        assert size["masked_results"] == sum(r["messages"] for r in done if r["kind"] == "masking")
        assert size["summarized_messages"] == sum(
            r["messages"] for r in done if r["kind"] == "summary"
        )
        # The provider was sent what the compaction left (a failed one left it all).
        for r in rows:
            assert size["input_tokens"] == r["tokens_after"], (key, r["kind"])
    # The context shrank at each completed summary, and stayed within the budget in T4.
    assert sizes[runs["T4"], 0]["input_tokens"] < sizes[runs["T3"], 0]["input_tokens"]
    assert sizes[runs["T6"], 0]["input_tokens"] < sizes[runs["T5"], 0]["input_tokens"]
    assert all(sizes[runs["T4"], n]["input_tokens"] <= CONTEXT_BUDGET for n in range(5))
    # Each compaction lands on one step, but the last.
    assert sum(s["compactions"] for s in sizes.values()) == len(recorded) - 1


def test_context_size_counts_the_messages_in_and_out_of_context_when_each_run_began(
    compacted: Compacted,
) -> None:
    sizes = rows_of(compacted.analytics.context_size())
    with Database(compacted.url) as db:
        messages = db.rows(
            "SELECT id, conversation_id, seq, run_id, summary_id, in_context "
            "FROM conversation_messages"
        )
    seq_of = {m["id"]: m["seq"] for m in messages}

    for size in sizes:
        began = min(m["seq"] for m in messages if m["run_id"] == size["run_id"])  # its question
        there = [
            m
            for m in messages
            if m["conversation_id"] == size["conversation_id"] and m["seq"] <= began
        ]
        # out of context: replaced by a summary written before the run's question
        out = [m for m in there if m["summary_id"] and seq_of[m["summary_id"]] < began]
        counted = (size["messages_in_context"], size["messages_out_of_context"])
        assert counted == (len(there) - len(out), len(out)), size
    first_steps = {
        compacted.label(s["run_id"]): (s["messages_in_context"], s["messages_out_of_context"])
        for s in sizes
        if s["step_index"] == 0
    }
    # T4: the summary, T3's question and answer, its own question; T5: T4's two more and its
    # own (the summary failed); T6: the new summary, T5's question and answer, its own.
    assert first_steps == {
        "T1": (1, 0),
        "T2": (3, 0),
        "T3": (5, 0),
        "T4": (4, 4),
        "T5": (6, 4),
        "T6": (4, 9),
        "L": (1, 0),
    }
    # What the ledger's in_context says now: out of context, what was when T6 began and what
    # the summary made after it replaced.
    talk = [m for m in messages if m["conversation_id"] == compacted.conversations["A"]]
    with Database(compacted.url) as db:
        last = db.scalar("SELECT messages FROM context_compactions ORDER BY created_at DESC")
    assert sum(1 for m in talk if not m["in_context"]) == first_steps["T6"][1] + last


def test_the_context_views_give_the_same_results_on_postgresql_and_sqlite(
    compacteds: Teams, pg_server: PostgresServer
) -> None:
    on_sqlite, on_postgres = compacteds.get("sqlite"), compacteds.get("postgresql", pg_server)

    def results(recorded: Team) -> dict[str, Any]:
        analytics, labels = recorded.analytics, recorded.labels()
        relations = {
            # ids made afresh, and durations measured, differ from one recording to the next
            "compaction_events": analytics.compaction_events().project(
                "* EXCLUDE (compaction_id, summary_id, duration_ms)"
            ),
            "context_size": analytics.context_size(),
            "conversation_runs": analytics.sql("SELECT * FROM conversation_runs"),
        }
        return {
            name: (
                [str(t) for t in relation.types],
                sorted((_relabelled(row, labels) for row in relation.fetchall()), key=repr),
            )
            for name, relation in relations.items()
        }

    sqlite_results, postgres_results = results(on_sqlite), results(on_postgres)
    for name, result in sqlite_results.items():
        assert postgres_results[name] == result, name


def test_the_context_views_in_the_duckdb_cli_give_the_same_rows_as_the_python_api(
    compacted: Compacted, tmp_path: Path
) -> None:
    views: dict[str, Callable[[Analytics], duckdb.DuckDBPyRelation]] = {
        "compaction_events": lambda a: a.compaction_events(),
        "context_size": lambda a: a.context_size(),
    }
    check_in_duckdb_cli(compacted, views, tmp_path)


def test_export_parquet_writes_the_compactions_with_all_their_rows(
    compacted: Compacted, tmp_path: Path
) -> None:
    files = compacted.analytics.export_parquet(tmp_path)

    exported = [f for f in files if f.relative_to(tmp_path).parts[0] == "context_compactions"]
    assert [f.relative_to(tmp_path).parts[1] for f in exported] == ["day=2030-01-01"]
    with Database(compacted.url) as db:
        recorded = db.rows("SELECT id, tokens_before, tokens_after FROM context_compactions")
    pattern = (tmp_path / "context_compactions" / "**" / "*.parquet").as_posix()
    with duckdb.connect() as reader:
        rows = reader.sql(
            f"SELECT id, tokens_before, tokens_after FROM read_parquet('{pattern}')"
        ).fetchall()
    assert sorted(rows) == sorted(
        pick(r, ["id", "tokens_before", "tokens_after"]) for r in recorded
    )
    assert len(rows) == 6


# --- runs that are not finished, steps without a price ----------------------------------------


def test_completeness_counts_unfinished_runs_and_unpriced_steps(
    db_url: str, make_clock: type[FakeClock]
) -> None:
    clock = make_clock(start=DAY_ONE, tick=timedelta(0))
    with Ledger.open(db_url, clock=clock) as ledger:
        base = AgentBuilder().with_clock(clock).with_ledger(ledger)

        def agent(name: str, *responses: InferenceResponse, model: str) -> Agent:
            llm = ScriptedLLM(responses, model=model)
            return base.with_name(name).with_llm(llm).with_tools([work_tool(clock)]).build()

        done = agent(
            "done",
            works({"ms": 1}, usage=usage(10, 1)),  # no price
            answer("Done.", usage=usage(20, 2), cost_usd=0.5),
            model="model-x",
        ).run("Do it.")
        failed = agent("broken", model="model-y").run("Fail.")  # the model raises: an error step
        # Runs whose process died after one step: one abandoned by recover(), one left running.
        doomed = agent("doomed", answer("Half way.", usage=usage(3, 1), cost_usd=0.125), model="z")
        state = begin_by_hand(doomed, ledger, "Keep going.")
        after = doomed.step(state)
        ledger.recorder.record_step(after.run_id, after.current_execution, after.filed_since(state))
        (interrupted,) = ledger.recover(stale_after=0)
        clock.now = DAY_ONE + timedelta(hours=1)
        busy = agent("busy", answer("Half way.", usage=usage(7, 1), cost_usd=0.25), model="z")
        running = begin_by_hand(busy, ledger, "Keep going.")
        after = busy.step(running)
        ledger.recorder.record_step(
            after.run_id, after.current_execution, after.filed_since(running)
        )
        # ...and a run whose process died before its first step.
        fresh = begin_by_hand(agent("fresh", model="z"), ledger, "Start.")
    assert (done.status, failed.status) == (AgentStatus.COMPLETED, AgentStatus.FAILED)
    assert interrupted.status == "interrupted"

    with Analytics.open(db_url) as analytics:
        assert one(analytics.completeness()) == {
            "runs": 5,
            "running_runs": 2,
            "failed_runs": 1,
            "interrupted_runs": 1,
            "steps": 5,
            "unpriced_steps": 1,  # the error step called no model: it has no price to miss
            "unpriced_models": ["model-x"],
        }
        assert analytics.running_runs().order("started_at, run_id").fetchall() == [
            (
                running.run_id,
                running.conversation_id,
                "busy",
                0,
                naive(DAY_ONE, 3.6e6),
                naive(DAY_ONE, 3.6e6),
            ),
            (
                fresh.run_id,
                fresh.conversation_id,
                "fresh",
                0,
                naive(DAY_ONE, 3.6e6),
                naive(DAY_ONE, 3.6e6),
            ),
        ]
        assert [row[1:5] for row in analytics.unpriced_steps().fetchall()] == [
            (done.run_id, "done", 0, "model-x")
        ]
        rollup = by(analytics.run_rollup(), "run_id")
        columns = ["status", "finished_at", "wall_ms", "exclusive_steps", "exclusive_cost_usd"]
        assert pick(rollup[running.run_id], columns) == ("running", None, None, 1, 0.25)
        assert pick(rollup[fresh.run_id], columns) == ("running", None, None, 0, None)
        assert pick(rollup[failed.run_id], [*columns[:1], *columns[3:]]) == ("failed", 1, None)
        assert pick(rollup[interrupted.id], [*columns[:1], *columns[3:]]) == (
            "interrupted",
            1,
            0.125,
        )
        assert pick(rollup[done.run_id], ["exclusive_cost_usd", "exclusive_unpriced_steps"]) == (
            0.5,
            1,
        )
        # A conversation whose only run has not taken a step yet is there, with nothing spent.
        spent = by(analytics.conversation_usage(), "conversation_id")[fresh.conversation_id]
        assert pick(spent, ["runs", "subagent_runs", *USAGE]) == (1, 0, 0, 0, 0, 0, 0, 0, None, 0)


def test_an_empty_ledger_gives_empty_views_and_zero_counts(db_url: str) -> None:
    Ledger.open(db_url).close()

    with Analytics.open(db_url) as analytics:
        for relation in (
            analytics.run_tree(),
            analytics.run_rollup(),
            analytics.tool_stats(),
            analytics.tool_stats(by="agent"),
            analytics.tool_stats(by="server"),
            analytics.model_usage(),
            analytics.agent_usage(),
            analytics.conversation_usage(),
            analytics.usage_over_time("week"),
            analytics.tree_shape(),
            analytics.running_runs(),
            analytics.unpriced_steps(),
            analytics.compaction_events(),
            analytics.context_size(),
        ):
            assert relation.fetchall() == []
        counts = one(analytics.completeness())
        assert counts.pop("unpriced_models") is None
        assert set(counts.values()) == {0}


# --- opening, and what is never done -------------------------------------------------------------


def test_open_takes_a_path_a_string_or_a_sqlite_url_even_with_quotes_and_spaces_in_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "it's a folder" / "my ledger.db"
    path.parent.mkdir()
    Ledger.open(path).close()

    for url in (path, str(path), f"sqlite:///{path.as_posix()}"):
        with Analytics.open(url) as analytics:
            assert one(analytics.completeness())["runs"] == 0


def test_opening_a_missing_file_names_it_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "ledger.db"

    with pytest.raises(LedgerOpenError, match="does not exist") as raised:
        Analytics.open(missing)

    assert str(missing) in str(raised.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda p: _sqlite_with(p, "CREATE TABLE notes (body TEXT)"), id="another-sqlite-db"
        ),
        pytest.param(lambda p: p.write_bytes(b""), id="empty-file"),
        pytest.param(lambda p: p.write_text("not a database at all\n" * 100), id="text-file"),
    ],
)
def test_opening_a_file_that_is_not_a_ledger_raises_ledger_open_error(
    tmp_path: Path, make: Callable[[Path], object]
) -> None:
    path = tmp_path / "other.db"
    make(path)
    before = path.read_bytes()

    with pytest.raises(LedgerOpenError, match=r"other\.db"):
        Analytics.open(path)

    assert path.read_bytes() == before


def _sqlite_with(path: Path, statement: str) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(statement)
        conn.commit()


def test_a_ledger_migrated_by_a_newer_agentledger_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    Ledger.open(path).close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE agentledger_version SET version_num = '9999_from_the_future'")
        conn.commit()

    with pytest.raises(SchemaVersionError, match="9999_from_the_future"):
        Analytics.open(path)


def test_a_ledger_at_an_older_revision_is_refused_with_the_upgrade_to_run(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    Ledger.open(path).close()
    migrate(str(path), "0001", direction="downgrade")

    with pytest.raises(SchemaVersionError, match="db upgrade"):
        Analytics.open(path)


def test_analytics_never_writes_the_ledger_file(tmp_path: Path) -> None:
    team = record_team(str(tmp_path / "ledger.db"))
    ledger_file = tmp_path / "ledger.db"
    before = (
        hashlib.sha256(ledger_file.read_bytes()).hexdigest(),
        os.stat(ledger_file).st_mtime_ns,
    )
    listing = sorted(p.name for p in tmp_path.iterdir())

    with Analytics.open(ledger_file) as analytics:
        for name in (
            "run_rollup",
            "tool_stats",
            "conversation_usage",
            "tree_shape_summary",
            "completeness",
        ):
            getattr(analytics, name)().fetchall()
        analytics.usage_over_time("hour").fetchall()
    export_parquet(ledger_file, tmp_path / "export")

    after = (hashlib.sha256(ledger_file.read_bytes()).hexdigest(), os.stat(ledger_file).st_mtime_ns)
    assert after == before
    # Not even the -wal and -shm files SQLite makes beside a WAL ledger it reads are left.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*listing, "export"])
    assert team.runs.keys() == EXCLUSIVE.keys()


def test_writes_through_analytics_are_refused_by_the_read_only_attach(team: Team) -> None:
    with pytest.raises(duckdb.Error, match=r"(?i)read.only"):
        team.analytics.sql("DELETE FROM ledger.tool_executions").fetchall()
    with pytest.raises(duckdb.Error, match=r"(?i)read.only"):
        team.analytics.sql("CREATE TABLE ledger.scratch (x INTEGER)").fetchall()

    assert team.analytics.sql("SELECT count(*) FROM ledger.tool_executions").fetchall() == [(7,)]


@pytest.mark.parametrize(
    ("use", "package", "extra"),
    [
        (lambda ledger: Analytics.open(ledger), "duckdb-extension-sqlite-scanner", "analytics"),
        (
            lambda _: script("postgresql://someone@localhost/ledger"),
            "duckdb-extension-postgres-scanner",
            "analytics-postgresql",
        ),
    ],
    ids=["sqlite-open", "postgresql-script"],
)
def test_a_missing_extension_package_is_named_with_the_command_that_installs_it(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    use: Callable[[Path], object],
    package: str,
    extra: str,
) -> None:
    ledger = tmp_path / "ledger.db"
    Ledger.open(ledger).close()
    monkeypatch.setitem(sys.modules, package.replace("-", "_"), None)  # as if not installed

    with pytest.raises(ConfigurationError, match="not installed") as raised:
        use(ledger)

    assert f"pip install '{package}=={duckdb.__version__}'" in str(raised.value)
    assert f"(or: pip install 'agentledger[{extra}]')" in str(raised.value)


def test_an_extension_built_for_another_duckdb_is_refused_naming_both_versions(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.db"
    Ledger.open(path).close()
    installed = duckdb.__version__
    monkeypatch.setattr(duckdb, "__version__", "0.9.2")

    with pytest.raises(ConfigurationError) as raised:
        Analytics.open(path)

    message = str(raised.value)
    assert "duckdb-extension-sqlite-scanner" in message
    assert f"for DuckDB {installed}, but DuckDB 0.9.2 is installed" in message


def test_usage_over_time_refuses_a_unit_it_does_not_know(team: Team) -> None:
    with pytest.raises(ConfigurationError, match="year"):
        team.analytics.usage_over_time("year")  # type: ignore[arg-type]


def test_the_repr_of_analytics_never_shows_the_password() -> None:
    connection = duckdb.connect()
    analytics = Analytics(connection, "postgresql+psycopg://alice:s3cret@db.example/ledger")

    assert "s3cret" not in repr(analytics)
    assert "alice" in repr(analytics)
    analytics.close()


# --- random run trees ---------------------------------------------------------------------------

SUBAGENT_STEPS = 20
"""A subagent's steps limit (the builder's default), shared with the subtree below it."""
MODELS = ("model-a", "model-b", None)


@dataclass(frozen=True)
class Node:
    """A run of a random tree: a first step calling the ``check`` tool once per entry of
    ``checks`` (True: the call fails) when there are any, then its children spawned ``batch``
    at a time, one step a batch, then its answer. ``responses`` gives the usage, cost and model
    of each step's response, in order; the last one is the answer's."""

    checks: tuple[bool, ...]
    children: tuple[Node, ...]
    batch: int
    responses: tuple[tuple[Usage, float | None, str | None], ...]

    @property
    def steps(self) -> int:
        return (1 if self.checks else 0) + math.ceil(len(self.children) / self.batch) + 1

    def used(self) -> tuple[tuple[Usage, float | None, str | None], ...]:
        return (*self.responses[: self.steps - 1], self.responses[-1])

    def subtree_steps(self) -> int:
        return self.steps + sum(child.subtree_steps() for child in self.children)

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            yield from child.walk()

    def within(self, limit: int) -> Node:
        """This node with its last children dropped until its subtree fits ``limit`` steps."""
        node = self
        while node.subtree_steps() > limit:
            node = Node(node.checks, node.children[:-1], node.batch, node.responses)
        return node


responses_ = st.tuples(
    st.builds(
        Usage,
        input_tokens=st.integers(0, 500),
        output_tokens=st.integers(0, 100),
        cache_read_tokens=st.integers(0, 50),
        cache_write_tokens=st.integers(0, 50),
        reasoning_tokens=st.integers(0, 30),
    ),
    st.none() | st.integers(0, 1024).map(lambda n: n / 1024),  # exact in binary: sums are too
    st.sampled_from(MODELS),
)


def trees(depth: int = 0) -> st.SearchStrategy[Node]:
    """Trees of depth at most 3, at most 3 children a node; below the root each subtree fits
    the steps limit it shares, so every run answers."""
    kids = st.just(()) if depth == 3 else st.lists(trees(depth + 1), max_size=3).map(tuple)
    nodes = st.builds(
        Node,
        st.lists(st.booleans(), max_size=2).map(tuple),
        kids,
        st.integers(1, 3),
        st.lists(responses_, min_size=5, max_size=5).map(tuple),
    )
    return nodes if depth == 0 else nodes.map(lambda node: node.within(SUBAGENT_STEPS))


@tool
def check(fail: bool) -> str:
    """Check something; fail if asked to."""
    if fail:
        raise ValueError("the check failed")
    return "fine"


def _respond(
    response: InferenceResponse, cost: float | None, model: str | None
) -> InferenceResponse:
    return response.model_copy(update={"cost_usd": cost, "model": model})


def spec_and_scripts(node: Node, name: str, scripts: dict[str, Script]) -> SubagentSpec:
    """The spec of ``node``, named ``name``; the scripts of its whole subtree go in ``scripts``."""
    names = [f"{name}_{n}" for n in range(len(node.children))]
    children = tuple(
        spec_and_scripts(child, child_name, scripts)
        for child, child_name in zip(node.children, names, strict=True)
    )
    *before, (last_usage, last_cost, last_model) = node.used()
    steps: list[InferenceResponse] = []
    if node.checks:
        u, c, m = before.pop(0)
        calls = [
            ToolCall(id=f"check_{n}", name="check", arguments={"fail": f})
            for n, f in enumerate(node.checks)
        ]
        steps.append(
            _respond(InferenceResponse(tool_calls=calls, usage=u, finish_reason="tool_calls"), c, m)
        )
    batches = [names[i : i + node.batch] for i in range(0, len(names), node.batch)]
    for batch, (u, c, m) in zip(batches, before, strict=True):
        steps.append(_respond(spawn(*((n, f"task of {n}") for n in batch), usage=u), c, m))
    steps.append(_respond(answer(f"answer of {name}", usage=last_usage), last_cost, last_model))
    scripts[name] = Script(steps)
    return SubagentSpec(
        name=name,
        description=f"Node {name}.",
        system_prompt=prompt(name),
        tools=(check,),
        subagents=children,
    )


def _cost_sum(costs: Sequence[float | None]) -> float | None:
    """A sum of costs as the ledger means it: the known ones; NULL when none is known."""
    known = [c for c in costs if c is not None]
    return sum(known) if known else None


SUMMED = [*TOKEN_COLUMNS, "steps", "tool_calls", "tool_errors", "unpriced_steps"]


def _ledger_sums(db: Database) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Straight from the ledger's tables: per run, its steps' usage and its tool calls; per
    user conversation, the usage of every step of the run trees its runs started."""
    tokens = ", ".join(f"SUM(s.{c}) AS {c}" for c in TOKEN_COLUMNS)
    unpriced = "SUM(CASE WHEN s.step_type <> 'error' AND s.cost_usd IS NULL THEN 1 ELSE 0 END)"
    per_run = {
        row["run_id"]: row
        for row in db.rows(
            f"SELECT s.run_id, COUNT(*) AS steps, {tokens}, SUM(s.cost_usd) AS cost_usd, "
            f"{unpriced} AS unpriced_steps FROM step_executions AS s GROUP BY s.run_id"
        )
    }
    for row in db.rows(
        "SELECT run_id, COUNT(*) AS tool_calls, "
        "SUM(CASE WHEN is_error THEN 1 ELSE 0 END) AS tool_errors "
        "FROM tool_executions GROUP BY run_id"
    ):
        per_run[row["run_id"]].update(row)
    per_conversation = {
        row["conversation_id"]: row
        for row in db.rows(
            f"SELECT root.conversation_id, COUNT(*) AS steps, {tokens}, "
            "SUM(s.cost_usd) AS cost_usd FROM step_executions AS s "
            "JOIN agent_runs AS r ON r.id = s.run_id "
            "JOIN agent_runs AS root ON root.id = r.root_run_id "
            "GROUP BY root.conversation_id"
        )
    }
    return per_run, per_conversation


@dataclass
class Live:
    """A ledger, an ``Analytics`` over it and plain SQL on it, all open while runs are added:
    the views read the ledger as it is at each query."""

    url: str
    ledger: Ledger
    analytics: Analytics
    db: Database


@pytest.fixture
def live(db_url: str) -> Iterator[Live]:
    # Ledger.open first: it creates the ledger Analytics.open attaches.
    with (
        Ledger.open(db_url, synchronous="NORMAL") as ledger,  # no fsync per commit: faster
        Database(db_url) as db,
        Analytics.open(db_url) as analytics,
    ):
        yield Live(db_url, ledger, analytics, db)


# The examples accumulate in one ledger per backend (the invariants hold for any ledger, and a
# fresh database per example would cost seconds); shrinking is left out for the same reason.
@settings(
    max_examples=suite_sizes.size(8, 40),
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(tree=trees())
def test_inclusive_usage_is_the_sum_of_exclusive_usage_over_the_subtree_on_random_trees(
    live: Live, tree: Node
) -> None:
    scripts: dict[str, Script] = {}
    spec = spec_and_scripts(tree, "root", scripts)
    result = (
        AgentBuilder()
        .with_llm(Router(dict(scripts)))
        .with_name("root")
        .with_system_prompt(prompt("root"))
        .with_tools([check])
        .with_subagents(spec.subagents)
        .with_max_steps(None)
        .with_ledger(live.ledger)
        .build()
        .run("Go.")
    )
    assert result.status is AgentStatus.COMPLETED
    analytics = live.analytics
    rollup = by(analytics.run_rollup(), "run_id")
    paths = {run_id: row["path"] for run_id, row in by(analytics.run_tree(), "run_id").items()}
    conversations = by(analytics.conversation_usage(), "conversation_id")
    per_model = analytics.model_usage().fetchall()
    model_columns = analytics.model_usage().columns
    per_run, per_conversation = _ledger_sums(live.db)
    runs = {row["id"]: row for row in live.db.rows("SELECT id, root_run_id, depth FROM agent_runs")}

    assert rollup.keys() == runs.keys()
    for run_id, row in rollup.items():
        # placed in the tree as the ledger records it
        assert row["path"] == paths[run_id]
        assert paths[run_id][-1] == run_id and len(paths[run_id]) == row["depth"] + 1
        assert (row["root_run_id"], row["depth"]) == (
            runs[run_id]["root_run_id"],
            runs[run_id]["depth"],
        )
        # exclusive: the run's own step and tool rows
        own = per_run.get(run_id, {})
        for column in SUMMED:
            assert row[f"exclusive_{column}"] == (own.get(column) or 0), (run_id, column)
        assert row["exclusive_cost_usd"] == own.get("cost_usd"), run_id
        # inclusive: the exclusive numbers summed over its subtree, found from run_tree's paths
        subtree = [rollup[other] for other, path in paths.items() if run_id in path]
        assert row["inclusive_runs"] == len(subtree)
        for column in SUMMED:
            assert row[f"inclusive_{column}"] == sum(s[f"exclusive_{column}"] for s in subtree), (
                run_id,
                column,
            )
        assert row["inclusive_cost_usd"] == _cost_sum([s["exclusive_cost_usd"] for s in subtree])

    # The new tree spent what its scripts say, and called the tools they say.
    root = rollup[result.run_id]
    used = [r for node in tree.walk() for r in node.used()]
    assert pick(root, [f"inclusive_{c}" for c in TOKEN_COLUMNS]) == tuple(
        sum(getattr(u, c) for u, _, _ in used) for c in TOKEN_COLUMNS
    )
    assert root["inclusive_cost_usd"] == _cost_sum([c for _, c, _ in used])
    assert root["inclusive_steps"] == sum(node.steps for node in tree.walk())
    assert root["inclusive_tool_calls"] == sum(len(n.checks) + len(n.children) for n in tree.walk())
    assert root["inclusive_tool_errors"] == sum(sum(n.checks) for n in tree.walk())

    # The roots' totals, the conversations' and the models' are all the sum over every step.
    roots = [row for row in rollup.values() if row["depth"] == 0]
    for column in [*TOKEN_COLUMNS, "steps"]:
        total = sum(own.get(column) or 0 for own in per_run.values())
        assert sum(row[f"inclusive_{column}"] for row in roots) == total, column
        assert sum(row[column] for row in conversations.values()) == total, column
        assert sum(row[model_columns.index(column)] for row in per_model) == total, column
    all_costs = [own.get("cost_usd") for own in per_run.values()]
    assert _cost_sum([row["inclusive_cost_usd"] for row in roots]) == _cost_sum(all_costs)
    assert _cost_sum([row["cost_usd"] for row in conversations.values()]) == _cost_sum(all_costs)
    assert conversations.keys() == per_conversation.keys()
    for conversation_id, row in conversations.items():
        expected = per_conversation[conversation_id]
        assert pick(row, [*TOKEN_COLUMNS, "steps", "cost_usd"]) == pick(
            expected, [*TOKEN_COLUMNS, "steps", "cost_usd"]
        ), conversation_id
