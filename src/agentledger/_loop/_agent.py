"""The agent loop: steps until the continuation criteria say stop.

What the loop decides (start or continue a run, what the next step is, go on or stop) is pure
code over values; asking the model and running tools happen in the driver.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial

from .._core import (
    EMPTY_TOOLS,
    ContextBudget,
    Criterion,
    StateProcessor,
    Summarizer,
    ToolContext,
    ToolSet,
    ToolSource,
    decide,
    pending_outcome,
    processor_name,
    run_chain,
)
from .._logs import library_logger
from .._recording import SPAWNED_BY, InMemoryRecorder, Recorder, RunResult
from .._values import (
    AgentState,
    AgentStatus,
    Clock,
    Compaction,
    ExecutionBudget,
    Message,
    Role,
    RunFinished,
    RunStarted,
    StepExecution,
    StepRecorded,
    StopReason,
    check_storable,
    new_id,
)
from ..errors import (
    CompactionError,
    ConversationBusyError,
    LeaseLostError,
    ProcessorError,
    UsageError,
)
from ._driver import Driver, StepRequest
from ._engine import Call, Flow, arun_flow, run_flow
from ._executor import ToolExecutor
from ._partials import (
    Interruption,
    PartialFlush,
    RunWatch,
    note_step_began,
    step_events,
    watching,
)
from ._runtime import awaiter, cancels, emit, failure_text
from ._sources import ToolSources, close_at_exit
from ._streams import AsyncRunStream, RunStream
from ._summaries import summarized
from ._tracing import Tracer, traced

logger = library_logger(__name__)

DEFAULT_FINAL_INSTRUCTION = (
    "You have reached the limit of this run ({reason}) and cannot call tools any more. "
    "Answer the user now with what you have found so far, and say what is missing."
)


class FinalResponse(StrEnum):
    """What a run stopped by a limit before the model answered does."""

    GENERATE = "generate"
    """One more inference, with no tools offered, asks the model for its answer."""
    NONE = "none"
    """The run ends without an answer."""


@dataclass(frozen=True)
class AgentConfig:
    """Everything an :class:`Agent` runs with; made by :class:`agentledger.AgentBuilder`."""

    driver: Driver
    tools: ToolSet
    processors: tuple[StateProcessor, ...]
    criteria: tuple[Criterion, ...]
    budget: ExecutionBudget
    clock: Clock
    name: str = "agent"
    system_prompt: str | None = None
    final_response: FinalResponse = FinalResponse.GENERATE
    final_instruction: str = DEFAULT_FINAL_INSTRUCTION
    max_parallel_tools: int = 1
    recorder: Recorder = field(default_factory=InMemoryRecorder)
    context_budget: ContextBudget | None = None
    summarizer: Summarizer | None = None
    partial_flush: PartialFlush = PartialFlush()
    tracer: Tracer | None = None
    """Traces the runs as they happen (``AgentBuilder.with_tracing``); None traces nothing."""
    tool_sources: tuple[ToolSource, ...] = ()
    """Where more tools come from (MCP servers): connected at the agent's first run, listed
    at the start of each (``AgentBuilder.with_mcp_servers``)."""


class Agent:
    """Runs the loop over an :class:`AgentState`.

    ``execute(state)`` runs until the run stops and returns the last state; ``iterate(state)``
    yields the state after every step. A state whose last run finished starts a new run (a
    fresh execution buffer, the conversation kept); a state whose run is still ``running`` or
    ``failed`` continues that run.

    An agent with tool sources (MCP servers) holds their connections: :meth:`close` (or
    ``with agent:``) lets them go; whatever is left open is closed when the interpreter exits.
    """

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        tracer = config.tracer
        self._executor = self._tool_executor(config.tools)
        # A final-response step offers no tools; any call the model still makes gets an
        # "unknown tool" result instead of running.
        self._no_tools = ToolExecutor(EMPTY_TOOLS, clock=config.clock, tracer=tracer)
        self._sources = ToolSources(config.tools, config.tool_sources)
        if self._sources:
            close_at_exit(self)

    def _tool_executor(self, tools: ToolSet) -> ToolExecutor:
        config = self.config
        return ToolExecutor(
            tools, clock=config.clock, max_parallel=config.max_parallel_tools, tracer=config.tracer
        )

    def refresh_tools(self) -> ToolSet:
        """The tools the next step offers: the agent's own and its sources' as listed now
        (each source connected, or reconnected, when it needs to be). Every run starts with
        this; a run of this agent already going on sees the new list from its next step."""
        self._executor = self._sources.refreshed(self._executor, self._tool_executor)
        return self._executor.tools

    def close(self) -> None:
        """Let the agent's tool sources go (their processes stopped, their sessions ended) and
        those of the subagents it ran. The agent can run again: its next run reconnects."""
        self._sources.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def tools(self) -> ToolSet:
        """The tools a step is offered: the agent's own, and its sources' as last listed."""
        return self._executor.tools

    @property
    def processors(self) -> Sequence[StateProcessor]:
        return self.config.processors

    @property
    def recorder(self) -> Recorder:
        return self.config.recorder

    def execute(self, state: AgentState) -> AgentState:
        """Run ``state`` in memory until the run stops; the last state. Nothing is recorded."""
        self.refresh_tools()
        last = self.begin(state)
        for after in self._continue(last):
            last = after
        return last

    def iterate(self, state: AgentState) -> Iterator[AgentState]:
        """Like :meth:`execute`, yielding the state after every step."""
        self.refresh_tools()
        yield from self._continue(self.begin(state))

    def run(self, user_text: str, conversation_id: str | None = None) -> RunResult:
        """One run on a conversation, recorded: the user message is stored first, every step
        as it happens, and the answer committed with the run (a new conversation when
        ``conversation_id`` is None).

        With a context budget, a conversation grown past its share of the budget is summarized
        first (:meth:`compact`); if that fails, the run goes on with the conversation as it was
        (the failure is logged and recorded)."""
        return run_flow(self._run(user_text, conversation_id))

    async def arun(self, user_text: str, conversation_id: str | None = None) -> RunResult:
        """:meth:`run` on an event loop, which it never blocks: the model and ``async def``
        tools are awaited, and sync tools, steps and ledger writes run in worker threads.
        Cancelling the task ends the run as :meth:`run` ends a failed one."""
        return await arun_flow(self._run(user_text, conversation_id))

    def stream(self, user_text: str, conversation_id: str | None = None) -> RunStream:
        """:meth:`run`, telling its events as they happen (:mod:`agentledger.events`): iterate
        over it; once it is exhausted, ``.result`` is the run's :class:`RunResult`. Closing it
        (or dropping it) before the end stops the run."""
        return RunStream(lambda: self.run(user_text, conversation_id))

    def astream(self, user_text: str, conversation_id: str | None = None) -> AsyncRunStream:
        """:meth:`arun`, telling its events as they happen: ``async for`` over it; once it is
        exhausted, ``.result`` is the run's :class:`RunResult`. ``aclose()`` (or cancelling
        the consuming task) stops the run."""
        return AsyncRunStream(lambda: self.arun(user_text, conversation_id))

    def _run(self, user_text: str, conversation_id: str | None) -> Flow[RunResult]:
        recorder = self.config.recorder
        yield from self._listed_tools()
        state = yield Call(partial(recorder.load_conversation, conversation_id))
        if conversation_id is not None and self.config.summarizer is not None:
            check_storable(user_text, "the user message")
            incoming = Message(role=Role.USER, content=user_text)
            try:
                state = (yield from self._summarize(state, incoming=incoming, force=False))[0]
            except CompactionError as exc:
                logger.warning("%s; the run goes on with the whole conversation", exc)
        return (yield from self._start(state, user_text))

    def compact(self, conversation_id: str, *, force: bool = False) -> Compaction | None:
        """Summarize the oldest messages of a conversation now, if it takes more than its share
        of the context budget (or, with ``force``, whatever its size): the compaction recorded,
        or ``None`` when there was nothing to do.

        Raises :class:`CompactionError` when the summary could not be made (the conversation is
        then exactly as it was), and :class:`ConversationBusyError` while a run holds it.
        """
        return run_flow(self._compact(conversation_id, force=force))

    async def acompact(self, conversation_id: str, *, force: bool = False) -> Compaction | None:
        """:meth:`compact` on an event loop, which it never blocks."""
        return await arun_flow(self._compact(conversation_id, force=force))

    def _compact(self, conversation_id: str, *, force: bool) -> Flow[Compaction | None]:
        if self.config.summarizer is None:
            raise UsageError(
                f"agent {self.name!r} has no summarizer: build it with "
                "AgentBuilder.with_context_budget(max_tokens) (summarize=True, the default)"
            )
        state = yield Call(partial(self.config.recorder.load_conversation, conversation_id))
        return (yield from self._summarize(state, incoming=None, force=force))[1]

    def _summarize(
        self, state: AgentState, *, incoming: Message | None, force: bool
    ) -> Flow[tuple[AgentState, Compaction | None]]:
        """Summarize ``state``'s conversation if :func:`plan_summary` says so; the state to go
        on with, and what was recorded."""
        config = self.config
        assert config.context_budget is not None and config.summarizer is not None
        fixed = [Message.system(config.system_prompt)] if config.system_prompt else []
        if incoming is not None:
            fixed.append(incoming)
        return (
            yield from summarized(
                state,
                fixed,
                force=force,
                budget=config.context_budget,
                summarizer=config.summarizer,
                recorder=config.recorder,
                clock=config.clock,
            )
        )

    def run_subagent(self, task: str, *, parent: ToolContext, budget: ExecutionBudget) -> RunResult:
        """Run as the subagent of the run ``parent`` belongs to: a new conversation of its own
        (``kind = 'subagent'``), a run one level deeper in the same tree, within ``budget``."""
        recorder = self.config.recorder
        origin = parent.state
        state = recorder.load_conversation(None).model_copy(
            update={
                "parent_run_id": origin.run_id,
                "root_run_id": origin.root_run_id or origin.run_id,
                "depth": origin.depth + 1,
                "budget": budget,
                "metadata": {SPAWNED_BY: parent.idempotency_key},
            }
        )
        return run_flow(self._listed_then_started(state, task))

    def _listed_then_started(self, state: AgentState, user_text: str) -> Flow[RunResult]:
        yield from self._listed_tools()
        return (yield from self._start(state, user_text))

    def _listed_tools(self) -> Flow[None]:
        """List the tool sources' tools (starting or reconnecting them), before a run begins
        or is claimed: a source that never started raises here, with nothing written."""
        if self._sources:
            yield Call(self.refresh_tools)

    def _start(self, state: AgentState, user_text: str) -> Flow[RunResult]:
        """Begin a run on ``state`` with the user's message, record it, and drive it. Text the
        ledger cannot store is refused before anything is written."""
        check_storable(user_text, "the user message")
        user = Message(role=Role.USER, content=user_text, created_at=self.config.clock())
        state = self.begin(state.with_messages(state.messages().append(user)))
        return (yield from self._drive(state, user_message=user))

    def resume(self, run_id: str, *, stale_after: float | None = None) -> RunResult:
        """Continue a run whose process died or whose model failed, with this agent's model
        and tools. The step in flight at a crash is done again. Resume a run tree through its
        root: the redone spawn resumes each subagent run with the subagent's own agent."""
        return run_flow(self._resume(run_id, stale_after=stale_after))

    async def aresume(self, run_id: str, *, stale_after: float | None = None) -> RunResult:
        """:meth:`resume` on an event loop, which it never blocks."""
        return await arun_flow(self._resume(run_id, stale_after=stale_after))

    def _resume(self, run_id: str, *, stale_after: float | None) -> Flow[RunResult]:
        recorder = self.config.recorder
        yield from self._listed_tools()
        state = yield Call(partial(recorder.claim_run, run_id, stale_after=stale_after))
        return (yield from self._drive(state))

    def recover(self, stale_after: float | None = None) -> list[RunResult]:
        """Resume every stale top-level run of the recorder, with the subagent runs below it;
        runs another process claims first are left to it."""
        return run_flow(self._recover(stale_after))

    async def arecover(self, stale_after: float | None = None) -> list[RunResult]:
        """:meth:`recover` on an event loop, which it never blocks."""
        return await arun_flow(self._recover(stale_after))

    def _recover(self, stale_after: float | None) -> Flow[list[RunResult]]:
        results = []
        run_ids = yield Call(partial(self.config.recorder.stale_run_ids, stale_after))
        for run_id in run_ids:
            try:
                results.append((yield from self._resume(run_id, stale_after=stale_after)))
            except (ConversationBusyError, LeaseLostError):
                continue  # another process claimed it first, or took it over
        return results

    def _drive(self, state: AgentState, *, user_message: Message | None = None) -> Flow[RunResult]:
        """Begin the run when ``user_message`` is given (else it was claimed), take its steps,
        recording each as it ends, then commit the run (or record it failed). Every exit of
        the run goes through here, sync or async alike."""
        assert state.run_id is not None
        config = self.config
        with watching(state.run_id, config.recorder, config.partial_flush, config.clock) as watch:
            run = self._begin_and_step(state, user_message, watch)
            return (yield from traced(run, self.config.tracer, state, self.name))

    def _begin_and_step(
        self, state: AgentState, user: Message | None, watch: RunWatch
    ) -> Flow[RunResult]:
        if user is not None:
            yield from self._begin_run(state, user, watch)
        return (yield from self._steps(state, watch))

    def _begin_run(self, state: AgentState, user: Message, watch: RunWatch) -> Flow[None]:
        recorder = self.config.recorder
        assert state.run_id is not None
        try:
            yield Call(partial(recorder.begin_run, state, user_message=user, agent_name=self.name))
            emit(
                RunStarted(
                    run_id=state.run_id,
                    conversation_id=state.conversation_id,
                    agent_name=self.name,
                    depth=state.depth,
                    parent_run_id=state.parent_run_id,
                )
            )
        except BaseException as exc:
            if cancels(exc):  # the run may have begun in its thread all the same: end it
                yield from self._ended_early(state, exc, watch)
            raise

    def _steps(self, state: AgentState, watch: RunWatch) -> Flow[RunResult]:
        recorder = self.config.recorder
        ended = False
        try:
            shown = ""
            if _takes_a_step(state):
                after = yield Call(partial(self.step, state))
                while True:
                    # The record and the next step in one call: one hop to a worker thread
                    # fewer per step on an event loop, the same order everywhere.
                    shown, following = yield Call(
                        partial(self._recorded_then_next, state, after, watch)
                    )
                    state = after
                    if following is None:
                        break
                    if isinstance(following, Exception):
                        raise following
                    after = following
            state = _settled(state)
            if state.status is AgentStatus.FAILED and shown:
                # The step that failed had shown text (its stream was cut): it is kept.
                ended = True
                result = yield from self._interrupt(
                    watch, Interruption(shown), error=state.error or "the step failed"
                )
                emit(RunFinished.of(result))
                return result
            if state.status is AgentStatus.FAILED:
                ended = True  # fail_run frees the run whether or not it could write
                yield Call(partial(recorder.fail_run, state))
            else:
                yield Call(partial(recorder.commit_run, state))
        except BaseException as exc:
            if not ended:
                yield from self._ended_early(state, exc, watch)
            raise
        result = RunResult.of(state)
        watch.ended(result)
        emit(RunFinished.of(result))
        return result

    def _recorded_then_next(
        self, before: AgentState, after: AgentState, watch: RunWatch
    ) -> tuple[str, AgentState | Exception | None]:
        """Record the step ``before`` became ``after`` (sealed first: no flush of it from now
        on), tell it, then take the next step if the run goes on. The text the recorded step
        showed the caller, and the next step's state (or the error it raised; None when the
        run stops). A record that fails raises, and so does a cancellation: the run is then as
        of ``before``, and a cancelled run is ended from its recorded steps."""
        execution = after.current_execution
        assert after.run_id is not None and execution is not None
        filed = after.filed_since(before)
        record = partial(self.config.recorder.record_step, after.run_id, execution, filed)
        shown = watch.sealed(execution.step_index, record)
        step = execution.step
        emit(
            StepRecorded(
                run_id=after.run_id,
                step_index=execution.step_index,
                usage=step.usage,
                cost_usd=step.cost_usd,
            )
        )
        if not _goes_on(after):
            return shown, None
        try:
            return shown, self.step(after)
        except Exception as exc:  # the flow raises it, as of the step just recorded
            return shown, exc

    def _ended_early(self, state: AgentState, exc: BaseException, watch: RunWatch) -> Flow[None]:
        """A run that stopped before it could be committed: it was cancelled (its task
        cancelled, its stream closed, Ctrl-C), or a step or the commit could not be recorded.

        A cancelled run, or one that had shown text of its step in flight, is interrupted:
        what was shown is committed to the conversation. Otherwise it ends failed as of its
        last recorded step, free to be resumed at once (when the database lets us say so;
        otherwise its lease expires). The original error is the one to report.

        This is the one place a cancellation is caught."""
        cancelled = cancels(exc)
        error = None if cancelled else failure_text(exc)
        # May wait for a flush: not on an event loop.
        kept: Interruption = yield Call(partial(watch.interrupted, error))
        with contextlib.suppress(Exception):
            if cancelled or kept.text:
                yield from self._interrupt(watch, kept, error=error)
            else:  # the step in flight is redone when the run is resumed: not recorded
                yield Call(partial(self.config.recorder.fail_run, state, error))

    def _interrupt(
        self, watch: RunWatch, kept: Interruption, *, error: str | None
    ) -> Flow[RunResult]:
        result: RunResult = yield Call(
            partial(
                self.config.recorder.interrupt_run,
                watch.run_id,
                partial_text=kept.text,
                step=kept.step,
                error=error,
            )
        )
        watch.ended(result)
        return result

    def _continue(self, state: AgentState) -> Iterator[AgentState]:
        """Steps until the run stops. A run whose last step already ended it (a crash between
        that step and the commit) takes no more steps; a failed one tries again."""
        if not _takes_a_step(state):
            return
        while True:
            state = self.step(state)
            yield state
            if not _goes_on(state):
                return

    def begin(self, state: AgentState) -> AgentState:
        """Start a new run on ``state``, or pick up the one in progress."""
        if state.run_id is not None and state.status in (AgentStatus.RUNNING, AgentStatus.FAILED):
            return state.model_copy(update={"status": AgentStatus.RUNNING})
        store = state.store.section(AgentState.EXECUTION_BUFFER_SECTION).clear()
        return state.model_copy(
            update={
                "run_id": new_id(),
                "store": store,
                "step_executions": (),
                "filed": (),
                "status": AgentStatus.RUNNING,
                "run_started_at": self.config.clock(),
                "budget": state.budget.tightened(self.config.budget),
            }
        )

    def step(self, state: AgentState) -> AgentState:
        """One step: the processors around the driver's step and the continuation decision.
        What the processors file is appended to ``filed``: the step's own filings are
        ``after.filed_since(state)``."""
        after = run_chain(self.config.processors, state, self._perform_step)
        if after.current_step is state.current_step:
            raise ProcessorError(
                "a step ended without reaching the driver: every processor must call next(state) "
                f"(processors: {', '.join(map(processor_name, self.config.processors))})"
            )
        return after

    def _perform_step(self, state: AgentState) -> AgentState:
        index = state.step_count
        step = self.config.driver.perform_step(state, self._request(state, index))
        judged = state.with_step_execution(StepExecution(step_index=index, step=step))
        outcome = decide(
            judged,
            self.config.criteria,
            final_response=self.config.final_response is FinalResponse.GENERATE,
        )
        return judged.with_step_execution(
            StepExecution(step_index=index, step=step, outcome=outcome)
        ).model_copy(update={"status": AgentStatus.after(outcome)})

    def _request(self, state: AgentState, index: int) -> StepRequest:
        previous = pending_outcome(state.step_executions)
        final = previous is not None and previous.final_response_required
        reason = previous.stop_reason if previous is not None else None
        executor = self._no_tools if final else self._executor
        started_at = self.config.clock()
        note_step_began(state.run_id, index, started_at)  # for a cancel mid-text
        waits = awaiter()
        return StepRequest(
            step_index=index,
            tools=executor.tools,
            executor=executor,
            clock=self.config.clock,
            system_prompt=self.config.system_prompt,
            final_instruction=self.config.final_instruction.format(reason=reason)
            if final
            else None,
            tracer=self.config.tracer,
            run_id=state.run_id or "",
            started_at=started_at,
            events=step_events(state.run_id),
            wait_for=waits,
            asynchronous=waits.loop is not None,
        )

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, tools={self.tools!r})"


def _takes_a_step(state: AgentState) -> bool:
    """Whether a run picked up in ``state`` takes a step: not when its last step already ended
    it (a crash between that step and the commit); a failed one tries again."""
    outcome = state.continuation_outcome
    if outcome is None or outcome.should_continue:
        return True
    return outcome.stop_reason is StopReason.ERROR


def _goes_on(state: AgentState) -> bool:
    outcome = state.continuation_outcome
    return outcome is not None and outcome.should_continue


def _settled(state: AgentState) -> AgentState:
    """A state whose run has stopped, with the status its last outcome gives it."""
    outcome = state.continuation_outcome
    if outcome is None or outcome.should_continue:
        return state
    status = AgentStatus.after(outcome)
    if status is not AgentStatus.FAILED:
        state = state.with_message_store(
            state.store.section(AgentState.EXECUTION_BUFFER_SECTION).clear()
        )
    return state.model_copy(update={"status": status})
