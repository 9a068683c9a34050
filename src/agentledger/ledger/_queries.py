"""The ledger's reads, one implementation for both of its readers: a conversation or a run by
its id or a unique prefix, the listings, a conversation's messages and a run's steps, each in
a scope. :class:`~agentledger.ledger.Ledger` runs them through SQLAlchemy,
:class:`~agentledger.ledger.LedgerReader` through ``sqlite3`` (:mod:`._sql`).

Every row read is checked: against its checksum when it becomes a value or a record, and every
sequence for gaps, so a damaged file gives :class:`LedgerCorruptError`, never a shorter or
different answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from .._values import AgentState, AgentStatus, Message, Messages, StepExecution
from ..errors import LedgerCorruptError, UsageError
from ._arguments import member, row_limit
from ._columns import ConversationKind
from ._lookup import check_id, id_by_prefix, not_found
from ._row_mapping import DAMAGED, Row, in_sequence, message_of, step_execution_of, store_of
from ._scope import Scope, holds
from ._sql import Reads, in_scope, limited, scope_params, select_rows, time_param

_CONVERSATION = select_rows("conversations") + "WHERE id = :id "
_RUN = select_rows("agent_runs") + "WHERE id = :id "


def conversation_row(reads: Reads, given: str, scope: Scope) -> Row:
    """The row of the conversation in ``scope`` that ``given`` stands for: its id, or a prefix
    of it that begins no other conversation's id (:mod:`._lookup`)."""
    check_id("conversation", given)
    rows = reads.rows(_CONVERSATION + in_scope(scope), _params(scope, id=given), "conversations")
    if not rows:
        full_id = id_by_prefix(reads, "conversation", given, scope)
        rows = reads.rows(_CONVERSATION, {"id": full_id}, "conversations")
    return rows[0]


def conversation_rows(
    reads: Reads,
    scope: Scope,
    *,
    kind: ConversationKind | str | None = None,
    limit: int | None = None,
    condition: tuple[str, dict[str, Any]] = ("", {}),
) -> list[dict[str, Any]]:
    """Conversations in ``scope``, most recently updated first; of ``kind`` if given, and
    meeting ``condition`` (more ``AND ...`` SQL, and its parameters)."""
    sql = select_rows("conversations") + "WHERE 1 = 1 " + in_scope(scope) + condition[0]
    params = _params(scope, limit=row_limit(limit), **condition[1])
    if kind is not None:
        sql += "AND kind = :kind "
        params["kind"] = member(ConversationKind, kind, "kind").value
    sql += "ORDER BY updated_at DESC, id DESC " + limited(limit)
    return reads.rows(sql, params, "conversations")


_MESSAGES = (
    select_rows("conversation_messages") + "WHERE conversation_id = :conversation_id ORDER BY seq"
)


def message_rows(reads: Reads, conversation_id: str) -> Sequence[Row]:
    """Every row of a conversation (given by its full id), every section, in order: a row
    missing from any section shows as a gap."""
    rows = reads.rows(_MESSAGES, {"conversation_id": conversation_id}, "conversation_messages")
    return in_sequence(rows, "seq", 0, f"conversation {conversation_id}")


_BUFFER = select_rows("execution_buffer_rows") + "WHERE run_id = :run_id ORDER BY seq"


def buffer_rows(reads: Reads, run_id: str) -> Sequence[Row]:
    """The rows of a run's execution buffer (given by its full id), in order."""
    rows = reads.rows(_BUFFER, {"run_id": run_id}, "execution_buffer_rows")
    return in_sequence(rows, "seq", 0, f"the execution buffer of run {run_id}")


def messages_in(rows: Sequence[Row], wanted: Callable[[Row], bool]) -> Messages:
    """The messages of the rows ``wanted``."""
    return Messages(tuple(message_of(row) for row in rows if wanted(row)))


def in_section(section: str) -> Callable[[Row], bool]:
    """The rows of a section (``Ledger.messages``)."""
    return lambda row: bool(row["section"] == section)


_SEEN = (AgentState.DEFAULT_SECTION, AgentState.BUFFER_SECTION)
SEEN_SQL = ", ".join(f"'{section}'" for section in _SEEN)
"""The sections of the conversation as the user saw it, as a list SQL's ``IN`` takes."""


def as_seen(row: Row) -> bool:
    """The rows of the conversation as the user saw it (``Ledger.history``): every message of
    it, those a summary replaced included, the summaries left out."""
    return row["section"] in _SEEN


