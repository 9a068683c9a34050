"""What the command-line tests share: a ledger holding a scripted agent's run (and a run whose
process "died"), and the command run through click's ``CliRunner``, as a process of its own,
or at a prompt in one (:class:`Interactive`)."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
from click.testing import CliRunner, Result

import support.migration_harness as harness
from agentledger import AgentBuilder, ToolCall, tool
from agentledger.cli import cli
from agentledger.ledger import Ledger
from agentledger.llm import InferenceResponse, ScriptedLLM

QUESTION = "What is the weather in Paris?"
TOOL_OUTPUT = "TOOL-OUTPUT 22C and sunny in Paris"
ANSWER = "Paris is sunny, with marmalade skies."


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return TOOL_OUTPUT


@dataclass(frozen=True)
class Recorded:
    url: str
    conversation_id: str
    run_id: str
    stale_conversation_id: str | None = None
    stale_run_id: str | None = None


def record_a_run(url: str) -> Recorded:
    """One run of a scripted agent: a tool call, then the answer."""
    llm = ScriptedLLM(
        [
            InferenceResponse(
                tool_calls=[ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"})],
                usage={"input_tokens": 123, "output_tokens": 45},
                finish_reason="tool_calls",
            ),
            InferenceResponse(
                content=ANSWER,
                usage={"input_tokens": 200, "output_tokens": 17},
                finish_reason="stop",
            ),
        ]
    )
    with Ledger.open(url) as ledger:
        agent = (
            AgentBuilder()
            .with_llm(llm)
            .with_name("weather-bot")
            .with_tools([get_weather])
            .with_ledger(ledger)
            .build()
        )
        result = agent.run(QUESTION)
    return Recorded(url, result.conversation_id, result.run_id)


def record_a_run_and_a_stale_one(url: str) -> Recorded:
    """:func:`record_a_run`, and a run begun and stepped once, never committed."""
    finished = record_a_run(url)
    with Ledger.open(url) as ledger:
        conversation_id, run_id = harness.begin_stale_run(ledger)
    return Recorded(url, finished.conversation_id, finished.run_id, conversation_id, run_id)


PRINTS_NO_ROWS = {
    "demo": "a guided tour, in prose and tables made for reading",
    "chat": "a conversation with a model",
    "run": "one answer of a model",
    "db": "a group",
    "db upgrade": "one line: the revision reached",
    "db downgrade": "one line: the revision reached",
    "db current": "one value: the revision",
    "db check": "its answer is the exit code",
    "db schema": "SQL text (DDL)",
    "db app-role": "SQL text (CREATE ROLE and its grants)",
    "datasette-metadata": "one JSON document, Datasette's metadata",
    "analytics": "a group",
    "analytics sql": "a SQL script for the duckdb shell",
    "export": "a group",
    "mcp": "a group",
    "mcp serve": "an MCP server: the protocol itself on standard output (stdio), or over HTTP",
    "ui": "one line: the address of the viewer it serves",
}
"""The commands that print no rows, and what they print instead (every other command takes
``--json``)."""


def command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[str]:
    """Every command and group below ``group``, by its path: ``runs``, ``db``, ``db upgrade``."""
    for name, command in sorted(group.commands.items()):
        yield " ".join((*prefix, name))
        if isinstance(command, click.Group):
            yield from command_paths(command, (*prefix, name))


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def ok(*args: str, env: dict[str, str] | None = None) -> str:
    result = invoke(*args, env=env)
    raised = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
    assert result.exit_code == 0, f"agentledger {' '.join(args)}: {result.output}{raised}"
    assert result.exception is None
    return result.output


def flat(output: str) -> str:
    """The output with its line wrapping undone."""
    return " ".join(output.split())


CONSOLE_SCRIPT = Path(sys.executable).parent / "agentledger"


def console(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``agentledger ARGS`` as a user runs it: the installed console script, in a process of its
    own, its output captured (a pipe, not a terminal), with neither ``COLUMNS`` nor
    ``AGENTLEDGER_DB`` from the test's environment unless ``env`` gives them."""
    env = {
        **{k: v for k, v in os.environ.items() if k not in {"COLUMNS", "AGENTLEDGER_DB"}},
        **(env or {}),
    }
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


RESEND_AFTER = 3.0
"""Seconds a test waits for what Ctrl-C does before it presses it again."""


