"""A stateful machine over the ledger, checked against a plain Python model.

Two ledger handles on one database drive runs the way ``Agent.run`` does (the recorder
interface, one transaction per call: ``begin_run``, ``record_step`` after each
``Agent.step``, ``record_partial_output`` while a step streams, ``commit_run``, ``fail_run``
or ``interrupt_run`` when the caller cancels), interleaved at random with whole runs
(``Agent.run``), takeovers (``claim_run``, ``Agent.resume``, with and without
``stale_after=0``), abandons (``Ledger.recover()``), time passing beyond the leases,
and crashes (a handle dropped without closing and a new one opened on the same database).

The model is dictionaries and lists: each conversation's messages, each run's status, steps,
buffer, pending answer and partial output (which a cancel or an abandon commits as its
interrupted answer), and which lease token each conversation holds. The machine predicts
the outcome of every operation (done, ``ConversationBusyError``, ``LeaseLostError``,
``UsageError``) and checks, after every rule, that the conversations read through the public
API, every run's status, steps and buffer, and the buffer rows in SQL equal the model, and
that ``violations(url) == []``.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from agentledger import (
    Agent,
    AgentBuilder,
    AgentState,
    AgentStatus,
    ConversationBusyError,
    Message,
    Role,
    ToolCall,
    UsageError,
    tool,
)
from agentledger.errors import LeaseLostError
from agentledger.ledger import Ledger
from agentledger.llm import InferenceRequest, InferenceResponse
from support.crash_child import connect, rows
from support.invariants import violations
from support.sizes import size

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE_SECONDS = 3600.0
"""On the machine's clock. The heartbeat thread waits a third of it in real time: it never
beats during an example, so only the rules write."""

CONVERSATIONS = 2
"""At most this many per example."""
TEXTS = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
PICK = st.integers(min_value=0, max_value=10_000)
HANDLE = st.integers(min_value=0, max_value=1)
STALE_AFTER = st.sampled_from([None, 0.0])


class ManualClock:
    """Advances a millisecond per reading, and by whole leases when the machine says so."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Puppet:
    """A model that answers what the machine put in its queue (an exception is raised).

    A call the machine did not expect is counted (the driver would turn the exception into
    an error step, which would hide it)."""

    def __init__(self) -> None:
        self.queue: list[InferenceResponse | Exception] = []
        self.unexpected = 0

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        if not self.queue:
            self.unexpected += 1
            raise AssertionError("the machine did not expect this model call")
        item = self.queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


@tool
def lookup(n: int) -> str:
    """Look a fact up."""
    return f"fact {n}"


# --- the model ----------------------------------------------------------------------------------


@dataclass
class RunModel:
    id: str
    conversation_id: str
    status: str = "running"
    steps: int = 0
    buffer: list[tuple[str, str]] = field(default_factory=list)
    answer: str | None = None
    """The answer its last step recorded, not committed yet (the run has ended its loop)."""
    silent: bool = False
    """No heartbeat since time last passed."""
    partial: tuple[int, str] | None = None
    """The partial output last flushed while a step streamed, and the lease token that
    flushed it (a recorded step, or the run's end, discards it)."""


@dataclass
class ConversationModel:
    id: str
    messages: list[tuple[str, str]] = field(default_factory=list)
    lease_run: str | None = None
    token: int | None = None
    """Which lease token holds the conversation (None: free)."""
    resume_token: bool = False
    expired: bool = False


@dataclass
class Handle:
    ledger: Ledger
    agent: Agent
    puppet: Puppet
    driving: dict[str, tuple[AgentState, int]] = field(default_factory=dict)
    """The runs this handle drives: their state in this process and the token it holds."""


def settled(state: AgentState) -> AgentState:
    """The state ``Agent`` commits: the status its last outcome gives it."""
    outcome = state.continuation_outcome
    assert outcome is not None and not outcome.should_continue
    return state.model_copy(update={"status": AgentStatus.after(outcome)})


def outcome_of(action: Callable[[], object]) -> str:
    try:
        action()
    except (ConversationBusyError, LeaseLostError, UsageError) as exc:
        return type(exc).__name__
    return "done"


# --- the machine ----------------------------------------------------------------------------------