class ConversationTurn(BaseModel):
    """A turn of a conversation as the user saw it: the messages one run wrote (the user's
    message and the run's answer), with the run's id; ``None`` for messages no run wrote
    (added by hand, imported)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    run_id: str | None
    messages: Messages


def turns_of(rows: Sequence[Row]) -> list[ConversationTurn]:
    """The conversation of ``rows`` (all of its rows, in order) as the user saw it, turn by
    turn: each run of consecutive messages written by the same run."""
    turns: list[tuple[str | None, list[Message]]] = []
    for row in rows:
        if not as_seen(row):
            continue
        if not turns or turns[-1][0] != row["run_id"]:
            turns.append((row["run_id"], []))
        turns[-1][1].append(message_of(row))
    return [
        ConversationTurn.model_construct(run_id=run_id, messages=Messages(tuple(found)))
        for run_id, found in turns
    ]


def in_context(rows: Sequence[Row]) -> Messages:
    """The conversation of ``rows`` (all of its rows, in order) as the model sees it now
    (``Ledger.model_context``): the summary, then the messages still in its context. What a
    summary replaced comes before everything still in the context, so this is what follows
    the last row it replaced, as a new run loads it."""
    replaced = [row["seq"] for row in rows if row["in_context"] is False]
    start = replaced[-1] + 1 if replaced else 0
    return store_of(rows[start:]).select(*AgentState.INFERENCE_SECTIONS)


def run_row(reads: Reads, given: str, scope: Scope) -> Row:
    """The row of the run in ``scope`` that ``given`` stands for: its id, or a prefix of it
    that begins no other run's id. A run outside the scope is not found."""
    check_id("run", given)
    rows = reads.rows(_RUN, {"id": given}, "agent_runs")
    if not rows or not holds(scope, rows[0]):
        # Another scope's run is looked for as a prefix in this one: not found, as a missing id.
        full_id = id_by_prefix(reads, "run", given, scope)
        rows = reads.rows(_RUN, {"id": full_id}, "agent_runs")
        if not rows:
            raise not_found("run", given)
    return rows[0]


def run_rows(
    reads: Reads,
    scope: Scope,
    *,
    conversation_id: str | None = None,
    status: AgentStatus | str | None = None,
    limit: int | None = None,
    since: datetime | None = None,
    condition: tuple[str, dict[str, Any]] = ("", {}),
) -> list[dict[str, Any]]:
    """Runs in ``scope``, oldest first within a conversation (``conversation_id``: its full
    id), newest first across the ledger; with ``since``, those started at or after it; those
    meeting ``condition`` (more ``AND ...`` SQL, and its parameters)."""
    sql = select_rows("agent_runs") + "WHERE 1 = 1 " + in_scope(scope) + condition[0]
    params = _params(scope, limit=row_limit(limit), **condition[1])
    if since is not None:
        sql += "AND started_at >= :since "
        params["since"] = time_param(reads.dialect, since)
    if status is not None:
        sql += "AND status = :status "
        params["status"] = member(AgentStatus, status, "status").value
    if conversation_id is not None:
        sql += "AND conversation_id = :conversation_id ORDER BY started_at, id "
        params["conversation_id"] = conversation_id
    else:
        sql += "ORDER BY started_at DESC, id DESC "
    return reads.rows(sql + limited(limit), params, "agent_runs")


_STEPS = select_rows("step_executions") + "WHERE run_id = :run_id ORDER BY step_index"
_TOOLS = select_rows("tool_executions") + "WHERE run_id = :run_id ORDER BY step_index, position"


_OF_CONVERSATION = "WHERE run_id IN (SELECT id FROM agent_runs WHERE conversation_id = :c) "


def speaking(
    dialect: str, conversation_id: str, metadata: Mapping[str, Any] | None
) -> tuple[str, dict[str, Any]]:
    """The condition keeping the runs that hold a message of the conversation (its full id),
    recorded no step, or have ``metadata`` (see :func:`metadata_condition`)."""
    held = "SELECT run_id FROM conversation_messages WHERE conversation_id = :conversation_id"
    found, params = metadata_condition(dialect, metadata, "agent_runs") if metadata else ("", {})
    marked = f"OR (1 = 1 {found})" if metadata else ""
    return f"AND (step_count = 0 OR id IN ({held}) {marked}) ", params


def load_steps(reads: Reads, run_id: str) -> tuple[StepExecution, ...]:
    """A run's steps (given by its full id), rebuilt from their rows and their tool rows."""
    steps = reads.rows(_STEPS, {"run_id": run_id}, "step_executions")
    tools = reads.rows(_TOOLS, {"run_id": run_id}, "tool_executions")
    return _rebuilt_steps(run_id, steps, tools)