class Interactive:
    """``agentledger ARGS`` as a user runs it at a prompt: the installed console script in a
    process of its own, lines written to its standard input, its output read as it comes (each
    read kept apart, to see what streamed), Ctrl-C sent as SIGINT. Output is a pipe, not a
    terminal, so it is printed plainly."""

    def __init__(self, *args: str, cwd: Path | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k not in {"COLUMNS", "AGENTLEDGER_DB"}}
        with _sigint_not_ignored():
            self.process = subprocess.Popen(
                [str(CONSOLE_SCRIPT), *args],
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        self.reads: list[str] = []
        """Each read of the output, in order."""
        self._chunks: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._raw = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def output(self) -> str:
        return self._raw.decode(errors="replace")

    def _read(self) -> None:
        assert self.process.stdout is not None
        while chunk := os.read(self.process.stdout.fileno(), 65536):
            self._chunks.put(chunk)
        self._chunks.put(b"")

    def wait_for(self, text: str, *, after: int = 0, timeout: float = 60) -> int:
        """Read until ``text`` is in the output past position ``after``; where it ends."""
        found = self._find(text, after, timeout)
        if found < 0:
            raise AssertionError(f"no {text!r} in {timeout}s; the output:\n{self.output}")
        return found

    def _find(self, text: str, after: int, timeout: float) -> int:
        """Where ``text`` ends in the output past ``after``, read for ``timeout`` seconds at
        most; -1 if it is not there by then."""
        deadline = time.monotonic() + timeout
        while (found := self.output.find(text, after)) < 0:
            try:
                chunk = self._chunks.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return -1
            if not chunk:
                raise AssertionError(f"the process ended without {text!r}:\n{self.output}")
            self._raw += chunk
            self.reads.append(chunk.decode(errors="replace"))
        return found + len(text)

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{line}\n".encode())
        self.process.stdin.flush()

    def interrupt(self, *, until: str, after: int = 0, timeout: float = 60) -> int:
        """Ctrl-C, as a terminal sends it (SIGINT), until ``until`` is in the output past
        ``after``; where it ends there. See :meth:`interrupt_until_exit` for why it may take
        more than one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.process.send_signal(signal.SIGINT)
            found = self._find(until, after, RESEND_AFTER)
            if found >= 0:
                return found
        raise AssertionError(f"no {until!r} after Ctrl-C; the output:\n{self.output}")

    def interrupt_once_and_wait(self, timeout: float = 60) -> int:
        """One Ctrl-C, then the exit code once the process ended: for a process already waiting
        where it catches the signal (a stop being recorded, a tool being waited for), where a
        signal sent again while it leaves would be a third press, not the second."""
        self.process.send_signal(signal.SIGINT)
        return self.wait(timeout)

    def interrupt_until_exit(self, timeout: float = 60) -> int:
        """Ctrl-C until the process reacts, then its exit code once it ended. Python sees a
        signal when the wait it blocks in is interrupted: one that lands after the process
        wrote what a test waits for but before it began to wait (``input()`` between its
        prompt and its read) is seen at the next one. A person never presses Ctrl-C in that
        window; a test that signals as soon as it reads the prompt does, so it signals again a
        while later, unless the process has reacted meanwhile (printed something, or ended):
        one more signal then would be a third press, landing while it leaves."""
        deadline = time.monotonic() + timeout
        while True:
            printed = self._drained()
            self.process.send_signal(signal.SIGINT)
            try:
                return self.wait(min(RESEND_AFTER, max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    raise
                if self._drained() > printed:
                    return self.wait(max(0.0, deadline - time.monotonic()))

    def _drained(self) -> int:
        """How much the process has printed so far, what it wrote since last read included."""
        while True:
            try:
                chunk = self._chunks.get_nowait()
            except queue.Empty:
                break
            if not chunk:  # the end: left for the next reader to see
                self._chunks.put(chunk)
                break
            self._raw += chunk
            self.reads.append(chunk.decode(errors="replace"))
        return len(self.output)

    def wait(self, timeout: float = 60) -> int:
        """The exit code, once the process has ended (its remaining output read)."""
        code = self.process.wait(timeout)
        self._reader.join(timeout)
        while not self._chunks.empty():
            self._raw += self._chunks.get()
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(60)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


@contextlib.contextmanager
def _sigint_not_ignored() -> Iterator[None]:
    """A child started inside gets SIGINT as KeyboardInterrupt, even when this process was
    started ignoring it (a background job of a shell without job control): an ignored signal
    stays ignored across exec, a handled one is reset to the default, which Python handles."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
