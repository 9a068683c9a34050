"""A child process for the crash-recovery and concurrent-writer tests.

A child is forked from a warm forkserver (``support.forked``: :func:`run_child`,
:func:`run_together`) and calls :func:`play` with its spec, which says which role to play:

``crash``
    Run the scripted scenario once on a new conversation and SIGKILL this process at ``point``:
    ``a`` inside the tool of step 1 (before that step is recorded), ``b`` at the start of the
    model call of step 2 (after step 1 is recorded), ``c`` in the middle of the run's commit
    transaction (when ``DELETE FROM execution_buffer_rows`` is sent), ``d`` after ``run``
    returned. The result file is written only at point ``d``, just before the kill.
``resume``
    ``Agent.resume(run_id, stale_after=...)`` once every sibling is ready (the barrier).
``race``
    ``Agent.run(text, conversation_id)`` on an existing conversation, after the barrier.
``workload``
    After the barrier, open the ledger; once all ``peers`` have, make several runs on several
    conversations.

Every role but ``crash`` writes a JSON result file: ``{"ok": ...}`` or ``{"error": {"type",
"message", "traceback"}}``. The parent asserts on those and on the database itself.

The parent imports this module too: the scenario (:func:`build_agent`), so the process that
crashes and the one that recovers run the very same model script and tool; starting children
(:func:`run_child`, :func:`run_together`); and the invariants every ledger must keep, read with
SQL from the database itself (:func:`ledger_violations`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.pool import NullPool

from agentledger import Agent, AgentBuilder, Role, RunResult, ToolCall, ToolContext, Usage, tool
from agentledger._core import FunctionTool
from agentledger.ledger import Ledger
from agentledger.llm import InferenceRequest, InferenceResponse, ScriptedLLM
from support import forked
from support.forked import Finished
from support.sqlalchemy_urls import sqlalchemy_url

TOOL_STEPS = 3
"""Steps that call a tool before the model answers: the answer is step ``TOOL_STEPS``."""

QUESTION = "Tell me three facts about otters."
FULL_ANSWER = "answer: " + "; ".join(f"fact {n}" for n in range(TOOL_STEPS))
"""What the scripted model answers once it has seen every tool result of its run."""
BARRIER_TIMEOUT = 60.0


def die() -> None:
    """What a power cut does to a process: no cleanup, no exit handlers, no flushed buffers."""
    os.kill(os.getpid(), signal.SIGKILL)


def tool_results_of_this_run(request: InferenceRequest) -> list[str]:
    """The tool results the model sees since the last user message (this run's trace)."""
    messages = list(request.messages)
    last_user = max((n for n, m in enumerate(messages) if m.role is Role.USER), default=-1)
    return [m.content for m in messages[last_user + 1 :] if m.role is Role.TOOL]


def scripted_model(
    *, crash_at_step: int | None = None, delay: float = 0.0
) -> Callable[[InferenceRequest], InferenceResponse]:
    """A model that answers from the request: one ``lookup`` call per step until it has
    ``TOOL_STEPS`` results, then an answer quoting them all. Being a function of the request,
    it continues any run from wherever the ledger says the run got to."""

    def respond(request: InferenceRequest) -> InferenceResponse:
        results = tool_results_of_this_run(request)
        step = len(results)
        if crash_at_step is not None and step == crash_at_step:
            die()
        if delay:
            time.sleep(delay)
        usage = Usage(input_tokens=10, output_tokens=3)
        if step < TOOL_STEPS:
            call = ToolCall(id=f"call-{step}", name="lookup", arguments={"step": step})
            return InferenceResponse(tool_calls=[call], usage=usage, finish_reason="tool_calls")
        return InferenceResponse(
            content="answer: " + "; ".join(results), usage=usage, finish_reason="stop"
        )

    return respond


def lookup_tool(side_file: Path | None, *, crash_at_step: int | None = None) -> FunctionTool:
    """The scenario's tool. Every invocation is appended to ``side_file`` (and synced) before
    anything else happens, so the parent can count invocations even across a SIGKILL."""

    @tool
    def lookup(step: int, context: ToolContext) -> str:
        """Look up one fact."""
        if side_file is not None:
            entry = {
                "pid": os.getpid(),
                "run_id": context.run_id,
                "step_index": context.step_index,
                "call_id": context.tool_call.id,
                "idempotency_key": context.idempotency_key,
            }
            with side_file.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        if crash_at_step is not None and context.step_index == crash_at_step:
            die()
        return f"fact {step}"

    return lookup


def build_agent(
    ledger: Ledger,
    *,
    side_file: Path | None = None,
    separated: bool = True,
    tool_crash_step: int | None = None,
    model_crash_step: int | None = None,
    delay: float = 0.0,
) -> tuple[Agent, ScriptedLLM]:
    """The scenario's agent on ``ledger``, and its model (to count the requests it got)."""
    llm = ScriptedLLM([scripted_model(crash_at_step=model_crash_step, delay=delay)] * 1000)
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([lookup_tool(side_file, crash_at_step=tool_crash_step)])
        .with_separated_tool_trace(separated)
        .with_ledger(ledger)
        .build()
    )
    return agent, llm