def conversation_steps(reads: Reads, conversation_id: str) -> dict[str, tuple[StepExecution, ...]]:
    """The steps of every run of a conversation (given by its full id), by run id: one
    statement for the step rows and one for the tool rows, however many runs it has."""
    return steps_where(reads, _OF_CONVERSATION, {"c": conversation_id})


def steps_where(
    reads: Reads, where: str, params: Mapping[str, Any]
) -> dict[str, tuple[StepExecution, ...]]:
    """The steps of the runs ``where`` keeps (``WHERE ...`` over ``run_id``), by run id, read
    in two statements: the step rows, then the tool rows."""
    steps: dict[str, list[Row]] = {}
    step_sql = select_rows("step_executions") + where + "ORDER BY step_index"
    for step in reads.rows(step_sql, params, "step_executions"):
        steps.setdefault(step["run_id"], []).append(step)
    tools: dict[str, list[Row]] = {}
    tool_sql = select_rows("tool_executions") + where + "ORDER BY step_index, position"
    for tool in reads.rows(tool_sql, params, "tool_executions"):
        tools.setdefault(tool["run_id"], []).append(tool)
    return {run: _rebuilt_steps(run, rows, tools.get(run, ())) for run, rows in steps.items()}


def _rebuilt_steps(
    run_id: str, steps: Sequence[Row], tools: Sequence[Row]
) -> tuple[StepExecution, ...]:
    """A run's steps from their rows (in order of their index) and their tool rows (in order
    of step and position)."""
    by_step: dict[str, list[Row]] = {}
    for tool in tools:
        by_step.setdefault(tool["step_id"], []).append(tool)
    in_sequence(steps, "step_index", 0, f"the steps of run {run_id}")
    return tuple(step_execution_of(s, by_step.get(s["id"], ())) for s in steps)


def counted_steps(steps: Sequence[StepExecution], run_id: str, counted: int) -> None:
    """Raise :class:`LedgerCorruptError` unless the run has the ``counted`` steps its row
    says (a step row an index lost leaves no gap a read can see)."""
    if len(steps) != counted:
        raise LedgerCorruptError(
            f"run {run_id} recorded {counted} steps but the ledger reads {len(steps)}: {DAMAGED}"
        )


def _params(scope: Scope, **params: Any) -> dict[str, Any]:
    return {**scope_params(scope), **params}


# --- conversations by their metadata --------------------------------------------------------------

_JSON_TYPES = {True: "true", False: "false", None: "null"}


def metadata_condition(
    dialect: str, wanted: Mapping[str, Any], table: str = "conversations"
) -> tuple[str, dict[str, Any]]:
    """The conditions, as SQL text (each ``AND ...``) and their parameters, that keep the
    rows of ``table`` whose metadata has each of ``wanted``'s top-level keys, equal to its
    value (a string, a number, a boolean or ``None`` for JSON null). Keys and values are
    parameters, never part of the SQL text or of a JSON path, so any text is a key."""
    for key, value in wanted.items():
        _check_filter(key, value)
    if dialect == "postgresql":
        return "AND metadata @> CAST(:metadata AS JSONB) ", {"metadata": json.dumps(wanted)}
    conditions, params = [], {}
    for n, (key, value) in enumerate(wanted.items()):
        condition, values = _sqlite_member(table, n, key, value)
        conditions.append(condition)
        params.update(values)
    return "".join(conditions), params


def _check_filter(key: object, value: object) -> None:
    if not isinstance(key, str):
        raise UsageError(f"a metadata filter's keys are text, not {key!r}")
    if not (value is None or isinstance(value, str | int | float | bool)):
        raise UsageError(
            f"the metadata filter on {key!r} must be a string, a number, a boolean or None "
            f"(JSON null), not {type(value).__name__}: objects and lists are not compared"
        )


def _sqlite_member(table: str, n: int, key: str, value: Any) -> tuple[str, dict[str, Any]]:
    """SQLite: the metadata object has ``key``, whose value is ``value`` (``json_each``, so
    the key is compared as data, never read as a JSON path); the ``n``-th such condition."""
    params: dict[str, Any] = {f"key{n}": key}
    if isinstance(value, bool) or value is None:
        matches = f"j.type = '{_JSON_TYPES[value]}'"
    elif isinstance(value, str):
        matches, params[f"value{n}"] = f"j.type = 'text' AND j.atom = :value{n}", value
    else:
        matches = f"j.type IN ('integer', 'real') AND j.atom = :value{n}"
        params[f"value{n}"] = value
    member = f"SELECT 1 FROM json_each({table}.metadata) AS j WHERE j.key = :key{n} AND {matches}"
    return f"AND EXISTS ({member}) ", params
