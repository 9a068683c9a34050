"""Bad input through real runs, on both backends, and random damage to a ledger file.

Hostile text (NUL bytes, lone surrogates, SQL-looking text, format placeholders, backslashes
and quotes) goes into every text field a run writes, one field at a time: the user's message,
the conversation's title, the agent's name, a tool's name, a tool call's id, its arguments,
its result, its error, the model's answer, its reasoning and a model error. Each is either
stored and read back exactly (through the public API and with SQL), or refused with an error,
and then the database holds no half run: the invariants hold, the conversation holds no answer
of the refused run, its lease is free and the next run on it completes. A value is never
silently changed. A 10 MB tool result and arguments that are not JSON go through the same way.

``tests/test_bad_input.py`` covers corrupt files at open; here a real ledger file gets random
bit flips (seeded), and everything it holds is read through the public API and compared with
the original: an error, or exactly the original data.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _invariants import violations
from _sizes import size

from _crash_child import connect, rows
from _migration_harness import record_representative_runs
from agentledger import (
    AgentBuilder,
    AgentLedgerError,
    LedgerOpenError,
    RunResult,
    ToolCall,
    ToolContext,
    tool,
)
from agentledger.ledger import Ledger
from agentledger.llm import InferenceRequest, InferenceResponse, ScriptedLLM

NASTY = {
    "NUL": "before\x00after",
    "lone surrogate": "before\ud800after",
    "SQL": "'); DROP TABLE agent_runs; --",
    "placeholders": "%s %(x)s {0} :name ? $1",
    "backslashes and quotes": "\\ \\\\ \\' \" ' ` \\x00",
}


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgresql),
    ],
)
def ledger(request: pytest.FixtureRequest) -> Iterator[Ledger]:
    """One ledger per backend for the module; every case runs on conversations of its own."""
    if request.param == "sqlite":
        directory = request.getfixturevalue("tmp_path_factory").mktemp("bad")
        with Ledger.open(directory / "ledger.db") as opened:
            yield opened
        return
    server = request.getfixturevalue("pg_server")
    url = server.create_database()
    try:
        with Ledger.open(url) as opened:
            yield opened
    finally:
        with contextlib.suppress(Exception):
            server.drop_database(url)


def raw_url(ledger: Ledger) -> str:
    return ledger.engine.url.render_as_string(hide_password=False)


# --- one run, with one field hostile ------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """A run: the user asks, the model calls a tool once, then answers (or the model fails)."""

    user: str = "What is in the box?"
    title: str = "bad input"
    agent_name: str = "inspector"
    tool_name: str = "open_box"
    called_name: str | None = None
    """The name the model calls, when it is not the tool's (an unknown tool)."""
    call_id: str = "call-1"
    argument: str = "box 1"
    tool_returns: str = "a cat"
    tool_raises: str | None = None
    answer: str = "There is a cat in the box."
    reasoning: str | None = None
    model_error: str | None = None
    raw_arguments: str | None = None


PLACES: dict[str, Callable[[str], Scenario]] = {
    "user message": lambda v: Scenario(user=v),
    "conversation title": lambda v: Scenario(title=v),
    "agent name": lambda v: Scenario(agent_name=v),
    "tool name": lambda v: Scenario(tool_name=v),
    "name of an unknown tool called": lambda v: Scenario(called_name=v),
    "tool call id": lambda v: Scenario(call_id=v),
    "tool arguments": lambda v: Scenario(argument=v),
    "tool result": lambda v: Scenario(tool_returns=v),
    "tool error": lambda v: Scenario(tool_raises=v),
    "model answer": lambda v: Scenario(answer=v),
    "model reasoning": lambda v: Scenario(reasoning=v),
    "model error": lambda v: Scenario(model_error=v),
}


def the_tool(scenario: Scenario) -> Any:
    @tool(name=scenario.tool_name, description="Open a box and say what is inside.")
    def open_box(box: str, context: ToolContext) -> str:
        if scenario.tool_raises is not None:
            raise RuntimeError(scenario.tool_raises)
        return scenario.tool_returns

    return open_box