def summary(result: RunResult) -> dict[str, Any]:
    """What a child acknowledges about a run it finished."""
    return {
        "run_id": result.run_id,
        "conversation_id": result.conversation_id,
        "status": result.status.value,
        "answer": result.answer,
        "steps": len(result.state.step_executions),
        "tool_executions": sum(len(e.step.tool_executions) for e in result.state.step_executions),
    }


def write_json(path: Path, payload: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(payload), encoding="utf-8")
    os.replace(partial, path)


def barrier(spec: dict[str, Any]) -> None:
    """Say this process is ready, then wait for the parent's go."""
    if "ready_file" not in spec:
        return
    Path(spec["ready_file"]).touch()
    go = Path(spec["go_file"])
    deadline = time.monotonic() + BARRIER_TIMEOUT
    while not go.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no go from the parent within {BARRIER_TIMEOUT}s")
        time.sleep(0.002)


def rendezvous(spec: dict[str, Any], point: str) -> None:
    """Wait until all ``spec["peers"]`` sibling processes reached ``point`` too."""
    directory = Path(spec["go_file"]).parent
    (directory / f"{point}.{os.getpid()}.at").touch()
    deadline = time.monotonic() + BARRIER_TIMEOUT
    while len(list(directory.glob(f"{point}.*.at"))) < spec["peers"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the other processes did not reach {point!r} in time")
        time.sleep(0.002)


def crash(spec: dict[str, Any]) -> None:
    point = spec["point"]
    ledger = Ledger.open(spec["url"], lease_seconds=spec.get("lease_seconds", 60.0))
    agent, _ = build_agent(
        ledger,
        side_file=Path(spec["side_file"]),
        separated=spec.get("separated", True),
        tool_crash_step=1 if point == "a" else None,
        model_crash_step=2 if point == "b" else None,
    )
    if point == "c":

        def kill_in_commit(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            if statement.lstrip().upper().startswith("DELETE FROM EXECUTION_BUFFER_ROWS"):
                die()

        event.listen(ledger.engine, "before_cursor_execute", kill_in_commit)
    result = agent.run(QUESTION)
    if point == "d":
        write_json(Path(spec["result_file"]), {"ok": summary(result)})
        die()
    write_json(Path(spec["result_file"]), {"ok": summary(result), "survived": True})


def resume(spec: dict[str, Any]) -> dict[str, Any]:
    with Ledger.open(spec["url"], lease_seconds=spec.get("lease_seconds", 60.0)) as ledger:
        agent, _ = build_agent(
            ledger, side_file=Path(spec["side_file"]), delay=spec.get("delay", 0.0)
        )
        barrier(spec)
        return summary(agent.resume(spec["run_id"], stale_after=spec.get("stale_after")))


def race(spec: dict[str, Any]) -> dict[str, Any]:
    with Ledger.open(spec["url"], lease_seconds=spec.get("lease_seconds", 60.0)) as ledger:
        agent, _ = build_agent(ledger, delay=spec.get("delay", 0.0))
        barrier(spec)
        return summary(agent.run(spec["text"], conversation_id=spec["conversation_id"]))


def workload(spec: dict[str, Any]) -> list[dict[str, Any]]:
    barrier(spec)  # the ledger is opened (created, migrated) by every worker at once too
    with Ledger.open(spec["url"], lease_seconds=spec.get("lease_seconds", 60.0)) as ledger:
        agent, _ = build_agent(ledger)
        rendezvous(spec, "opened")  # and then they all write at once
        conversation_ids: list[str | None] = [None] * spec["conversations"]
        acknowledged = []
        for turn in range(spec["runs"]):
            for n, conversation_id in enumerate(conversation_ids):
                result = agent.run(f"turn {turn} of conversation {n}", conversation_id)
                conversation_ids[n] = result.conversation_id
                acknowledged.append(summary(result))
        return acknowledged


ROLES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "resume": resume,
    "race": race,
    "workload": workload,
}


def play_role(roles: dict[str, Callable[[dict[str, Any]], Any]], spec: dict[str, Any]) -> int:
    """Play ``spec``'s role and write what came of it (its value, or the error) to the spec's
    result file, for the parent to read."""
    try:
        payload: dict[str, Any] = {"ok": roles[spec["role"]](spec)}
    except BaseException as exc:
        payload = {
            "error": {
                "type": type(exc).__name__,
                "message": str(exc),
                "traceback": traceback.format_exc(),
            }
        }
    write_json(Path(spec["result_file"]), payload)
    return 0


def play(spec: dict[str, Any]) -> None:
    """What a child does: play ``spec["role"]``."""
    if spec["role"] == "crash":
        crash(spec)
    else:
        play_role(ROLES, spec)


# --- the parent's side ------------------------------------------------------------------------


def run_child(spec: dict[str, Any], workdir: Path, name: str) -> Finished:
    """Run one child to its end (or its kill)."""
    return forked.run(play, spec, workdir, name)


def run_together(specs: dict[str, dict[str, Any]], workdir: Path) -> dict[str, Finished]:
    """Start the children, let them get ready (imports, connections), then release them all
    at the same instant through a go file; wait for every one of them."""
    return forked.run_together(play, specs, workdir)


def read_side_file(path: Path) -> list[dict[str, Any]]:
    """The tool invocations the scenario's tool logged, in order."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@functools.lru_cache(maxsize=8)
def _engine(url: str) -> Engine:
    """The engine :func:`connect` uses for ``url``, kept for the next checks of the same
    database: SQLAlchemy caches compiled statements per engine, and a new engine for every check
    (the invariants run after every step of some tests) compiled every statement again. With
    ``NullPool`` no connection stays open between checks."""
    return create_engine(sqlalchemy_url(url), poolclass=NullPool)


def _interrupted(conn: Connection) -> str:
    """The ``interrupted`` column, or false at a revision before 0006 (a migration test)."""
    columns = {c["name"] for c in inspect(conn).get_columns("conversation_messages")}
    return "interrupted" if "interrupted" in columns else "false"


@contextlib.contextmanager
def connect(url: str) -> Iterator[Connection]:
    """A plain SQLAlchemy connection to the ledger's database, outside the library."""
    with _engine(url).connect() as conn:
        yield conn


def rows(conn: Connection, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in conn.execute(text(sql), params)]


def scalar(conn: Connection, sql: str, **params: Any) -> Any:
    return conn.execute(text(sql), params).scalar()


def has_tool_calls(value: Any) -> bool:
    """Whether a ``tool_calls`` column holds any call (SQLite gives JSON text, psycopg lists)."""
    if isinstance(value, str):
        value = json.loads(value)
    return bool(value)


def ledger_violations(url: str, *, separated: bool = True) -> list[str]:
    """Every way the database breaks the rules of runs as transactions; empty when it keeps
    them all. Read with SQL, straight from the tables."""
    with connect(url) as conn:
        return transaction_violations(conn, separated=separated)


def transaction_violations(conn: Connection, *, separated: bool = True) -> list[str]:
    """:func:`ledger_violations` on a connection the caller has open (and goes on using)."""
    problems: list[str] = []
    seqs: dict[str, list[int]] = defaultdict(list)
    users: Counter[str] = Counter()
    answers: Counter[str] = Counter()
    others: Counter[str] = Counter()
    cut: Counter[str] = Counter()
    for conversation_id, seq, section, role, tool_calls, run_id, interrupted in rows(
        conn,
        f"SELECT conversation_id, seq, section, role, tool_calls, run_id, {_interrupted(conn)} "
        "FROM conversation_messages ORDER BY conversation_id, seq",
    ):
        seqs[conversation_id].append(seq)
        if section == "messages" and separated and (role == "tool" or has_tool_calls(tool_calls)):
            problems.append(
                f"separated mode, but conversation {conversation_id} holds a "
                f"{role} trace message at seq {seq}"
            )
        if interrupted:
            cut[run_id] += 1
        if role == "user":
            users[run_id] += 1
        elif interrupted and role == "assistant" and not has_tool_calls(tool_calls):
            pass  # an answer cut short: counted in ``cut`` only
        elif role == "assistant" and not has_tool_calls(tool_calls):
            answers[run_id] += 1
        else:
            others[run_id] += 1
    for conversation_id, found in seqs.items():
        if found != list(range(len(found))):
            problems.append(f"conversation {conversation_id}: seq {found}, not 0..n-1")

    steps: dict[str, list[int]] = defaultdict(list)
    for run_id, step_index in rows(
        conn, "SELECT run_id, step_index FROM step_executions ORDER BY run_id, step_index"
    ):
        steps[run_id].append(step_index)
    for run_id, status, step_count in rows(
        conn, "SELECT id, status, step_count FROM agent_runs ORDER BY id"
    ):
        if users[run_id] != 1:
            problems.append(f"run {run_id} ({status}) has {users[run_id]} user messages")
        if status == "completed" and answers[run_id] != 1:
            problems.append(f"completed run {run_id} has {answers[run_id]} answers")
        if status != "completed" and answers[run_id] + others[run_id]:
            problems.append(f"{status} run {run_id} put half a run in its conversation")
        if cut[run_id] and (status != "interrupted" or cut[run_id] > 1):
            problems.append(
                f"{status} run {run_id} has {cut[run_id]} interrupted answers: only an "
                "interrupted run has one, and only one"
            )
        if steps[run_id] != list(range(len(steps[run_id]))):
            problems.append(f"run {run_id}: step indexes {steps[run_id]}, not 0..n-1")
        if step_count != len(steps[run_id]):
            problems.append(
                f"run {run_id}: step_count {step_count}, {len(steps[run_id])} step rows"
            )

    for run_id, status, *tokens in rows(
        conn,
        "SELECT r.id, r.status, r.input_tokens, r.output_tokens, "
        "COALESCE(SUM(s.input_tokens), 0), COALESCE(SUM(s.output_tokens), 0) "
        "FROM agent_runs r LEFT JOIN step_executions s ON s.run_id = r.id "
        "WHERE r.status <> 'running' "
        "GROUP BY r.id, r.status, r.input_tokens, r.output_tokens",
    ):
        if tokens[:2] != tokens[2:]:
            problems.append(
                f"{status} run {run_id}: token totals {tokens[:2]}, its steps' {tokens[2:]}"
            )
    for run_id, status, count in rows(
        conn,
        "SELECT r.id, r.status, COUNT(*) FROM execution_buffer_rows b "
        "JOIN agent_runs r ON r.id = b.run_id "
        "WHERE r.status NOT IN ('running', 'failed') GROUP BY r.id, r.status",
    ):
        problems.append(f"{status} run {run_id} kept {count} execution buffer rows")
    for conversation_id, run_id in rows(
        conn,
        "SELECT c.id, c.lease_run_id FROM conversations c "
        "JOIN agent_runs r ON r.id = c.lease_run_id WHERE r.status <> 'running'",
    ):
        problems.append(f"conversation {conversation_id} leased to ended run {run_id}")

    if conn.dialect.name == "sqlite":
        integrity = rows(conn, "PRAGMA integrity_check")
        if integrity != [("ok",)]:
            problems.append(f"integrity_check: {integrity}")
        foreign = rows(conn, "PRAGMA foreign_key_check")
        if foreign:
            problems.append(f"foreign_key_check: {foreign}")
    return problems
