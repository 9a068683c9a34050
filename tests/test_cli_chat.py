"""``agentledger chat`` and ``agentledger run`` against a real model API on loopback: tool calls
printed as they happen, the answer, the run's tokens and cost, the conversation kept in a SQLite
ledger and continued with ``--conversation``, and clean errors for what a user gets wrong."""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agentledger._values import money
from agentledger.cli import cli
from support.cli import Interactive, console
from support.fake_provider import (
    FakeProvider,
    Reply,
    Streamed,
    anthropic_error,
    anthropic_message,
    anthropic_stream,
    anthropic_text,
    anthropic_tool_use,
    openai_completion,
    openai_error,
    openai_stream,
    openai_tool_call,
    responses_function_call,
    responses_response,
    responses_stream,
    responses_text,
)

TOOLS_MODULE = "cli_chat_tools"
TOOLS_SOURCE = '''
import time


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"22C and sunny in {city}"


def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"boom: {reason}")


def interrupt() -> str:
    """Stands for the user pressing Ctrl-C while a tool runs."""
    raise KeyboardInterrupt


def slow(seconds: float) -> str:
    """Takes its time."""
    time.sleep(seconds)
    return "done"


def untyped(city):
    """No annotations: cannot be described to a model."""
    return city


ALL = [get_weather, explode]
NOT_A_TOOL = 42
'''
ANSWER = "It is 22C and sunny in Paris."


@dataclass(frozen=True)
class Wire:
    """One provider's wire format, as the fake server speaks it."""

    provider: str
    model: str
    key_variable: str

    def base_url(self, server: FakeProvider) -> str:
        return server.url if self.provider == "anthropic" else server.openai_url

    def tool_call(self, name: str, arguments: dict[str, Any], **usage: int) -> dict[str, Any]:
        if self.provider == "openai-responses":
            call = responses_function_call(name, arguments)
            return responses_response(call, model=self.model, **_responses_usage(usage))
        if self.provider == "openai":
            call = openai_tool_call(name, arguments)
            return openai_completion(None, [call], model=self.model, **_openai_usage(usage))
        return anthropic_message(
            anthropic_tool_use(name, arguments), model=self.model, **_anthropic_usage(usage)
        )

    def answer(self, text: str, **usage: int) -> dict[str, Any]:
        if self.provider == "openai-responses":
            item = responses_text(text)
            return responses_response(item, model=self.model, **_responses_usage(usage))
        if self.provider == "openai":
            return openai_completion(text, model=self.model, **_openai_usage(usage))
        return anthropic_message(anthropic_text(text), model=self.model, **_anthropic_usage(usage))

    def error(self, message: str) -> dict[str, Any]:
        if self.provider != "anthropic":
            return openai_error(message, kind="invalid_api_key")
        return anthropic_error(message, kind="authentication_error")

    def texts(self, body: dict[str, Any]) -> list[str]:
        """The text of every message a request sent."""
        texts = []
        for message in body.get("messages") or body["input"]:
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts += [b.get("text", "") for b in content if isinstance(b, dict)]
        return texts


def _openai_usage(usage: dict[str, int]) -> dict[str, int]:
    names = {"input": "prompt_tokens", "output": "completion_tokens", "cached": "cached_tokens"}
    return {names[k]: v for k, v in usage.items()}


def _responses_usage(usage: dict[str, int]) -> dict[str, int]:
    names = {"input": "input_tokens", "output": "output_tokens", "cached": "cached_tokens"}
    return {names[k]: v for k, v in usage.items()}


def _anthropic_usage(usage: dict[str, int]) -> dict[str, int]:
    names = {"input": "input_tokens", "output": "output_tokens"}
    return {names[k]: v for k, v in usage.items()}


