"""The reliability suite's child processes: a mixed workload on one ledger.

The workload is an agent whose model is a pure function of the request, so a run resumed in
another process ends with the very answer the first process would have given. What a run does
depends on its user text, whose first word is its kind:

``chat``
    answers at once, no tool;
``tools``
    calls ``lookup`` in three steps, one call each, then answers with the three facts;
``parallel``
    calls ``lookup`` three times in one step (the calls run at once), then answers;
``team``
    spawns two ``worker`` subagents in one step (each calls ``lookup`` in two steps before
    its answer), then answers with both answers.

:func:`expected_answer` says what a run on a text answers, for root and subagent runs alike.

Every run a child acknowledges (``Agent.run`` returned) is appended to its journal file, synced,
right after ``run`` returns: whatever happens next, the parent knows the run was acknowledged.

Children are forked from a fork server (``python -m support.workload serve``, started by
:class:`ForkServer`): a process that imports agentledger once and then forks a child per
request, in milliseconds, so a test can start and SIGKILL a thousand of them. The fork server
opens no database and starts no thread; each child opens its own ledger after the fork. The
roles a child can play:

``mixed``
    runs of every kind on a handful of conversations (new ones now and then), forever, until
    it is killed (or ``max_seconds`` pass): the random-kill workload.
``writer``
    for ``seconds``, runs on its own conversations and now and then on ``shared`` ones, counting
    what went wrong (a busy conversation is a clean outcome on a shared one; a busy database is
    not; with ``tolerate_disconnects``, a lost database connection is counted and the writer
    goes on with a new conversation).
``reader``
    for ``seconds``, reads conversations, runs, steps and run trees through the public API and
    checks, in one read transaction of plain SQL, that a conversation is never seen half way
    through a run's commit.

A child other than ``mixed`` writes ``{"ok": ...}`` or ``{"error": ...}`` to its result file.
The parent's side is at the bottom of this file: :class:`ForkServer`, :func:`run_all`, the journals,
and :func:`answer_problems`, which checks the database against the journals and the answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from agentledger import (
    Agent,
    AgentBuilder,
    ConversationBusyError,
    RunResult,
    SubagentSpec,
    ToolCall,
    Usage,
    tool,
)
from agentledger._loop import SPAWN_TOOL_NAME
from agentledger._values import Role
from agentledger.errors import LedgerBusyError, LedgerUnavailableError
from agentledger.ledger import Ledger
from agentledger.llm import InferenceRequest, InferenceResponse
from support import child_environment, module_command
from support.crash_child import connect, play_role, rows

MODULE = "support.workload"
"""What :class:`ForkServer` runs: ``python -m support.workload serve``."""
KINDS = ("chat", "tools", "parallel", "team")
FACTS = 3
"""Lookups a ``tools`` or ``parallel`` run makes."""
WORKERS = 2
"""Subagents a ``team`` run spawns."""
WORKER_FACTS = 2
"""Lookups a worker makes."""
USAGE = Usage(input_tokens=10, output_tokens=3)
RECENT = 6
"""The ``mixed`` role works on the most recently updated conversations, this many."""

# --- the agent ---------------------------------------------------------------------------------


def fact(topic: str, n: int) -> str:
    return f"{topic} / fact {n}"


def task_of(text: str, n: int) -> str:
    """The task a ``team`` run on ``text`` gives its worker ``n``."""
    return f"part {n} of {text}"


def expected_answer(user_text: str) -> str:
    """What a run on ``user_text`` answers once it completed (a worker's task included)."""
    kind = user_text.split(" ", 1)[0]
    if kind == "chat":
        return f"echo: {user_text}"
    if kind == "part":
        return f"{user_text} => " + "; ".join(fact(user_text, n) for n in range(WORKER_FACTS))
    if kind == "team":
        answers = (expected_answer(task_of(user_text, n)) for n in range(WORKERS))
        return f"{user_text} => " + " | ".join(answers)
    return f"{user_text} => " + "; ".join(fact(user_text, n) for n in range(FACTS))


def _last_user_text(request: InferenceRequest) -> str:
    return next(m.content for m in reversed(request.messages) if m.role is Role.USER)


def _results_of_this_run(request: InferenceRequest) -> list[str]:
    messages = list(request.messages)
    last_user = max((n for n, m in enumerate(messages) if m.role is Role.USER), default=-1)
    return [m.content for m in messages[last_user + 1 :] if m.role is Role.TOOL]


def _calls(*calls: ToolCall) -> InferenceResponse:
    return InferenceResponse(
        tool_calls=list(calls), usage=USAGE, finish_reason="tool_calls", model="workload"
    )


def _answer(content: str) -> InferenceResponse:
    return InferenceResponse(content=content, usage=USAGE, finish_reason="stop", model="workload")


def _lookup(topic: str, n: int) -> ToolCall:
    return ToolCall(id=f"call-{n}", name="lookup", arguments={"topic": topic, "n": n})


def root_model(request: InferenceRequest) -> InferenceResponse:
    """The root agent: what it does next follows from its user text and the results so far."""
    text_, results = _last_user_text(request), _results_of_this_run(request)
    kind = text_.split(" ", 1)[0]
    if kind == "chat":
        return _answer(f"echo: {text_}")
    if kind == "tools" and len(results) < FACTS:
        return _calls(_lookup(text_, len(results)))
    if kind == "parallel" and not results:
        return _calls(*(_lookup(text_, n) for n in range(FACTS)))
    if kind == "team" and not results:
        return _calls(
            *(
                ToolCall(
                    id=f"spawn-{n}",
                    name=SPAWN_TOOL_NAME,
                    arguments={"subagent": "worker", "task": task_of(text_, n)},
                )
                for n in range(WORKERS)
            )
        )
    return _answer(f"{text_} => " + (" | " if kind == "team" else "; ").join(results))


def worker_model(request: InferenceRequest) -> InferenceResponse:
    task, results = _last_user_text(request), _results_of_this_run(request)
    if len(results) < WORKER_FACTS:
        return _calls(_lookup(task, len(results)))
    return _answer(f"{task} => " + "; ".join(results))


@dataclass(frozen=True)
class FunctionModel:
    """An LLM whose every response is a function of the request: no script to run out of, and
    nothing kept per request (a child may make thousands of calls)."""

    respond: Callable[[InferenceRequest], InferenceResponse]

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        return self.respond(request)


@tool
def lookup(topic: str, n: int) -> str:
    """Look up fact number ``n`` about a topic."""
    return fact(topic, n)


def build_agent(ledger: Ledger) -> Agent:
    """The workload's agent on ``ledger``: the child that runs and the process that resumes
    build the very same one."""
    worker = SubagentSpec(
        name="worker",
        description="Looks facts up.",
        tools=[lookup],
        llm=FunctionModel(worker_model),
    )
    return (
        AgentBuilder()
        .with_llm(FunctionModel(root_model))
        .with_tools([lookup])
        .with_subagents([worker])
        .with_parallel_tools(FACTS)
        .with_name("root")
        .with_ledger(ledger)
        .build()
    )


# --- journals ----------------------------------------------------------------------------------


def acknowledge(journal: Path, result: RunResult, user_text: str) -> None:
    """Append the acknowledged run to ``journal`` and sync it before anything else happens."""
    entry = {
        "run_id": result.run_id,
        "conversation_id": result.conversation_id,
        "text": user_text,
        "status": result.status.value,
        "answer": result.answer,
        "at": time.time(),
    }
    with journal.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_journal(path: Path) -> list[dict[str, Any]]:
    """The acknowledged runs of a journal; a last line cut short by a kill is no acknowledgement."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")
    return [json.loads(line) for line in lines[:-1]]  # what follows the last newline: not whole


# --- the roles ---------------------------------------------------------------------------------


def mixed(spec: dict[str, Any]) -> None:
    rng = random.Random(spec["seed"])
    deadline = time.monotonic() + spec.get("max_seconds", 120.0)
    journal = Path(spec["journal"])
    with Ledger.open(spec["url"], lease_seconds=spec.get("lease_seconds", 60.0)) as ledger:
        agent = build_agent(ledger)
        turn = 0
        while time.monotonic() < deadline and os.getppid() == spec["fork_server_pid"]:
            recent = [c.id for c in ledger.conversations(kind="main", limit=RECENT)]
            new = len(recent) < RECENT // 2 or rng.random() < 0.15
            conversation_id = None if new else rng.choice(recent)
            user_text = f"{rng.choice(KINDS)} {spec['name']}.{turn}"
            acknowledge(journal, agent.run(user_text, conversation_id), user_text)
            turn += 1


DISCONNECTED = "disconnected"


def writer(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs for ``spec["seconds"]``; what happened, counted."""
    rng = random.Random(spec["seed"])
    journal = Path(spec["journal"])
    counts: Counter[str] = Counter()
    errors: list[str] = []
    own: list[str | None] = [None] * spec.get("own", 3)
    weights = spec.get("weights", [3, 4, 2, 1])
    barrier(spec)
    with Ledger.open(spec["url"], lease_seconds=spec.get("lease_seconds", 60.0)) as ledger:
        agent = build_agent(ledger)
        deadline = time.monotonic() + spec["seconds"]
        while time.monotonic() < deadline:
            shared = bool(spec.get("shared")) and rng.random() < 0.25
            slot = rng.randrange(len(own))
            conversation_id = rng.choice(spec["shared"]) if shared else own[slot]
            user_text = f"{rng.choices(KINDS, weights)[0]} {spec['name']}.{counts['attempts']}"
            counts["attempts"] += 1
            try:
                result = agent.run(user_text, conversation_id)
            except ConversationBusyError as exc:
                counts["busy_shared" if shared else "busy_own"] += 1
                if not shared:
                    errors.append(f"own conversation busy: {exc}")
                continue
            except LedgerBusyError as exc:
                counts["ledger_busy"] += 1
                errors.append(f"LedgerBusyError: {exc}")
                continue
            except (LedgerUnavailableError, DBAPIError) as exc:  # the server went away
                if "locked" in str(exc):
                    counts["locked"] += 1
                    errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                if not spec.get("tolerate_disconnects"):
                    raise
                counts[DISCONNECTED] += 1
                errors.append(f"{time.time():.3f} {_kind(exc)}: {_first_line(exc)}")
                if not shared:
                    own[slot] = None  # its run may hold the lease: go on in a new conversation
                time.sleep(0.05)
                continue
            acknowledge(journal, result, user_text)
            counts["acknowledged"] += 1
            counts["team"] += user_text.startswith("team ")
            if not shared:
                own[slot] = result.conversation_id
    return {"counts": dict(counts), "errors": errors[:50]}


def _kind(exc: BaseException) -> str:
    """The database's own error type (a LedgerUnavailableError's cause)."""
    cause = exc.__cause__ if isinstance(exc, LedgerUnavailableError) else exc
    return type(getattr(cause, "orig", cause)).__name__


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


def reader(spec: dict[str, Any]) -> dict[str, Any]:
    """Reads for ``spec["seconds"]``; the reads made, busy errors met, torn reads seen."""
    rng = random.Random(spec["seed"])
    counts: Counter[str] = Counter()
    torn: list[str] = []
    errors: list[str] = []
    barrier(spec)
    with Ledger.open(spec["url"]) as ledger:
        deadline = time.monotonic() + spec["seconds"]
        while time.monotonic() < deadline:
            try:
                torn.extend(_read_once(ledger, rng, counts))
            except LedgerBusyError as exc:
                counts["ledger_busy"] += 1
                errors.append(f"LedgerBusyError: {exc}")
            except DBAPIError as exc:
                if "locked" not in str(exc):
                    raise
                counts["locked"] += 1
                errors.append(f"{type(exc).__name__}: {exc}")
    return {"counts": dict(counts), "torn": torn[:50], "errors": errors[:50]}


def _read_once(ledger: Ledger, rng: random.Random, counts: Counter[str]) -> list[str]:
    conversations = ledger.conversations(limit=20)
    counts["reads"] += 1
    if not conversations:
        time.sleep(0.005)
        return []
    conversation = rng.choice(conversations)
    ledger.messages(conversation.id)
    runs = ledger.runs(conversation.id)
    counts["reads"] += 2
    done = [r for r in runs if r.status == "completed"]
    problems = []
    if done:
        run = rng.choice(done)  # a completed run never changes: two reads of it must agree
        steps = ledger.steps(run.id)
        ledger.run_tree(run.root_run_id)
        counts["reads"] += 2
        if [s.step_index for s in steps] != list(range(run.step_count)):
            problems.append(f"completed run {run.id}: {run.step_count} steps, read {len(steps)}")
    problems.extend(_snapshot_problems(ledger, conversation.id))
    counts["snapshots"] += 1
    return problems


def _snapshot_problems(ledger: Ledger, conversation_id: str) -> list[str]:
    """Read a conversation, its runs and their steps and buffers in one read transaction, and
    say what does not fit: a reader must see each run either before or after its commit."""
    with ledger.engine.connect() as conn, conn.begin():
        messages = conn.execute(
            text(
                "SELECT seq, role, run_id FROM conversation_messages "
                "WHERE conversation_id = :id ORDER BY seq"
            ),
            {"id": conversation_id},
        ).all()
        runs = conn.execute(
            text(
                "SELECT r.id, r.status, r.step_count, "
                "(SELECT COUNT(*) FROM step_executions s WHERE s.run_id = r.id), "
                "(SELECT COUNT(*) FROM execution_buffer_rows b WHERE b.run_id = r.id) "
                "FROM agent_runs r WHERE r.conversation_id = :id"
            ),
            {"id": conversation_id},
        ).all()
    where = f"conversation {conversation_id}"
    problems = []
    if [m.seq for m in messages] != list(range(len(messages))):
        problems.append(f"{where}: seq {[m.seq for m in messages]}")
    roles: dict[str, list[str]] = {}
    for m in messages:
        roles.setdefault(m.run_id, []).append(m.role)
    for run_id, status, step_count, steps, buffered in runs:
        seen = roles.get(run_id, [])
        whole = ["user", "assistant"] if status == "completed" else ["user"]
        if seen != whole or step_count != steps or (status == "completed" and buffered):
            problems.append(
                f"{where}: {status} run {run_id} seen with messages {seen}, step_count "
                f"{step_count}, {steps} step rows, {buffered} buffer rows"
            )
    return problems


ROLES: dict[str, Callable[[dict[str, Any]], Any]] = {"writer": writer, "reader": reader}


def barrier(spec: dict[str, Any]) -> None:
    """Wait for the parent's go file, if there is one: every child then starts at once."""
    if "go_file" not in spec:
        return
    go, deadline = Path(spec["go_file"]), time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("no go from the parent within 60s")
        time.sleep(0.002)


# --- the fork server ---------------------------------------------------------------------------


def serve() -> None:
    """Serve the parent on stdin/stdout, one JSON line each way: ``{"spawn": spec}`` forks a
    child playing ``spec["role"]`` and answers its pid; ``{"poll": pid}`` answers whether it
    ended and how (reaping it). At EOF, kill the children still running and exit."""
    import sqlalchemy.dialects.sqlite.pysqlite  # imported once here, not in every child

    with contextlib.suppress(ImportError):  # PostgreSQL's driver, when it is installed
        import psycopg  # noqa: F401
        import sqlalchemy.dialects.postgresql.psycopg  # noqa: F401

    _warm_up()
    children: set[int] = set()
    _reply({"ready": os.getpid()})
    for line in sys.stdin:
        command = json.loads(line)
        if "spawn" in command:
            pid = _fork({**command["spawn"], "fork_server_pid": os.getpid()})
            children.add(pid)
            _reply({"pid": pid})
        else:
            pid = command["poll"]
            reaped, status = os.waitpid(pid, os.WNOHANG)
            if reaped:
                children.discard(pid)
            _reply(_ended(status) if reaped else {"running": True})
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _warm_up() -> None:
    """Run every kind once on a scratch ledger, so that what a first run costs a process
    (building validators, compiling SQL, reading the migrations) is paid here, once; then make
    sure no connection and no thread of it is left to fork."""
    with tempfile.TemporaryDirectory() as scratch:
        with Ledger.open(Path(scratch) / "warm-up.db") as ledger:
            agent = build_agent(ledger)
            for kind in KINDS:
                agent.run(f"{kind} warm-up")
        deadline = time.monotonic() + 10
        while threading.active_count() > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    if threading.active_count() > 1:
        raise RuntimeError(f"threads left after the warm-up: {threading.enumerate()}")


def _reply(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def _ended(status: int) -> dict[str, Any]:
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return {"code": os.WEXITSTATUS(status)}


def _fork(spec: dict[str, Any]) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 70
    try:
        log = os.open(spec["log_file"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        random.seed(spec.get("seed"))
        code = _play(spec)
    finally:
        os._exit(code)  # never back into the fork server's loop, nor its exit handlers


def _play(spec: dict[str, Any]) -> int:
    if spec["role"] == "mixed":
        try:
            mixed(spec)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            return 1
        return 0
    return play_role(ROLES, spec)


# --- the parent's side -------------------------------------------------------------------------


@dataclass(frozen=True)
class Ended:
    """How a child ended: killed by ``signal``, or exited with ``code``."""

    pid: int
    signal: int | None
    code: int | None
    log: str

    @property
    def killed(self) -> bool:
        return self.signal == signal.SIGKILL

    def describe(self) -> str:
        how = f"signal {self.signal}" if self.signal is not None else f"exit status {self.code}"
        return f"child {self.pid} ended by {how}\n--- its output ---\n{self.log[-4000:]}"


class ForkServer:
    """The parent's handle on a fork server: ``spawn`` children, ``kill`` and ``wait`` them."""

    TIMEOUT = 60.0

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._stderr = (workdir / "fork-server.err").open("wb")
        self._process = subprocess.Popen(
            module_command(MODULE, "serve"),
            env=child_environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._selector = selectors.DefaultSelector()
        assert self._process.stdout is not None
        self._selector.register(self._process.stdout, selectors.EVENT_READ)
        self._logs: dict[int, Path] = {}
        self._ask(None)  # the ready line: imports done

    def spawn(self, spec: dict[str, Any]) -> int:
        log = self.workdir / f"{spec['name']}.log"
        pid = int(self._ask({"spawn": {**spec, "log_file": str(log)}})["pid"])
        self._logs[pid] = log
        return pid

    def kill(self, pid: int) -> Ended:
        os.kill(pid, signal.SIGKILL)  # not reaped yet: the pid cannot have been reused
        return self.wait(pid)

    def wait(self, pid: int, timeout: float = TIMEOUT) -> Ended:
        deadline = time.monotonic() + timeout
        while True:
            reply = self._ask({"poll": pid})
            if "running" not in reply:
                log = self._logs.pop(pid)
                output = log.read_text(errors="replace") if log.exists() else ""
                return Ended(pid, reply.get("signal"), reply.get("code"), output)
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"child {pid} did not end within {timeout}s")
            time.sleep(0.01)

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()  # EOF: it kills what still runs and exits
        try:
            self._process.wait(timeout=self.TIMEOUT)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._selector.close()
        assert self._process.stdout is not None
        self._process.stdout.close()
        self._stderr.close()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ask(self, command: dict[str, Any] | None) -> dict[str, Any]:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        if command is not None:
            stdin.write(json.dumps(command) + "\n")
            stdin.flush()
        if not self._selector.select(self.TIMEOUT):
            raise AssertionError(f"the fork server did not answer {command} within {self.TIMEOUT}s")
        line = stdout.readline()
        if not line:
            err = (self.workdir / "fork-server.err").read_text(errors="replace")
            raise AssertionError(f"the fork server died\n--- its stderr ---\n{err[-4000:]}")
        reply: dict[str, Any] = json.loads(line)
        return reply


def run_all(
    fork_server: ForkServer,
    specs: dict[str, dict[str, Any]],
    timeout: float,
    *,
    meanwhile: Callable[[], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Fork every child, release them at once, do ``meanwhile`` (while they run), wait for them
    all; their result payloads."""
    go = fork_server.workdir / "go"
    pids = {
        name: fork_server.spawn(
            {
                **spec,
                "name": name,
                "go_file": str(go),
                "result_file": str(fork_server.workdir / f"{name}.result.json"),
            }
        )
        for name, spec in specs.items()
    }
    go.touch()
    if meanwhile is not None:
        meanwhile()
    return {
        name: _result_of(fork_server, name, fork_server.wait(pid, timeout))
        for name, pid in pids.items()
    }


def _result_of(fork_server: ForkServer, name: str, ended: Ended) -> dict[str, Any]:
    path = fork_server.workdir / f"{name}.result.json"
    assert ended.code == 0 and path.exists(), ended.describe()
    result: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    assert "ok" in result, f"{name}: {result['error']['traceback']}"
    return result["ok"]


def journals(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every acknowledged run of these journals."""
    return [entry for path in paths for entry in read_journal(path)]


def runs_as_stored(url: str) -> dict[str, tuple[str, str | None, list[tuple[str, str]]]]:
    """Every run: its status, its parent, and its conversation messages as (role, content)."""
    stored: dict[str, tuple[str, str | None, list[tuple[str, str]]]] = {}
    with connect(url) as conn:
        for run_id, status, parent in rows(
            conn, "SELECT id, status, parent_run_id FROM agent_runs"
        ):
            stored[run_id] = (status, parent, [])
        for run_id, role, content in rows(
            conn,
            "SELECT run_id, role, content FROM conversation_messages "
            "WHERE run_id IS NOT NULL ORDER BY conversation_id, seq",
        ):
            stored[run_id][2].append((role, content))
    return stored


def answer_problems(url: str, acknowledged: list[dict[str, Any]]) -> list[str]:
    """What breaks the workload's promises: every acknowledged run is completed in the database
    with exactly the answer it acknowledged, appended once right after its user message; every
    completed run (resumed ones too) has the answer its text calls for; an interrupted run left
    only its user message."""
    stored = runs_as_stored(url)
    problems = []
    for entry in acknowledged:
        status, _, messages = stored.get(entry["run_id"], ("missing", None, []))
        want = [("user", entry["text"]), ("assistant", entry["answer"])]
        if entry["status"] != "completed" or status != "completed" or messages != want:
            problems.append(f"acknowledged {entry}: {status} in the ledger with {messages}")
        if entry["answer"] != expected_answer(entry["text"]):
            problems.append(f"acknowledged {entry}: not the answer {entry['text']!r} calls for")
    for run_id, (status, _, messages) in stored.items():
        user = messages[0][1] if messages and messages[0][0] == "user" else None
        if user is None:
            problems.append(f"{status} run {run_id}: no user message first, {messages}")
        elif status == "completed" and messages != [
            ("user", user),
            ("assistant", expected_answer(user)),
        ]:
            problems.append(f"completed run {run_id} on {user!r}: {messages}")
        elif status == "interrupted" and messages != [("user", user)]:
            problems.append(f"interrupted run {run_id}: {messages}")
        elif status not in ("completed", "interrupted"):
            problems.append(f"run {run_id} left {status}")
    return problems


if __name__ == "__main__":
    if sys.argv[1:] != ["serve"]:
        sys.exit(f"usage: python -m {MODULE} serve")
    serve()