def the_model(scenario: Scenario) -> ScriptedLLM:
    if scenario.model_error is not None:
        error = scenario.model_error

        def down(_request: InferenceRequest) -> InferenceResponse:
            raise ConnectionError(error)

        return ScriptedLLM([down])
    call = ToolCall(
        id=scenario.call_id,
        name=scenario.called_name or scenario.tool_name,
        arguments={} if scenario.raw_arguments is not None else {"box": scenario.argument},
        raw_arguments=scenario.raw_arguments,
    )
    return ScriptedLLM(
        [
            InferenceResponse(tool_calls=[call]),
            InferenceResponse(content=scenario.answer, reasoning=scenario.reasoning),
        ]
    )


@dataclass
class Attempt:
    """What came of a scenario: the result, or the error and where it was raised."""

    conversation_id: str | None = None
    result: RunResult | None = None
    error: BaseException | None = None
    stage: str = ""


def attempt(ledger: Ledger, scenario: Scenario) -> Attempt:
    done = Attempt()
    try:
        done.stage = "defining the tool"
        open_box = the_tool(scenario)
        done.stage = "building the agent"
        agent = (
            AgentBuilder()
            .with_llm(the_model(scenario))
            .with_tools([open_box])
            .with_name(scenario.agent_name)
            .with_ledger(ledger)
            .build()
        )
        done.stage = "creating the conversation"
        done.conversation_id = ledger.create_conversation(title=scenario.title).id
        done.stage = "running"
        done.result = agent.run(scenario.user, done.conversation_id)
    except Exception as exc:
        done.error = exc
    return done


# --- reading it back ----------------------------------------------------------------------------


def view(ledger: Ledger, conversation_id: str, run_id: str) -> dict[str, Any]:
    """Everything the public API says about the run, in comparable form."""
    steps = ledger.steps(run_id)
    run = ledger.run(run_id)
    return {
        "title": ledger.conversation(conversation_id).title,
        "conversation": [(m.role, m.content) for m in ledger.messages(conversation_id)],
        "agent name": run.agent_name,
        "status": run.status,
        "error": run.error,
        "assistant messages": [
            (m.content, m.reasoning, [c.model_dump() for c in m.tool_calls])
            for m in (e.step.assistant_message for e in steps)
            if m is not None
        ],
        "tool executions": [_tool_view(t) for t in ledger.tool_executions(run_id)],
        "trace": [(m.role, m.content, m.tool_call_id) for m in ledger.trace_messages(run_id)],
    }


def _tool_view(execution: Any) -> tuple[Any, ...]:
    call = execution.tool_call
    return (call.id, call.name, dict(call.arguments), execution.result, execution.error)


def in_memory(scenario: Scenario, result: RunResult) -> dict[str, Any]:
    """The same, from the state the agent held when the run ended."""
    state = result.state
    steps = state.step_executions
    return {
        "title": scenario.title,
        "conversation": [(m.role, m.content) for m in state.messages()],
        "agent name": scenario.agent_name,
        "status": result.status.value,
        "error": result.error,
        "assistant messages": [
            (m.content, m.reasoning, [c.model_dump() for c in m.tool_calls])
            for m in (e.step.assistant_message for e in steps)
            if m is not None
        ],
        "tool executions": [_tool_view(t) for e in steps for t in e.step.tool_executions],
        "trace": [
            (m.role, m.content, m.tool_call_id) for e in steps for m in e.step.trace_messages
        ],
    }


SQL_OF_PLACE = {
    "user message": "SELECT content FROM conversation_messages WHERE run_id = :r AND role = 'user'",
    "conversation title": "SELECT title FROM conversations WHERE id = :c",
    "agent name": "SELECT agent_name FROM agent_runs WHERE id = :r",
    "tool name": "SELECT tool_name FROM tool_executions WHERE run_id = :r",
    "name of an unknown tool called": "SELECT tool_name FROM tool_executions WHERE run_id = :r",
    "tool call id": "SELECT tool_call_id FROM tool_executions WHERE run_id = :r",
    "tool arguments": "SELECT arguments FROM tool_executions WHERE run_id = :r",
    "tool result": "SELECT result FROM tool_executions WHERE run_id = :r",
    "tool error": "SELECT error FROM tool_executions WHERE run_id = :r",
    "model answer": "SELECT content FROM conversation_messages WHERE run_id = :r "
    "AND role = 'assistant'",
    "model reasoning": "SELECT reasoning FROM step_executions WHERE run_id = :r "
    "AND reasoning IS NOT NULL",
    "model error": "SELECT error FROM agent_runs WHERE id = :r",
}