def streamed(body: dict[str, Any], *, size: int = 4, interval: float = 0.0) -> Reply:
    """``body`` (a completion or a message) as its API streams it: the chat asks for streams."""
    if "choices" in body:
        events = openai_stream(body, size=size)
    elif "output" in body:
        events = responses_stream(body, size=size)
    else:
        events = anthropic_stream(body, size=size)
    return Reply(Streamed(tuple(events), interval=interval))


OPENAI = Wire("openai", "gpt-4o-mini", "OPENAI_API_KEY")
ANTHROPIC = Wire("anthropic", "claude-sonnet-4-5-20250929", "ANTHROPIC_API_KEY")
RESPONSES = Wire("openai-responses", "gpt-4o-mini", "OPENAI_API_KEY")
WIRES = [
    pytest.param(OPENAI, id="openai"),
    pytest.param(RESPONSES, id="openai-responses"),
    pytest.param(ANTHROPIC, id="anthropic"),
]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeProvider]:
    """One loopback server for the module: stopping one takes half a second."""
    provider = FakeProvider()
    yield provider
    provider.close()


@pytest.fixture
def fake_provider(server: FakeProvider) -> Iterator[FakeProvider]:
    """The module's server, with no request recorded and every scripted reply used up after."""
    server.requests.clear()
    yield server
    assert server.remaining == 0, "the test left scripted replies unused"


@pytest.fixture
def tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module of tools on sys.path (restored afterwards), as a user's own would be."""
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / f"{TOOLS_MODULE}.py").write_text(TOOLS_SOURCE, encoding="utf-8")
    (folder / "broken_cli_chat_tools.py").write_text("import not_installed_anywhere\n")
    monkeypatch.syspath_prepend(str(folder))
    yield TOOLS_MODULE
    for name in (TOOLS_MODULE, "broken_cli_chat_tools"):
        sys.modules.pop(name, None)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


def invoke(db: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), *args], input=input)


def model_options(wire: Wire, server: FakeProvider, model: str | None = None) -> list[str]:
    return [
        "--provider",
        wire.provider,
        "--model",
        model or wire.model,
        "--base-url",
        wire.base_url(server),
    ]


def query(db: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(sql, params).fetchall()
    conn.close()
    return rows


def conversation_id(output: str) -> str:
    found = re.search(r"conversation (\S+)", output)
    assert found is not None, output
    return found.group(1)


# --- run: one question ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "tokens", "cost"),
    [
        # gpt-4o-mini: $0.15 in, $0.075 cached in, $0.60 out per million tokens.
        # (1000 x 0.15 + 50 x 0.60) + (1000 x 0.15 + 200 x 0.075 + 30 x 0.60) = 363 / 1e6
        pytest.param(OPENAI, "2200 in / 80 out tokens · 200 cache read", 0.000363, id="openai"),
        pytest.param(
            RESPONSES,
            "2200 in / 80 out tokens · 200 cache read",
            0.000363,
            id="openai-responses",
        ),
        # claude-sonnet-4-5: $3 in, $15 out: (1000 x 3 + 50 x 15) + (1200 x 3 + 30 x 15) = 7800
        pytest.param(ANTHROPIC, "2200 in / 80 out tokens", 0.0078, id="anthropic"),
    ],
)
def test_run_prints_the_tool_call_its_result_the_answer_tokens_and_cost_and_records_it(
    wire, tokens, cost, fake_provider, tools_module, db
):
    second = {"input": 1200, "output": 30} | ({"cached": 200} if wire is not ANTHROPIC else {})
    fake_provider.push(
        streamed(wire.tool_call("get_weather", {"city": "Paris"}, input=1000, output=50)),
        streamed(wire.answer(ANSWER, **second)),
    )
    result = invoke(
        db,
        "run",
        "What is the weather in Paris?",
        *model_options(wire, fake_provider),
        "--tool",
        f"{tools_module}:get_weather",
    )

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert '  → get_weather(city="Paris")' in lines
    assert "  ← 22C and sunny in Paris" in lines
    assert lines.index('  → get_weather(city="Paris")') < lines.index(ANSWER)
    status = next(line for line in lines if line.startswith("run "))
    assert f"· 2 steps · {tokens} · {money(cost)}" in status
    ((recorded,),) = query(db, "SELECT sum(cost_usd) FROM step_executions")
    assert recorded == pytest.approx(cost)
    cid = conversation_id(result.output.split(ANSWER)[1])
    assert f"--conversation {cid}" in result.output

    assert query(
        db, "SELECT role, content FROM conversation_messages WHERE conversation_id = ?", cid
    ) == [("user", "What is the weather in Paris?"), ("assistant", ANSWER)]
    assert query(db, "SELECT status, step_count FROM agent_runs") == [("completed", 2)]
    assert query(db, "SELECT tool_name, result FROM tool_executions") == [
        ("get_weather", "22C and sunny in Paris")
    ]
    tools_sent = fake_provider.requests[0].body["tools"]
    assert "get_weather" in json.dumps(tools_sent)