def ledger_machine(
    new_database: Callable[[], str], drop_database: Callable[[str], None], tally: Counter[str]
) -> type[RuleBasedStateMachine]:
    class LedgerMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.url = new_database()
            self.clock = ManualClock()
            self.tokens = itertools.count()
            self.handles = [self.open_handle(), self.open_handle()]
            self.dropped: list[Handle] = []
            self.conversations: dict[str, ConversationModel] = {}
            self.runs: dict[str, RunModel] = {}
            tally["examples"] += 1

        def open_handle(self) -> Handle:
            ledger = Ledger.open(self.url, lease_seconds=LEASE_SECONDS, clock=self.clock)
            puppet = Puppet()
            agent = (
                AgentBuilder()
                .with_llm(puppet)
                .with_tools([lookup])
                .with_ledger(ledger)
                .with_clock(self.clock)
                .with_max_steps(None)
                .with_name("machine")
                .build()
            )
            return Handle(ledger, agent, puppet)

        def teardown(self) -> None:
            for handle in [*self.handles, *self.dropped]:
                handle.ledger.close()
            drop_database(self.url)

        # --- picking ---------------------------------------------------------------------------

        def driven(self, handle: Handle, predicate: Callable[[RunModel], bool]) -> list[str]:
            return sorted(r for r in handle.driving if predicate(self.runs[r]))

        def can_step(self, run: RunModel) -> bool:
            return run.answer is None

        def can_commit(self, run: RunModel) -> bool:
            return run.answer is not None

        def any_driven(self, predicate: Callable[[RunModel], bool]) -> bool:
            return any(self.driven(h, predicate) for h in self.handles)

        def holds(self, run_id: str, token: int) -> bool:
            return self.conversations[self.runs[run_id].conversation_id].token == token

        def lose(self, handle: Handle, run_id: str) -> None:
            """What ``Agent`` does when a write of its run fails: try ``fail_run`` (it fails
            too, the lease being lost) and let the run go."""
            state, _ = handle.driving.pop(run_id)
            with contextlib.suppress(Exception):
                handle.ledger.recorder.fail_run(state, "lease lost")

        def check(self, what: str, expected: str, got: str) -> None:
            tally[f"{what}: {got}"] += 1
            assert got == expected, f"{what}: expected {expected}, got {got}"

        # --- starting runs ---------------------------------------------------------------------

        def busy(self, conversation_id: str | None) -> bool:
            if conversation_id is None:
                return False
            conversation = self.conversations[conversation_id]
            return conversation.token is not None and not conversation.expired

        def target(self, new: bool, pick: int) -> str | None:
            """A new conversation, or one of those begun (a few, so that runs meet)."""
            if not self.conversations or (new and len(self.conversations) < CONVERSATIONS):
                return None
            return sorted(self.conversations)[pick % len(self.conversations)]

        def take_lease(self, conversation_id: str, run_id: str, *, resume: bool) -> int:
            conversation = self.conversations[conversation_id]
            token = next(self.tokens)
            conversation.lease_run, conversation.token = run_id, token
            conversation.resume_token, conversation.expired = resume, False
            return token

        @rule(h=HANDLE, new=st.booleans(), pick=PICK, text=TEXTS, whole=st.booleans())
        def start_run(self, h: int, new: bool, pick: int, text: str, whole: bool) -> None:
            """A user message on a new or a begun conversation: ``begin_run`` (the machine
            then drives the run step by step), or a whole ``Agent.run``."""
            if whole:
                self.whole_run(h, new, pick, text)
            else:
                self.begin_run(h, new, pick, text)

        def begin_run(self, h: int, new: bool, pick: int, text: str) -> None:
            handle = self.handles[h]
            conversation_id = self.target(new, pick)
            loaded = handle.ledger.recorder.load_conversation(conversation_id)
            user = Message(role=Role.USER, content=text, created_at=self.clock())
            state = handle.agent.begin(loaded.with_messages(loaded.messages().append(user)))
            expected = "ConversationBusyError" if self.busy(conversation_id) else "done"
            got = outcome_of(
                lambda: handle.ledger.recorder.begin_run(
                    state, user_message=user, agent_name="machine"
                )
            )
            self.check("begin_run", expected, got)
            if got != "done":
                return
            assert state.run_id is not None
            conversation = self.conversations.setdefault(
                state.conversation_id, ConversationModel(state.conversation_id)
            )
            conversation.messages.append(("user", text))
            self.runs[state.run_id] = RunModel(state.run_id, state.conversation_id)
            token = self.take_lease(state.conversation_id, state.run_id, resume=False)
            handle.driving[state.run_id] = (state, token)

        def whole_run(self, h: int, new: bool, pick: int, text: str) -> None:
            """``Agent.run``: a tool step and an answer, begun and committed by the agent."""
            handle = self.handles[h]
            conversation_id = self.target(new, pick)
            answer = f"whole answer {len(self.runs)}"
            call = ToolCall(id="whole-0", name="lookup", arguments={"n": 7})
            handle.puppet.queue = [
                InferenceResponse(tool_calls=[call]),
                InferenceResponse(content=answer),
            ]
            results = []
            expected = "ConversationBusyError" if self.busy(conversation_id) else "done"
            got = outcome_of(lambda: results.append(handle.agent.run(text, conversation_id)))
            handle.puppet.queue = []
            self.check("Agent.run", expected, got)
            if got != "done":
                return
            result = results[0]
            assert (result.status, result.answer) == ("completed", answer)
            conversation = self.conversations.setdefault(
                result.conversation_id, ConversationModel(result.conversation_id)
            )
            conversation.messages += [("user", text), ("assistant", answer)]
            conversation.lease_run = conversation.token = None
            self.runs[result.run_id] = RunModel(
                result.run_id, result.conversation_id, status="completed", steps=2
            )

        # --- driving a run ---------------------------------------------------------------------

        def step(self, handle: Handle, run_id: str, response: InferenceResponse | Exception) -> str:
            state, token = handle.driving[run_id]
            handle.puppet.queue = [response]
            after = handle.agent.step(state)
            handle.puppet.queue = []
            expected = "done" if self.holds(run_id, token) else "LeaseLostError"
            got = outcome_of(
                lambda: handle.ledger.recorder.record_step(
                    after.run_id, after.current_execution, after.filed_since(state)
                )
            )
            self.check("record_step", expected, got)
            if got != "done":
                self.lose(handle, run_id)
                return got
            handle.driving[run_id] = (after, token)
            run = self.runs[run_id]
            run.steps += 1
            run.silent = False
            run.partial = None
            self.conversations[run.conversation_id].expired = False
            return got

        def pick_driven(
            self, pick: int, predicate: Callable[[RunModel], bool]
        ) -> tuple[Handle, str]:
            choices = [(h, r) for h in self.handles for r in self.driven(h, predicate)]
            return choices[pick % len(choices)]

        @precondition(lambda self: self.any_driven(self.can_step))
        @rule(pick=PICK, calls=st.integers(min_value=1, max_value=2))
        def tool_step(self, pick: int, calls: int) -> None:
            handle, run_id = self.pick_driven(pick, self.can_step)
            run = self.runs[run_id]
            tool_calls = [
                ToolCall(id=f"call-{run.steps}-{n}", name="lookup", arguments={"n": run.steps + n})
                for n in range(calls)
            ]
            filed = [("assistant", "")] + [("tool", f"fact {run.steps + n}") for n in range(calls)]
            if self.step(handle, run_id, InferenceResponse(tool_calls=tool_calls)) == "done":
                run.buffer += filed

        @precondition(lambda self: self.any_driven(self.can_step))
        @rule(pick=PICK)
        def answer_step(self, pick: int) -> None:
            handle, run_id = self.pick_driven(pick, self.can_step)
            run = self.runs[run_id]
            answer = f"answer of run {sorted(self.runs).index(run_id)} after {run.steps} steps"
            if self.step(handle, run_id, InferenceResponse(content=answer)) == "done":
                run.buffer.append(("assistant", answer))
                run.answer = answer

        @precondition(lambda self: self.any_driven(self.can_step))
        @rule(pick=PICK)
        def model_fails(self, pick: int) -> None:
            """The model call raises: an error step, then ``fail_run``, as ``Agent`` does."""
            handle, run_id = self.pick_driven(pick, self.can_step)
            if self.step(handle, run_id, ConnectionError("the model is down")) != "done":
                return
            state, _ = handle.driving.pop(run_id)
            got = outcome_of(lambda: handle.ledger.recorder.fail_run(settled(state)))
            self.check("fail_run", "done", got)
            run = self.runs[run_id]
            run.status = "failed"
            conversation = self.conversations[run.conversation_id]
            conversation.lease_run = conversation.token = None

        @precondition(lambda self: self.any_driven(self.can_commit))
        @rule(pick=PICK)
        def commit_run(self, pick: int) -> None:
            handle, run_id = self.pick_driven(pick, self.can_commit)
            state, token = handle.driving[run_id]
            outcome = state.continuation_outcome
            if outcome is None or outcome.should_continue:
                # This process's state is behind the run's: another one took the run over and
                # answered. Its loop would take a step next, and lose the lease there.
                assert not self.holds(run_id, token)
                self.step(handle, run_id, InferenceResponse(content="too late"))
                return
            expected = "done" if self.holds(run_id, token) else "LeaseLostError"
            got = outcome_of(lambda: handle.ledger.recorder.commit_run(settled(state)))
            self.check("commit_run", expected, got)
            if got != "done":
                self.lose(handle, run_id)
                return
            del handle.driving[run_id]
            self.committed(self.runs[run_id])

        @precondition(lambda self: self.any_driven(self.can_step))
        @rule(pick=PICK, text=TEXTS)
        def stream_partial(self, pick: int, text: str) -> None:
            """The step in progress streams: what was shown so far is flushed."""
            handle, run_id = self.pick_driven(pick, self.can_step)
            _, token = handle.driving[run_id]
            run = self.runs[run_id]
            expected = "done" if self.holds(run_id, token) else "LeaseLostError"
            got = outcome_of(
                lambda: handle.ledger.recorder.record_partial_output(run_id, run.steps, text)
            )
            self.check("record_partial_output", expected, got)
            if got != "done":
                self.lose(handle, run_id)
                return
            run.partial, run.silent = (token, text), False
            self.conversations[run.conversation_id].expired = False

        @precondition(lambda self: self.any_driven(self.can_step))
        @rule(pick=PICK)
        def cancel_run(self, pick: int) -> None:
            """The caller cancels while a step is in progress: ``interrupt_run`` with what this
            process showed of it."""
            handle, run_id = self.pick_driven(pick, self.can_step)
            _, token = handle.driving[run_id]
            run = self.runs[run_id]
            shown = run.partial[1] if run.partial and run.partial[0] == token else ""
            expected = "done" if self.holds(run_id, token) else "LeaseLostError"
            got = outcome_of(
                lambda: handle.ledger.recorder.interrupt_run(run_id, partial_text=shown)
            )
            self.check("interrupt_run", expected, got)
            handle.driving.pop(run_id)
            if got != "done":
                return
            self.ended_interrupted(run, shown)

        def ended_interrupted(self, run: RunModel, shown: str) -> None:
            conversation = self.conversations[run.conversation_id]
            if shown:
                conversation.messages.append(("assistant", shown))
            if conversation.lease_run == run.id:
                conversation.lease_run = conversation.token = None
            run.status, run.buffer, run.answer, run.partial = "interrupted", [], None, None

        def committed(self, run: RunModel) -> None:
            assert run.answer is not None
            conversation = self.conversations[run.conversation_id]
            conversation.messages.append(("assistant", run.answer))
            conversation.lease_run = conversation.token = None
            run.status, run.buffer, run.answer, run.partial = "completed", [], None, None

        # --- crashes, time, takeovers ----------------------------------------------------------

        def running(self) -> bool:
            return any(run.status == "running" for run in self.runs.values())

        def leased(self) -> bool:
            return any(c.token is not None and not c.expired for c in self.conversations.values())

        def pick_run(self, pick: int) -> str:
            """Mostly a run still open (running or failed); one in four, any run."""
            open_ = sorted(r.id for r in self.runs.values() if r.status in ("running", "failed"))
            choices = open_ if open_ and pick % 4 else sorted(self.runs)
            return choices[pick // 4 % len(choices)]

        def open_runs(self) -> bool:
            return any(run.status in ("running", "failed") for run in self.runs.values())

        @precondition(lambda self: any(h.driving for h in self.handles))
        @rule(h=HANDLE)
        def crash_and_reopen(self, h: int) -> None:
            """The process dies: its handle is dropped without closing (its leases stay in the
            database), and a new process opens the same database."""
            self.dropped.append(self.handles[h])
            self.handles[h] = self.open_handle()
            tally["crash and reopen"] += 1

        @precondition(lambda self: self.leased())
        @rule()
        def time_passes(self) -> None:
            self.clock.advance(LEASE_SECONDS + 1)
            for conversation in self.conversations.values():
                conversation.expired = True
            for run in self.runs.values():
                run.silent = True
            tally["time passes beyond the lease"] += 1

        def claimable(self, run_id: str, stale_after: float | None) -> str:
            """What ``claim_run`` answers, by the rules the README states."""
            run = self.runs[run_id]
            conversation = self.conversations[run.conversation_id]
            free_or_expired = conversation.token is None or conversation.expired
            if run.status == "failed":
                return "done" if free_or_expired else "ConversationBusyError"
            if run.status != "running":
                return "UsageError"
            taken_over = conversation.lease_run != run_id
            quiet = stale_after is not None and (not conversation.resume_token or run.silent)
            if not (free_or_expired or taken_over or quiet):
                return "ConversationBusyError"
            if taken_over and not free_or_expired:
                return "ConversationBusyError"
            return "done"

        def claimed(self, handle: Handle, run_id: str, state: AgentState | None) -> None:
            run = self.runs[run_id]
            token = self.take_lease(run.conversation_id, run_id, resume=True)
            run.status, run.silent = "running", False
            # A handle that drove the run before keeps its state and finds out at its next
            # write (LeaseLostError); the claiming handle's own old state is replaced.
            handle.driving.pop(run_id, None)
            if state is not None:
                handle.driving[run_id] = (state, token)

        @precondition(lambda self: self.open_runs())
        @rule(h=HANDLE, pick=PICK, stale_after=STALE_AFTER, agent=st.booleans())
        def take_over(self, h: int, pick: int, stale_after: float | None, agent: bool) -> None:
            """Another process (or this one) takes a run over: ``claim_run`` (the machine
            then drives it), or ``Agent.resume`` to its end."""
            if agent:
                self.agent_resume(h, pick, stale_after)
            else:
                self.claim_run(h, pick, stale_after)

        def claim_run(self, h: int, pick: int, stale_after: float | None) -> None:
            handle = self.handles[h]
            run_id = self.pick_run(pick)
            claimed: list[AgentState] = []
            expected = self.claimable(run_id, stale_after)
            what = f"claim_run of the {self.runs[run_id].status} run"
            got = outcome_of(
                lambda: claimed.append(
                    handle.ledger.recorder.claim_run(run_id, stale_after=stale_after)
                )
            )
            self.check(what, expected, got)
            if got == "done":
                state = claimed[0]
                self.claimed(handle, run_id, state)
                assert state.step_count == self.runs[run_id].steps

        def agent_resume(self, h: int, pick: int, stale_after: float | None) -> None:
            """``Agent.resume``: claim, then the loop to the end (the model answers at once;
            a run whose last step answered is only committed)."""
            handle = self.handles[h]
            run_id = self.pick_run(pick)
            run = self.runs[run_id]
            answer = run.answer or f"resumed answer after {run.steps} steps"
            handle.puppet.queue = [InferenceResponse(content=answer)]
            results = []
            expected = self.claimable(run_id, stale_after)
            what = f"Agent.resume of the {run.status} run"
            got = outcome_of(
                lambda: results.append(handle.agent.resume(run_id, stale_after=stale_after))
            )
            handle.puppet.queue = []
            self.check(what, expected, got)
            if got != "done":
                return
            assert (results[0].status, results[0].answer) == ("completed", answer)
            self.claimed(handle, run_id, None)
            if run.answer is None:
                run.steps += 1
                run.answer = answer
            self.committed(run)

        @precondition(lambda self: self.running())
        @rule(h=HANDLE, stale_after=STALE_AFTER)
        def abandon(self, h: int, stale_after: float | None) -> None:
            handle = self.handles[h]
            expected = set()
            for run in self.runs.values():
                conversation = self.conversations[run.conversation_id]
                stale = (
                    conversation.lease_run != run.id
                    or conversation.token is None
                    or conversation.expired
                    or stale_after is not None
                )
                if run.status == "running" and stale:
                    expected.add(run.id)
            abandoned = handle.ledger.recover(stale_after=stale_after)
            assert {r.id for r in abandoned} == expected
            assert all(r.status == "interrupted" for r in abandoned)
            tally[f"abandoned {'some' if expected else 'none'}"] += 1
            for run_id in expected:
                run = self.runs[run_id]
                self.ended_interrupted(run, run.partial[1] if run.partial else "")

        # --- what must hold --------------------------------------------------------------------

        @invariant()
        def the_ledger_equals_the_model(self) -> None:
            reader = self.handles[len(self.runs) % 2].ledger
            for conversation in self.conversations.values():
                stored = [(m.role.value, m.content) for m in reader.messages(conversation.id)]
                assert stored == conversation.messages, conversation.id
                record = reader.conversation(conversation.id)
                assert record.lease_run_id == conversation.lease_run, conversation.id
                statuses = {run.id: run.status for run in reader.runs(conversation.id)}
                assert statuses == {
                    run.id: run.status
                    for run in self.runs.values()
                    if run.conversation_id == conversation.id
                }, conversation.id
            for run in self.runs.values():
                if run.status in ("running", "failed"):
                    buffer = [(m.role.value, m.content) for m in reader.buffer(run.id)]
                    assert buffer == run.buffer, run.id
            with connect(self.url) as conn:
                steps = dict(
                    rows(conn, "SELECT run_id, COUNT(*) FROM step_executions GROUP BY run_id")
                )
                buffers: dict[str, list[tuple[str, str]]] = {}
                for run_id, role, content in rows(
                    conn,
                    "SELECT run_id, role, content FROM execution_buffer_rows ORDER BY run_id, seq",
                ):
                    buffers.setdefault(run_id, []).append((role, content))
            assert steps == {r.id: r.steps for r in self.runs.values() if r.steps}
            assert buffers == {r.id: r.buffer for r in self.runs.values() if r.buffer}

        @invariant()
        def the_invariants_hold(self) -> None:
            assert violations(self.url) == []
            assert not any(h.puppet.unexpected for h in [*self.handles, *self.dropped])

    return LedgerMachine


# --- the tests ----------------------------------------------------------------------------------


def machine_settings(examples: int, steps: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


def report_line(tally: Counter[str], backend: str, steps: int) -> str:
    ops = ", ".join(f"{what} {n}" for what, n in sorted(tally.items()) if what != "examples")
    return (
        f"{backend}: {tally['examples']} examples of up to {steps} rules on two handles, "
        f"checked against the model after every rule (conversations, runs, buffers, "
        f"violations == []): {ops}"
    )


def test_the_ledger_behaves_like_its_model_on_sqlite(tmp_path, reliability_report):
    tally: Counter[str] = Counter()
    directory = tmp_path / "examples"
    directory.mkdir()

    def new_database() -> str:
        path = Path(tempfile.mkdtemp(dir=directory)) / "ledger.db"
        return f"sqlite:///{path.as_posix()}"

    steps = size(20, 40)
    machine = ledger_machine(new_database, lambda _url: None, tally)
    run_state_machine_as_test(machine, settings=machine_settings(size(6, 300), steps))
    reliability_report(report_line(tally, "sqlite", steps))


@pytest.fixture
def pg_databases(pg_server) -> Iterator[tuple[Callable[[], str], Callable[[str], None]]]:
    yield pg_server.create_database, pg_server.drop_database


def test_the_ledger_behaves_like_its_model_on_postgresql(pg_databases, reliability_report):
    tally: Counter[str] = Counter()
    new_database, drop_database = pg_databases
    steps = size(15, 30)
    machine = ledger_machine(new_database, drop_database, tally)
    run_state_machine_as_test(machine, settings=machine_settings(size(3, 60), steps))
    reliability_report(report_line(tally, "postgresql", steps))