def in_sql(ledger: Ledger, place: str, conversation_id: str, run_id: str, value: str) -> bool:
    """Whether the value is in its column, read with SQL outside the library (whole, or
    quoted inside an error message)."""
    with connect(raw_url(ledger)) as conn:
        found = [r[0] for r in rows(conn, SQL_OF_PLACE[place], r=run_id, c=conversation_id)]
    if place == "tool arguments":
        found = [(json.loads(f) if isinstance(f, str) else f)["box"] for f in found]
    if place in ("tool error", "model error"):
        return any(value in (f or "") for f in found)
    return found == [value]


# --- what must hold -----------------------------------------------------------------------------


def no_half_run_problems(ledger: Ledger, done: Attempt) -> list[str]:
    """After a refusal: the invariants hold, the conversation holds no answer, nothing is left
    running, and the conversation takes the next run."""
    problems = [f"invariant: {v}" for v in violations(raw_url(ledger))]
    if done.conversation_id is None:
        return problems
    messages = ledger.messages(done.conversation_id)
    if any(m.role != "user" for m in messages):
        problems.append("the conversation holds more than user messages after a refusal")
    left = [r.status for r in ledger.runs(done.conversation_id) if r.status != "failed"]
    if left:
        problems.append(f"a refused run was left {left}")
    agent = AgentBuilder().with_llm(ScriptedLLM([InferenceResponse(content="ok")]))
    after = agent.with_ledger(ledger).build().run("Next question", done.conversation_id)
    if after.status != "completed":
        problems.append(f"the next run on the conversation is {after.status}")
    return problems


def error_kind(error: BaseException) -> str:
    if isinstance(error, AgentLedgerError):
        return f"{type(error).__name__}"
    return f"raw {type(error).__module__.split('.')[0]}.{type(error).__name__}"


def test_hostile_text_in_every_field_is_stored_exactly_or_refused_without_a_half_run(
    ledger, reliability_report
):
    outcomes: Counter[str] = Counter()
    refusals: dict[str, set[str]] = {}
    problems: list[str] = []
    for name, value in NASTY.items():
        for place, build in PLACES.items():
            scenario = build(value)
            label = f"{name} in the {place}"
            done = attempt(ledger, scenario)
            if done.error is not None:
                kind = error_kind(done.error)
                outcomes[f"refused ({kind})"] += 1
                refusals.setdefault(name, set()).add(f"{place}: {kind} while {done.stage}")
                if not str(done.error).strip():
                    problems.append(f"{label}: {type(done.error).__name__} with no message")
                problems += [f"{label}: {p}" for p in no_half_run_problems(ledger, done)]
                continue
            assert done.result is not None and done.conversation_id is not None
            run_id = done.result.run_id
            expected_status = "failed" if scenario.model_error else "completed"
            if done.result.status != expected_status:
                problems.append(f"{label}: the run is {done.result.status}")
            stored = view(ledger, done.conversation_id, run_id)
            if stored != in_memory(scenario, done.result):
                problems.append(f"{label}: read back differently: {stored}")
            elif not in_sql(ledger, place, done.conversation_id, run_id, value):
                problems.append(f"{label}: not found as it was in its column")
            else:
                outcomes["stored and read back exactly"] += 1
            problems += [f"{label}: invariant: {v}" for v in violations(raw_url(ledger))]

    assert not problems, "\n".join(problems)
    cases = len(NASTY) * len(PLACES)
    refused = "; ".join(
        f"{name} refused in {len(where)} places ({', '.join(sorted(where))})"
        for name, where in sorted(refusals.items())
    )
    reliability_report(
        f"{ledger.dialect}: {cases} runs with one hostile field each ({', '.join(NASTY)} x "
        f"{len(PLACES)} fields): {dict(sorted(outcomes.items()))}; {refused or 'none refused'}; "
        "no value silently changed, no refusal left a half run or a held lease"
    )