def test_a_failing_tool_is_printed_as_an_error_and_the_run_goes_on(fake_provider, tools_module, db):
    fake_provider.push(
        streamed(OPENAI.tool_call("explode", {"reason": "x" * 300})),
        streamed(OPENAI.answer("Sorry.")),
    )
    result = invoke(
        db, "run", "Try it", *model_options(OPENAI, fake_provider), "--tool", f"{tools_module}:ALL"
    )

    assert result.exit_code == 0, result.output
    error = next(line for line in result.output.splitlines() if line.startswith("  ← "))
    assert error.startswith("  ← error: ") and "RuntimeError: boom" in error
    assert len(error) < 120  # one line, truncated
    assert "Sorry." in result.output


@pytest.mark.parametrize("wire", WIRES)
def test_a_model_with_no_price_prints_unpriced_and_how_to_give_one(wire, fake_provider, db):
    fake_provider.push(streamed({**wire.answer("Hi."), "model": "local-model"}))
    result = invoke(db, "run", "Hello", *model_options(wire, fake_provider, model="local-model"))

    assert result.exit_code == 0, result.output
    assert "· unpriced (no price for local-model; pass --prices FILE)" in result.output
    assert "$0" not in result.output


def test_prices_from_a_file_price_a_local_model(fake_provider, db, tmp_path):
    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps(
            {
                "version": "mine",
                "as_of": "2030-01-01",
                "models": {"local-model": {"input": 1.0, "output": 2.0}},
            }
        ),
        encoding="utf-8",
    )
    fake_provider.push(streamed(openai_completion("Hi.", model="local-model")))  # 20 in, 10 out
    options = model_options(OPENAI, fake_provider, model="local-model")
    result = invoke(db, "run", "Hello", *options, "--prices", str(prices))

    assert result.exit_code == 0, result.output
    assert "· 1 step · 20 in / 10 out tokens · $0.000040" in result.output


def test_the_system_prompt_reaches_the_model(fake_provider, db):
    fake_provider.push(streamed(OPENAI.answer("Ahoy.")))
    options = model_options(OPENAI, fake_provider)
    result = invoke(db, "run", "Hello", *options, "--system", "Talk like a pirate.")

    assert result.exit_code == 0, result.output
    assert fake_provider.requests[0].body["messages"][0] == {
        "role": "system",
        "content": "Talk like a pirate.",
    }


