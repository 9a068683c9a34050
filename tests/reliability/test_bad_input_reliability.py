"""Bad input through real runs, on both backends, and random damage to a ledger file.

Hostile text (NUL bytes, lone surrogates, SQL-looking text, format placeholders, backslashes
and quotes) goes into every text field a run writes, one field at a time: the user's message,
the conversation's title, the agent's name, a tool's name, a tool call's id, its arguments,
its result, its error, the model's answer, its reasoning and a model error. Each is either
stored and read back exactly (through the public API and with SQL), or refused with an error,
and then the database holds no half run: the invariants hold, the conversation holds no answer
of the refused run, its lease is free and the next run on it completes. A value is never
silently changed. A 10 MB tool result and arguments that are not JSON go through the same way.

Text the ledger cannot store (a NUL, a lone surrogate) meets the same rule on both backends,
and never a raw driver error: what the caller gives (the user's message, a title, the agent's
name) is refused with ``UnstorableTextError`` before anything is written; the model's output
fails the run, which can be resumed; a tool's output becomes an error tool result; and in
diagnostic text (an exception's message, as a tool error or a model error) the character is
stored escaped, as ``printable`` writes it.

``tests/test_bad_input.py`` covers corrupt files at open; here a real ledger file gets random
bit flips (seeded), and everything it holds is read through the public API and compared with
the original: an error (never a raw exception), exactly the original data, data different only
in the columns no checksum covers (a conversation's lease and version, a run's heartbeat), or
damage that ``Ledger.open(verify=True)`` or ``Ledger.verify()`` finds (a row an index lost,
which reads cannot see). A difference that nothing finds fails the test.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentledger import AgentBuilder, AgentLedgerError, RunResult, ToolCall, ToolContext, tool
from agentledger._values import find_unstorable, printable
from agentledger.errors import UnstorableTextError
from agentledger.ledger import Ledger
from agentledger.llm import InferenceRequest, InferenceResponse, ScriptedLLM
from support.crash_child import connect, rows
from support.databases import BACKENDS, fresh_database
from support.invariants import violations
from support.migration_harness import record_representative_runs
from support.sizes import size

NASTY = {
    "NUL": "before\x00after",
    "lone surrogate": "before\ud800after",
    "SQL": "'); DROP TABLE agent_runs; --",
    "placeholders": "%s %(x)s {0} :name ? $1",
    "backslashes and quotes": "\\ \\\\ \\' \" ' ` \\x00",
}


@pytest.fixture(
    scope="module",
    params=BACKENDS,
)
def ledger(request: pytest.FixtureRequest) -> Iterator[Ledger]:
    """One ledger per backend for the module; every case runs on conversations of its own."""
    with fresh_database(request.param, request) as url, Ledger.open(url) as opened:
        yield opened


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


REFUSED_UNSTORABLE = "refused (UnstorableTextError) before writing"
REFUSED_TOOL_NAME = "refused (ToolDefinitionError)"
MODEL_OUTPUT_FAILED = "run failed (UnstorableTextError), then resumed"
TOOL_OUTPUT_ERROR = "error tool result, run completed"
STORED = "stored"
"""A value the run stored: exactly, or, in diagnostic text, escaped as ``printable`` does."""

UNSTORABLE_OUTCOME = {
    "user message": REFUSED_UNSTORABLE,
    "conversation title": REFUSED_UNSTORABLE,
    "agent name": REFUSED_UNSTORABLE,
    "tool name": REFUSED_TOOL_NAME,
    "name of an unknown tool called": MODEL_OUTPUT_FAILED,
    "tool call id": MODEL_OUTPUT_FAILED,
    "tool arguments": MODEL_OUTPUT_FAILED,
    "tool result": TOOL_OUTPUT_ERROR,
    "tool error": STORED,
    "model answer": MODEL_OUTPUT_FAILED,
    "model reasoning": MODEL_OUTPUT_FAILED,
    "model error": STORED,
}
"""What text the ledger cannot store (a NUL, a lone surrogate) must come to, per place."""

STAGE_OF_REFUSAL = {
    "user message": "running",
    "conversation title": "creating the conversation",
    "agent name": "building the agent",
    "tool name": "defining the tool",
}


def expected_outcome(place: str, value: str) -> str:
    if place == "tool name":  # a tool name must be a plain identifier, whatever else it holds
        return REFUSED_TOOL_NAME
    return STORED if find_unstorable(value) is None else UNSTORABLE_OUTCOME[place]


def observed_outcome(done: Attempt) -> str:
    if done.error is not None:
        if isinstance(done.error, UnstorableTextError):
            return REFUSED_UNSTORABLE
        return f"refused ({error_kind(done.error)})"
    assert done.result is not None
    if done.result.status == "failed" and (done.result.error or "").startswith(
        "UnstorableTextError: "
    ):
        return MODEL_OUTPUT_FAILED
    if any(_is_unstorable_output_error(t) for t in _executions(done.result)):
        return TOOL_OUTPUT_ERROR
    return STORED


def _executions(result: RunResult) -> list[Any]:
    return [t for e in result.state.step_executions for t in e.step.tool_executions]


def _is_unstorable_output_error(execution: Any) -> bool:
    return execution.is_error and (execution.error or "").startswith("the output of tool ")


def refusal_problems(ledger: Ledger, place: str, done: Attempt) -> list[str]:
    """A refusal: at the stage the place is given, with a message that says what and holds no
    unstorable character; then nothing was written, and the database holds no half run."""
    assert done.error is not None
    problems = []
    message = str(done.error)
    if done.stage != STAGE_OF_REFUSAL[place]:
        problems.append(f"refused while {done.stage}, not while {STAGE_OF_REFUSAL[place]}")
    if not message.strip() or find_unstorable(message) is not None:
        problems.append(f"{type(done.error).__name__} message unfit: {message!r}")
    if isinstance(done.error, UnstorableTextError) and "valid Unicode" not in message:
        problems.append(f"the message does not say what to do: {message!r}")
    if done.conversation_id is not None and (
        ledger.messages(done.conversation_id) or ledger.runs(done.conversation_id)
    ):
        problems.append("something was written before the refusal")
    return problems + no_half_run_problems(ledger, done)


def run_problems(
    ledger: Ledger, scenario: Scenario, place: str, value: str, done: Attempt, outcome: str
) -> list[str]:
    """A run that went through: the status the outcome means, everything read back as the
    agent held it (through the API and with SQL), and a model-output failure resumable."""
    assert done.result is not None and done.conversation_id is not None
    run_id = done.result.run_id
    failed = outcome == MODEL_OUTPUT_FAILED or scenario.model_error is not None
    problems = []
    if done.result.status != ("failed" if failed else "completed"):
        problems.append(f"the run is {done.result.status}")
    stored = view(ledger, done.conversation_id, run_id)
    if stored != in_memory(scenario, done.result):
        problems.append(f"read back differently: {stored}")
    if outcome == STORED and not in_sql(
        ledger, place, done.conversation_id, run_id, printable(value)
    ):
        problems.append("not found as it was (or escaped, in diagnostic text) in its column")
    if outcome == TOOL_OUTPUT_ERROR and not in_sql(
        ledger, "tool error", done.conversation_id, run_id, "the output of tool 'open_box' holds"
    ):
        problems.append("the error tool result is not in its column")
    problems += [f"invariant: {v}" for v in violations(raw_url(ledger))]
    if outcome == MODEL_OUTPUT_FAILED:
        problems += resume_problems(ledger, scenario, done)
    return problems


def resume_problems(ledger: Ledger, scenario: Scenario, done: Attempt) -> list[str]:
    """A run failed by model output can be resumed, and then completes."""
    assert done.result is not None
    if any(m.role != "user" for m in ledger.messages(done.conversation_id or "")):
        return ["the conversation holds more than the user message after the failure"]
    model = ScriptedLLM([InferenceResponse(content="A cat.")])
    agent = AgentBuilder().with_llm(model).with_tools([the_tool(scenario)]).with_ledger(ledger)
    resumed = agent.build().resume(done.result.run_id)
    if resumed.status != "completed" or resumed.answer != "A cat.":
        return [f"resumed, the run is {resumed.status} with answer {resumed.answer!r}"]
    return []


def test_hostile_text_in_every_field_is_stored_exactly_or_refused_without_a_half_run(
    ledger, reliability_report
):
    outcomes: Counter[str] = Counter()
    where: dict[str, dict[str, list[str]]] = {}
    problems: list[str] = []
    for name, value in NASTY.items():
        for place, build in PLACES.items():
            scenario = build(value)
            label = f"{name} in the {place}"
            done = attempt(ledger, scenario)
            outcome, expected = observed_outcome(done), expected_outcome(place, value)
            if outcome != expected:
                detail = f"{error_kind(done.error)}: {done.error}" if done.error else outcome
                problems.append(f"{label}: expected {expected}, got {detail}")
                continue
            if done.error is not None:
                found = refusal_problems(ledger, place, done)
            else:
                found = run_problems(ledger, scenario, place, value, done, outcome)
            problems += [f"{label}: {p}" for p in found]
            if outcome == STORED:
                outcome = "stored exactly" if printable(value) == value else "stored escaped"
            outcomes[outcome] += 1
            where.setdefault(name, {}).setdefault(outcome, []).append(place)

    assert not problems, "\n".join(problems)
    cases = len(NASTY) * len(PLACES)
    alike: dict[str, list[str]] = {}  # values that came to the same outcomes in the same places
    for name, value in NASTY.items():
        if find_unstorable(value) is not None:
            by_kind = " | ".join(f"{k}: {', '.join(p)}" for k, p in where[name].items())
            alike.setdefault(by_kind, []).append(name)
    unstorable = "; ".join(f"{' and '.join(names)}: [{k}]" for k, names in alike.items())
    reliability_report(
        f"{ledger.dialect}: {cases} runs with one hostile field each ({', '.join(NASTY)} x "
        f"{len(PLACES)} fields): {dict(sorted(outcomes.items()))}; {unstorable}; the other "
        "values stored and read back exactly (API and SQL) wherever a tool name was not "
        "required; no raw error, no value silently changed, no refusal left a half run or a "
        "held lease"
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
    dump: list[tuple[str, Any]]
    at: datetime
    """When the original was read: every copy is read as of then, so that which runs are stale
    (their lease expired) is the same for all, however long the sweep takes."""


def dump(ledger: Ledger) -> list[tuple[str, Any]]:
    """Everything a ledger holds, through the public API, each part labelled with what it is
    (``uncovered_masked`` needs to know which parts are conversations and runs)."""
    out: list[tuple[str, Any]] = []
    for conversation in sorted(ledger.conversations(), key=lambda c: c.id):
        out.append(("conversation", conversation.model_dump()))
        for section in ("messages", "execution_buffer", "summary", "buffer"):
            messages = ledger.messages(conversation.id, section)
            out.append(("messages", [m.model_dump() for m in messages]))
        for run in ledger.runs(conversation.id):
            out.append(("run", run.model_dump()))
            out.append(("steps", [e.model_dump() for e in ledger.steps(run.id)]))
            out.append(("tools", [t.model_dump() for t in ledger.tool_executions(run.id)]))
            out.append(("buffer", [m.model_dump() for m in ledger.buffer(run.id)]))
            out.append(("trace", [m.model_dump() for m in ledger.trace_messages(run.id)]))
            out.append(("run tree", ledger.run_tree(run.id).model_dump()))
    out.append(("search", [hit.model_dump() for hit in ledger.search("sunny marmalade")]))
    out.append(("stale runs", [run.model_dump() for run in ledger.stale_runs()]))
    return out


UNCOVERED = {
    "conversation": ("lease_holder", "lease_run_id", "lease_expires_at", "version", "updated_at"),
    "run": ("heartbeat_at",),
}
"""The fields of the records that come from columns no checksum covers (``_checksum``)."""


def uncovered_masked(dumped: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``dumped`` without what the uncovered columns decide: those fields, and which runs are
    stale (a running run whose lease expired, or, with ``stale_after``, that went quiet)."""
    masked: list[tuple[str, Any]] = []
    for kind, part in dumped:
        if kind in UNCOVERED:
            part = {k: v for k, v in part.items() if k not in UNCOVERED[kind]}
        elif kind == "run tree":
            part = _tree_masked(part)
        elif kind == "stale runs":
            continue
        masked.append((kind, part))
    return masked