@pytest.mark.parametrize("value", list(NASTY.values()), ids=list(NASTY))
def test_searching_for_hostile_text_finds_it_or_nothing_and_never_breaks(ledger, value):
    """``Ledger.search`` builds its SQL from the words of the query: hostile text is data."""
    scenario = Scenario(user=f"marker {value}")
    done = attempt(ledger, scenario)
    hits = ledger.search(value)
    if done.error is None and re.findall(r"\w+", value):
        assert any(hit.message.content == scenario.user for hit in hits)
    assert violations(raw_url(ledger)) == []


def test_a_ten_megabyte_tool_result_is_stored_and_read_back_exactly(ledger, reliability_report):
    rng = random.Random(10)
    alphabet = "abcdefghij klmnopqrstuvwxyz0123456789\n\t\"'\\{}[]é漢字🙂"
    chunk = "".join(rng.choice(alphabet) for _ in range(64 * 1024))
    big = (chunk * 160)[: 10 * 1024 * 1024]
    began = time.monotonic()
    done = attempt(ledger, Scenario(tool_returns=big))
    elapsed = time.monotonic() - began

    assert done.error is None, done.error
    assert done.result is not None and done.conversation_id is not None
    run_id = done.result.run_id
    assert [t.result for t in ledger.tool_executions(run_id)] == [big]
    assert [m.content for m in ledger.trace_messages(run_id) if m.role == "tool"] == [big]
    assert in_sql(ledger, "tool result", done.conversation_id, run_id, big)
    assert len(ledger.buffer(run_id)) == 0, "the buffer was not flushed"
    assert violations(raw_url(ledger)) == []
    reliability_report(
        f"{ledger.dialect}: a {len(big.encode()) / 1e6:.1f} MB tool result (10 Mi characters, "
        f"non-ASCII included) recorded in {elapsed:.1f}s and read back exactly through "
        "tool_executions, trace_messages and SQL; invariants held"
    )


def test_tool_arguments_that_are_not_json_are_answered_with_an_error_and_kept_in_the_trace(
    ledger, reliability_report
):
    raw = "{'box': 1, oops" + " and more" * 40  # longer than the 200 characters the result shows
    done = attempt(ledger, Scenario(raw_arguments=raw))

    assert done.error is None, done.error
    assert done.result is not None and done.conversation_id is not None
    run_id = done.result.run_id
    assert done.result.status == "completed"
    (execution,) = ledger.tool_executions(run_id)
    assert execution.is_error and "not a JSON object" in execution.result
    assert raw[:200] in execution.result
    calls = [c for m in ledger.trace_messages(run_id) for c in m.tool_calls]
    assert [c.raw_arguments for c in calls] == [raw], "the model's raw arguments were not kept"
    steps = ledger.steps(run_id)
    assert [c.raw_arguments for c in steps[0].step.assistant_message.tool_calls] == [raw]
    assert violations(raw_url(ledger)) == []
    kept = execution.tool_call.raw_arguments == raw
    reliability_report(
        f"{ledger.dialect}: a call whose arguments were not JSON got an error result naming "
        "them, the run completed, and the raw text was kept in the step's assistant message "
        f"(trace_messages, steps); Ledger.tool_executions kept it too: {kept}"
    )


# --- random damage to a real ledger file --------------------------------------------------------


@dataclass(frozen=True)
class LedgerFile:
    data: bytes
    dump: list[Any]