# --- chat: a conversation -----------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_chat_keeps_every_turn_in_one_conversation_and_continues_it_later(wire, fake_provider, db):
    fake_provider.push(
        streamed(wire.answer("Hello, Ada.")), streamed(wire.answer("Ada, I remember."))
    )
    first = invoke(
        db, "chat", *model_options(wire, fake_provider), input="I am Ada.\n\nWho am I?\n"
    )

    assert first.exit_code == 0, first.output
    assert first.output.startswith("new conversation ")
    cid = conversation_id(first.output)
    assert f"--conversation {cid}" in first.output
    assert first.output.count("you> ") == 4  # two questions, the empty line, the end of input
    assert "Hello, Ada." in first.output and "Ada, I remember." in first.output
    assert len(fake_provider.requests) == 2
    assert query(db, "SELECT count(*) FROM conversations") == [(1,)]
    assert query(db, "SELECT count(*), min(status) FROM agent_runs") == [(2, "completed")]

    fake_provider.push(streamed(wire.answer("Still Ada.")))
    again = invoke(
        db,
        "chat",
        *model_options(wire, fake_provider),
        "--conversation",
        cid,
        input="And now?\n/exit\nnever sent\n",
    )

    assert again.exit_code == 0, again.output
    assert again.output.startswith(f"continuing conversation {cid} (4 messages)")
    assert "Still Ada." in again.output
    assert len(fake_provider.requests) == 3  # nothing after /exit was sent
    sent = wire.texts(fake_provider.requests[-1].body)
    assert sent == ["I am Ada.", "Hello, Ada.", "Who am I?", "Ada, I remember.", "And now?"]
    assert query(
        db, "SELECT role, content FROM conversation_messages ORDER BY seq DESC LIMIT 1"
    ) == [("assistant", "Still Ada.")]


def test_run_continues_a_conversation_that_chat_began(fake_provider, db):
    fake_provider.push(streamed(OPENAI.answer("Noted.")), streamed(OPENAI.answer("Blue.")))
    options = model_options(OPENAI, fake_provider)
    first = invoke(db, "chat", *options, input="My favourite colour is blue.\n/quit\n")
    cid = conversation_id(first.output)

    result = invoke(db, "run", "What is my favourite colour?", *options, "--conversation", cid)

    assert result.exit_code == 0, result.output
    assert "My favourite colour is blue." in OPENAI.texts(fake_provider.requests[-1].body)
    assert query(db, "SELECT count(DISTINCT conversation_id) FROM agent_runs") == [(1,)]


def test_run_continues_a_conversation_given_by_a_unique_prefix_of_its_id(fake_provider, db):
    fake_provider.push(streamed(OPENAI.answer("Noted.")), streamed(OPENAI.answer("Blue.")))
    options = model_options(OPENAI, fake_provider)
    first = invoke(db, "run", "My favourite colour is blue.", *options)
    cid = conversation_id(first.output.split("tokens")[1])

    result = invoke(db, "run", "What is my favourite colour?", *options, "--conversation", cid[:8])

    assert result.exit_code == 0, result.output
    assert f"conversation {cid} " in result.output
    assert "My favourite colour is blue." in OPENAI.texts(fake_provider.requests[-1].body)
    assert query(db, "SELECT count(*), count(DISTINCT conversation_id) FROM agent_runs") == [(2, 1)]


# --- failures -----------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("command", ["run", "chat"])
def test_a_missing_api_key_is_a_clean_error_naming_the_variable(wire, command, db):
    args = [command, "Hello"] if command == "run" else [command]
    result = invoke(db, *args, "--provider", wire.provider, "--model", wire.model, input="Hi\n")

    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    assert f"set {wire.key_variable} in the environment" in result.output
    assert "Traceback" not in result.output
    assert not db.exists()


@pytest.mark.parametrize("wire", WIRES)
def test_a_refused_key_fails_the_run_with_its_message_records_it_and_exits_1(
    wire, fake_provider, db, monkeypatch
):
    monkeypatch.setenv(wire.key_variable, "sk-test-0123456789abcdef")
    fake_provider.push(Reply(wire.error("Incorrect API key provided: sk-test-0123****"), 401))
    result = invoke(db, "run", "Hello", *model_options(wire, fake_provider))

    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    assert "error: ProviderAuthenticationError:" in result.output
    assert f"Set {wire.key_variable} to a valid key" in result.output
    assert "failed and is kept in the ledger" in result.output
    assert "sk-test-0123456789abcdef" not in result.output
    assert "Traceback" not in result.output
    assert query(db, "SELECT status FROM agent_runs") == [("failed",)]
    assert query(db, "SELECT role, content FROM conversation_messages") == [("user", "Hello")]