def _tree_masked(tree: dict[str, Any]) -> dict[str, Any]:
    run = {k: v for k, v in tree["run"].items() if k not in UNCOVERED["run"]}
    return {**tree, "run": run, "children": [_tree_masked(c) for c in tree["children"]]}


@pytest.fixture(scope="module")
def ledger_file(tmp_path_factory: pytest.TempPathFactory) -> LedgerFile:
    path = tmp_path_factory.mktemp("flips") / "ledger.db"
    with Ledger.open(path) as ledger:
        record_representative_runs(ledger)
    assert not Path(f"{path}-wal").exists(), "the WAL was not checkpointed into the file"
    at = datetime.now(UTC)
    with Ledger.open(path, migrate=False, clock=lambda: at) as ledger:
        original = dump(ledger)
    return LedgerFile(path.read_bytes(), original, at)


def flipped(data: bytes, rng: random.Random) -> bytes:
    """``data`` with 1 to 16 random bits flipped (mostly one)."""
    copy = bytearray(data)
    for _ in range(rng.choice([1, 1, 1, 2, 4, 16])):
        copy[rng.randrange(len(copy))] ^= 1 << rng.randrange(8)
    return bytes(copy)


def read_copy(path: Path, at: datetime) -> tuple[str, Any]:
    """How a damaged copy reads, as of ``at``: ``("open error" | "read error" | "raw error" |
    "data", detail)``."""
    try:
        ledger = Ledger.open(path, migrate=False, clock=lambda: at)
    except AgentLedgerError as exc:
        return "open error", exc
    except Exception as exc:
        return "raw error", exc
    try:
        with ledger:
            return "data", dump(ledger)
    except AgentLedgerError as exc:
        return "read error", exc
    except Exception as exc:
        return "raw error", exc