def dump(ledger: Ledger) -> list[Any]:
    """Everything a ledger holds, through the public API."""
    out: list[Any] = []
    for conversation in sorted(ledger.conversations(), key=lambda c: c.id):
        out.append(conversation.model_dump())
        for section in ("messages", "execution_buffer", "summary", "buffer"):
            out.append([m.model_dump() for m in ledger.messages(conversation.id, section)])
        for run in ledger.runs(conversation.id):
            out.append(run.model_dump())
            out.append([e.model_dump() for e in ledger.steps(run.id)])
            out.append([t.model_dump() for t in ledger.tool_executions(run.id)])
            out.append([m.model_dump() for m in ledger.buffer(run.id)])
            out.append([m.model_dump() for m in ledger.trace_messages(run.id)])
            out.append(ledger.run_tree(run.id).model_dump())
    out.append([hit.model_dump() for hit in ledger.search("sunny marmalade")])
    out.append([run.model_dump() for run in ledger.stale_runs()])
    return out


@pytest.fixture(scope="module")
def ledger_file(tmp_path_factory: pytest.TempPathFactory) -> LedgerFile:
    path = tmp_path_factory.mktemp("flips") / "ledger.db"
    with Ledger.open(path) as ledger:
        record_representative_runs(ledger)
    assert not Path(f"{path}-wal").exists(), "the WAL was not checkpointed into the file"
    with Ledger.open(path, migrate=False) as ledger:
        original = dump(ledger)
    return LedgerFile(path.read_bytes(), original)


def flipped(data: bytes, rng: random.Random) -> bytes:
    """``data`` with 1 to 16 random bits flipped (mostly one)."""
    copy = bytearray(data)
    for _ in range(rng.choice([1, 1, 1, 2, 4, 16])):
        copy[rng.randrange(len(copy))] ^= 1 << rng.randrange(8)
    return bytes(copy)


def read_copy(path: Path, *, verify: bool) -> tuple[str, Any]:
    """How a damaged copy reads: ``("open error" | "read error" | "raw read error" | "data",
    detail)``."""
    try:
        ledger = Ledger.open(path, migrate=False, verify=verify)
    except LedgerOpenError as exc:
        return "open error", exc
    try:
        with ledger:
            return "data", dump(ledger)
    except AgentLedgerError as exc:
        return "read error", exc
    except Exception as exc:
        return "raw read error", exc


def test_random_bit_flips_in_a_ledger_file_give_an_error_or_the_original_data(
    tmp_path, ledger_file, reliability_report
):
    rng = random.Random(20300101)
    copies = size(30, 1000)
    outcomes: Counter[str] = Counter()
    raw: Counter[str] = Counter()
    caught_by_verify = 0
    for n in range(copies):
        data = flipped(ledger_file.data, rng)
        path = tmp_path / f"copy-{n}.db"
        path.write_bytes(data)
        kind, detail = read_copy(path, verify=False)
        if kind == "open error":
            assert str(path) in str(detail), f"the error does not name the file: {detail}"
            outcomes["LedgerOpenError at open"] += 1
        elif kind == "read error":
            assert str(detail).strip(), f"{type(detail).__name__} without a message"
            outcomes[f"{type(detail).__name__} while reading"] += 1
        elif kind == "raw read error":
            raw[f"{type(detail).__module__.split('.')[0]}.{type(detail).__name__}"] += 1
            outcomes["raw exception while reading"] += 1
        elif detail == ledger_file.dump:
            outcomes["the original data"] += 1
        else:
            outcomes["different data, silently"] += 1
        if kind in ("raw read error", "data") and detail != ledger_file.dump:
            caught_by_verify += read_copy(path, verify=True)[0] == "open error"
        for leftover in tmp_path.glob(f"copy-{n}.db*"):
            leftover.unlink()

    assert sum(outcomes.values()) == copies
    assert outcomes["the original data"] < copies, "no flip did any damage: a broken test"
    reliability_report(
        f"sqlite: {copies} copies of a {len(ledger_file.data) // 1024} KiB ledger with 1-16 "
        f"random bit flips each, everything read through the public API and compared with the "
        f"original: {dict(sorted(outcomes.items()))}; raw exceptions: {dict(raw) or 'none'}; "
        f"of the silently different and raw ones, verify=True refused {caught_by_verify} at open"
    )