def test_a_provider_failing_on_every_retry_is_said_once_with_the_attempts_and_traced_once(
    fake_provider, db
):
    """The console script in a process of its own (no logging configured, as for a user):
    the retries print nothing, the error is said once with how many attempts were made, and
    the run's trace shows it once."""
    overloaded = Reply(openai_error("overloaded", kind="server_error"), 503, {"retry-after": "0"})
    fake_provider.push(*[overloaded] * 5)
    done = console("run", "Hi", "--db", str(db), *model_options(OPENAI, fake_provider))

    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == ""
    said = "OpenAI failed on its side (HTTP 503: overloaded; type: server_error) after 5 attempts."
    assert done.stdout.count("failed on its side") == 1 and said in done.stdout
    assert len(fake_provider.requests) == 5
    (run_id,) = [row[0] for row in query(db, "SELECT id FROM agent_runs")]
    traced = " ".join(invoke(db, "trace", run_id).output.split())
    assert traced.count("failed on its side") == 1 and said in traced
    assert " · cli · failed · 1 step · " in traced


def test_chat_goes_on_after_a_failed_run_and_retry_continues_it(fake_provider, db):
    fake_provider.push(Reply(OPENAI.error("Incorrect API key provided"), 401))
    fake_provider.push(streamed(OPENAI.answer("Hello!")))
    options = model_options(OPENAI, fake_provider)
    result = invoke(db, "chat", *options, input="Hi\n/retry\n/retry\n")

    assert result.exit_code == 0, result.output
    assert "ProviderAuthenticationError" in result.output
    assert "Hello!" in result.output
    assert "no failed run to retry" in result.output
    assert query(db, "SELECT status, step_count FROM agent_runs") == [("completed", 2)]
    assert query(db, "SELECT role, content FROM conversation_messages") == [
        ("user", "Hi"),
        ("assistant", "Hello!"),
    ]


def test_a_later_chat_retries_the_run_that_run_left_failed(fake_provider, db):
    fake_provider.push(Reply(OPENAI.error("Incorrect API key provided"), 401))
    options = model_options(OPENAI, fake_provider)
    failed = invoke(db, "run", "Hi", *options)
    cid = conversation_id(failed.output.split("tokens")[1])
    assert f"continue it with: agentledger --db {db} chat" in failed.output
    assert f"--conversation {cid}, then /retry continues the run" in failed.output

    fake_provider.push(streamed(OPENAI.answer("Hello!")))
    result = invoke(db, "chat", *options, "--conversation", cid, input="/retry\n")

    assert result.exit_code == 0, result.output
    assert "its last run failed: /retry continues it" in result.output
    assert "Hello!" in result.output
    assert query(db, "SELECT status FROM agent_runs") == [("completed",)]


def test_ctrl_c_while_a_tool_runs_stops_the_run_keeps_it_interrupted_and_run_exits_130(
    fake_provider, tools_module, db
):
    """The tool raises KeyboardInterrupt in the run, as Ctrl-C would there."""
    fake_provider.push(streamed(OPENAI.tool_call("interrupt", {})))
    options = [*model_options(OPENAI, fake_provider), "--tool", f"{tools_module}:interrupt"]
    result = invoke(db, "run", "Go", *options)

    assert result.exit_code == 130, result.output
    assert "  → interrupt()" in result.output.splitlines()
    assert "(interrupted: the answer so far is kept)" in result.output
    assert "conversation " in result.output and "Traceback" not in result.output
    assert len(fake_provider.requests) == 1
    assert query(db, "SELECT status, stop_reason FROM agent_runs") == [("interrupted", "cancelled")]