def checked(path: Path) -> tuple[str, Any]:
    """What the checks make of a copy: ``("refused by verify=True at open" | "reported by
    verify()" | "raw error" | "found by nothing", detail)``."""
    try:
        ledger = Ledger.open(path, migrate=False, verify=True)
    except AgentLedgerError as exc:
        return "refused by verify=True at open", exc
    except Exception as exc:
        return "raw error", exc
    try:
        with ledger:
            problems = ledger.verify()
    except AgentLedgerError as exc:
        return "reported by verify()", exc
    except Exception as exc:
        return "raw error", exc
    return ("reported by verify()" if problems else "found by nothing"), problems


UNCOVERED_ONLY = "different only in uncovered columns (lease, version, heartbeat)"
CHECKS = {
    "refused by verify=True at open": "different, refused by verify=True at open",
    "reported by verify()": "different, reported by Ledger.verify()",
}


def raw_name(error: BaseException) -> str:
    return f"{type(error).__module__.split('.')[0]}.{type(error).__name__}: {error}"[:300]


def test_random_bit_flips_in_a_ledger_file_give_an_error_or_the_original_data(
    tmp_path, ledger_file, reliability_report
):
    """Every copy gives an error, the original data, data different only in columns no
    checksum covers, or damage that ``verify=True`` at open or ``Ledger.verify()`` finds (a row
    an index lost, which reads cannot see); never a raw exception."""
    rng = random.Random(20300101)
    copies = size(30, 1000)
    outcomes: Counter[str] = Counter(dict.fromkeys([UNCOVERED_ONLY, *CHECKS.values()], 0))
    raw: list[str] = []
    silent: list[str] = []
    masked_original = uncovered_masked(ledger_file.dump)
    for n in range(copies):
        data = flipped(ledger_file.data, rng)
        path = tmp_path / f"copy-{n}.db"
        path.write_bytes(data)
        kind, detail = read_copy(path, ledger_file.at)
        if kind == "open error":
            assert str(path) in str(detail), f"the error does not name the file: {detail}"
            outcomes[f"{type(detail).__name__} at open"] += 1
        elif kind == "read error":
            assert str(detail).strip(), f"{type(detail).__name__} without a message"
            outcomes[f"{type(detail).__name__} while reading"] += 1
        elif kind == "raw error":
            raw.append(f"copy {n}: {raw_name(detail)}")
        elif detail == ledger_file.dump:
            outcomes["the original data"] += 1
        elif uncovered_masked(detail) == masked_original:
            outcomes[UNCOVERED_ONLY] += 1
        else:
            found, why = checked(path)
            if found == "raw error":
                raw.append(f"copy {n} (checking): {raw_name(why)}")
            elif found == "found by nothing":
                silent.append(f"copy {n}: {_first_difference(masked_original, detail)}")
            else:
                outcomes[CHECKS[found]] += 1
        for leftover in tmp_path.glob(f"copy-{n}.db*"):
            leftover.unlink()

    assert not raw, "raw exceptions:\n" + "\n".join(raw)
    assert not silent, "silently different data no check found:\n" + "\n".join(silent)
    assert sum(outcomes.values()) == copies
    assert outcomes["the original data"] < copies, "no flip did any damage: a broken test"
    reliability_report(
        f"sqlite: {copies} copies of a {len(ledger_file.data) // 1024} KiB ledger with 1-16 "
        "random bit flips each, everything read through the public API and compared with the "
        f"original: {dict(sorted(outcomes.items()))}; no raw exception, and no silent "
        "difference that neither the checksums, verify=True at open nor Ledger.verify() found"
    )


def _first_difference(masked_original: list[tuple[str, Any]], dumped: list[Any]) -> str:
    """Where a copy's data first differs from the original's, for the failure message."""
    masked = uncovered_masked(dumped)
    for (kind, before), (_, after) in zip(masked_original, masked, strict=False):
        if before != after:
            return f"{kind}: {before!r:.300} became {after!r:.300}"
    return f"{len(masked_original)} parts became {len(masked)}"