def test_ctrl_c_while_a_tool_runs_in_chat_keeps_the_run_and_comes_back_to_the_prompt(
    fake_provider, tools_module, db
):
    fake_provider.push(streamed(OPENAI.tool_call("interrupt", {})))
    fake_provider.push(streamed(OPENAI.answer("Ok.")))
    options = [*model_options(OPENAI, fake_provider), "--tool", f"{tools_module}:interrupt"]
    result = invoke(db, "chat", *options, input="Go\ngo on\n")

    assert result.exit_code == 0, result.output
    assert "(interrupted: the answer so far is kept; `go on` continues it)" in result.output
    assert result.output.count("you> ") == 3
    assert "you> Ok." in result.output.splitlines()  # what the user types is not echoed here
    assert query(db, "SELECT status FROM agent_runs ORDER BY started_at") == [
        ("interrupted",),
        ("completed",),
    ]


# --- chat at a prompt, in a process of its own: streaming and Ctrl-C ------------------------------

STOPPED = "(interrupted: the answer so far is kept; `go on` continues it)"


@pytest.fixture
def chat_process(
    db: Path, fake_provider: FakeProvider, tmp_path: Path
) -> Iterator[Callable[..., Interactive]]:
    """Starts ``agentledger chat`` on the fake provider, in the folder the tools module is in."""
    started: list[Interactive] = []

    def start(*options: str) -> Interactive:
        args = ["--db", str(db), "chat", *model_options(OPENAI, fake_provider), *options]
        started.append(Interactive(*args, cwd=tmp_path / "tools"))
        return started[-1]

    yield start
    for chat in started:
        chat.close()


def test_chat_prints_the_answer_as_it_streams_and_ctrl_c_at_the_prompt_leaves_as_ctrl_d_does(
    fake_provider, tools_module, chat_process
):
    answer = "The answer arrives in pieces, one event after another, as the model writes it."
    fake_provider.push(streamed(OPENAI.answer(answer), interval=0.05))
    chat = chat_process()
    prompt = chat.wait_for("you> ")
    before = len(chat.reads)
    chat.send("Hello")
    status = chat.wait_for("\nrun ", after=prompt)

    pieces = [r for r in chat.reads[before:] if r.strip() and r in answer]
    assert len(pieces) >= 2, chat.reads[before:]  # read as it came, not all at once at the end
    assert chat.output[prompt:status] == f"{answer}\nrun "

    chat.wait_for("you> ", after=status)
    assert chat.interrupt_until_exit() == 0


LONG_ANSWER = " ".join(f"word{i}" for i in range(200))


def test_ctrl_c_while_the_answer_streams_keeps_what_was_shown_and_comes_back_to_the_prompt(
    fake_provider, tools_module, db, chat_process
):
    fake_provider.push(streamed(OPENAI.answer(LONG_ANSWER), interval=0.02))  # 6 s of answer
    chat = chat_process()
    prompt = chat.wait_for("you> ")
    chat.send("Tell me a long story.")
    chat.wait_for("word3 ", after=prompt)

    said = chat.interrupt(until=f"\n{STOPPED}\n", after=prompt)
    chat.wait_for("you> ", after=said)
    assert chat.process.poll() is None  # back at the prompt
    shown = chat.output[prompt : said - len(STOPPED) - 2]
    assert LONG_ANSWER.startswith(shown) and len("word3 ") < len(shown) < len(LONG_ANSWER)
    assert query(db, "SELECT status, stop_reason FROM agent_runs") == [("interrupted", "cancelled")]
    assert query(
        db, "SELECT role, content, interrupted FROM conversation_messages ORDER BY seq"
    ) == [("user", "Tell me a long story.", 0), ("assistant", shown, 1)]

    assert chat.interrupt_until_exit() == 130  # a second Ctrl-C, at the prompt
    assert "Traceback" not in chat.output


def test_ctrl_c_during_a_long_tool_says_stopping_and_a_second_ctrl_c_leaves_with_130(
    fake_provider, tools_module, db, chat_process
):
    fake_provider.push(streamed(OPENAI.tool_call("slow", {"seconds": 60})))
    chat = chat_process("--tool", f"{tools_module}:slow")
    prompt = chat.wait_for("you> ")
    chat.send("Go")
    chat.wait_for("  → slow(seconds=60)\n", after=prompt)
    chat.interrupt(until="stopping...\n", after=prompt)

    assert chat.interrupt_once_and_wait() == 130  # while the stop waits for the tool
    assert chat.output.count("stopping...") == 1
    assert "interrupted: run " in chat.output and "Traceback" not in chat.output
    assert query(db, "SELECT status FROM agent_runs") == [("running",)]  # recover frees it


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no_colon", "is not MODULE:ATTR"),
        (":get_weather", "is not MODULE:ATTR"),
        ("no_such_module_here:f", "there is no module 'no_such_module_here' here"),
        ("broken_cli_chat_tools:f", "No module named 'not_installed_anywhere' (install"),
        (f"{TOOLS_MODULE}:missing", f"module '{TOOLS_MODULE}' has no attribute 'missing'"),
        (f"{TOOLS_MODULE}:NOT_A_TOOL", "is a int, not a tool"),
        (f"{TOOLS_MODULE}:untyped", "has no type annotation"),
    ],
)
def test_a_bad_tool_spec_is_a_usage_error_that_says_what_failed(
    spec, says, tools_module, fake_provider, db
):
    result = invoke(db, "run", "Hi", *model_options(OPENAI, fake_provider), "--tool", spec)

    assert result.exit_code == 2
    assert "Invalid value for '--tool'" in result.output
    assert says in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert not db.exists() and not fake_provider.requests


def test_an_unknown_conversation_is_a_clean_error_and_nothing_is_written(fake_provider, db):
    options = model_options(OPENAI, fake_provider)
    missing_ledger = invoke(db, "run", "Hi", *options, "--conversation", "nope")

    assert missing_ledger.exit_code == 1
    assert "no conversation 'nope'" in missing_ledger.output
    assert not db.exists()

    fake_provider.push(streamed(OPENAI.answer("Hello.")))
    assert invoke(db, "run", "Hi", *options).exit_code == 0
    before = query(db, "SELECT count(*) FROM conversation_messages")
    for command in (["run", "Hi"], ["chat"]):
        result = invoke(db, *command, *options, "--conversation", "nope", input="Hi\n")
        assert result.exit_code == 1
        assert "no conversation 'nope' in this ledger" in result.output
        assert "Traceback" not in result.output
    assert query(db, "SELECT count(*) FROM conversation_messages") == before
    assert len(fake_provider.requests) == 1


def test_the_api_key_is_not_an_option():
    result = CliRunner().invoke(cli, ["run", "--help"])
    assert result.exit_code == 0
    assert "--api-key" not in result.output
    assert "OPENAI_API_KEY" in result.output


# --- --tenant and --owner ---------------------------------------------------------------------


def test_run_in_a_tenant_and_owner_records_there_and_cannot_continue_another_scopes_conversation(
    fake_provider, db
):
    fake_provider.push(streamed(OPENAI.answer("Hi.")))
    options = model_options(OPENAI, fake_provider)
    first = invoke(db, "--tenant", "acme", "run", "Hello", *options, "--owner", "bob")
    assert first.exit_code == 0, first.output
    assert query(db, "SELECT tenant_id, owner_id FROM conversations") == [("acme", "bob")]
    assert query(db, "SELECT DISTINCT tenant_id FROM conversation_messages") == [("acme",)]
    assert "--tenant acme --owner bob" in first.output  # in the command that continues it
    started = conversation_id(first.output)
    other = invoke(db, "run", "Mine now", *options, "--tenant", "globex", "--conversation", started)
    assert other.exit_code == 1
    assert f"no conversation {started!r}" in other.output
    assert query(db, "SELECT COUNT(*) FROM agent_runs") == [(1,)]
