"""Running the tools a model asked for: validate, invoke, and turn every failure into a result.

An unknown tool, arguments that do not validate, an exception raised by the tool or a result
that cannot be encoded or stored (a NUL character or a lone surrogate) all become an error tool
result (``is_error``) that the model sees, so it can correct itself; the run goes on. A
``LedgerError`` is the exception: the ledger failing under a tool (a subagent recording its
run) fails the run, which can then be resumed whole.

A tool that raises is logged with its traceback (logger ``agentledger.tools``, WARNING), and the
end of that traceback is kept in the tool execution's metadata (``traceback``), where
``agentledger trace RUN --verbose`` shows it; the model is sent only the one-line message.
"""

from __future__ import annotations

import asyncio
import inspect
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial

import pydantic_core
from pydantic import BaseModel, JsonValue, ValidationError

from .._core import EMPTY_TOOLS, Tool, ToolContext, ToolOutput, ToolSet, tool_metadata
from .._logs import library_logger
from .._values import (
    AgentState,
    AgentStep,
    Clock,
    Spend,
    ToolCall,
    ToolCallFinished,
    ToolCallStarted,
    ToolExecution,
    find_unstorable,
    printable,
    utc_now,
)
from ..errors import LedgerError
from ._partials import note_tool_result, note_tool_started, note_tool_step
from ._runtime import check_cancelled, emit, event_loop, in_context, in_thread, wait_for
from ._tracing import Tracer

logger = library_logger("agentledger.tools")

TRACEBACK_KEY = "traceback"
"""Where a tool execution keeps the traceback of the exception its tool raised, in its
metadata (and so in ``tool_executions.metadata``)."""

TRACEBACK_LIMIT = 8192
"""How many characters of a traceback are kept: its end, where the failure is."""


class ToolExecutor:
    """Runs tool calls against a :class:`ToolSet`, up to ``max_parallel`` at a time.

    Results keep the order of the calls whatever order they finish in.
    """

    def __init__(
        self,
        tools: ToolSet = EMPTY_TOOLS,
        *,
        clock: Clock = utc_now,
        max_parallel: int = 1,
        tracer: Tracer | None = None,
    ) -> None:
        self.tools = tools
        self.clock = clock
        self.max_parallel = max(1, max_parallel)
        self.tracer = tracer

    def execute_step(
        self, answered: AgentStep, state: AgentState, step_index: int
    ) -> tuple[ToolExecution, ...]:
        """Run the tool calls of ``answered``, step ``step_index`` as its model answered it
        (before its tools ran), within what the run has left counting what that call spent.
        The step is noted first: a run interrupted while they run records it, each call with
        its result or the notice that it was cut."""
        if answered.assistant_message is None or not answered.assistant_message.tool_calls:
            return ()
        note_tool_step(state.run_id, step_index, answered)
        spent = Spend(usage=answered.usage, cost_usd=answered.cost_usd, steps=1)
        calls = answered.assistant_message.tool_calls
        return self.execute(calls, state, step_index, in_flight=spent)

    def execute(
        self,
        calls: Sequence[ToolCall],
        state: AgentState,
        step_index: int,
        *,
        in_flight: Spend | None = None,
    ) -> tuple[ToolExecution, ...]:
        contexts = [
            ToolContext(state=state, tool_call=c, step_index=step_index, in_flight=in_flight)
            for c in calls
        ]
        if self.max_parallel == 1 or len(contexts) < 2:
            # One after another, here: in an asynchronous run this is a worker thread already
            # (an async tool is awaited on the run's loop), and a cancelled run starts no more.
            return tuple(self._execute_next(c) for c in contexts)
        if event_loop() is not None:
            # In parallel in an asynchronous run: tasks on its event loop (async tools awaited
            # there, sync ones in worker threads), cancelled together.
            return wait_for(self._execute_as_tasks(contexts))
        with ThreadPoolExecutor(max_workers=min(self.max_parallel, len(contexts))) as pool:
            return tuple(pool.map(in_context(self.execute_one), contexts))

    async def _execute_as_tasks(self, contexts: Sequence[ToolContext]) -> tuple[ToolExecution, ...]:
        slots = asyncio.Semaphore(self.max_parallel)

        async def one(context: ToolContext) -> ToolExecution:
            async with slots:
                if _is_async(self.tools.get(context.tool_call.name)):
                    return await self.aexecute_one(context)
                return await asyncio.wrap_future(in_thread(partial(self.execute_one, context)))

        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(c)) for c in contexts]
        return tuple(t.result() for t in tasks)

    def _execute_next(self, context: ToolContext) -> ToolExecution:
        check_cancelled()
        return self.execute_one(context)

    def execute_one(self, context: ToolContext) -> ToolExecution:
        """Run one call here (an ``async def`` tool to completion on an event loop: the run's,
        or a private one)."""
        if self.tracer is None:
            return self._execute_one(context)
        with self.tracer.tool_call(context) as trace:
            execution = self._execute_one(context)
            trace.finished(execution)
            return execution

    def _execute_one(self, context: ToolContext) -> ToolExecution:
        started_at = self._started(context)
        prepared = self._prepared(context, started_at)
        if not isinstance(prepared, tuple):
            return self._finished(context, started_at, prepared)
        tool, arguments = prepared
        try:
            value = tool.invoke(arguments, context)
            value = wait_for(value) if inspect.isawaitable(value) else value
        except Exception as exc:
            return self._finished(context, started_at, exc, arguments)
        return self._finished(context, started_at, value, arguments)

    async def aexecute_one(self, context: ToolContext) -> ToolExecution:
        """Run one call of an ``async def`` tool on the running event loop."""
        if self.tracer is None:
            return await self._aexecute_one(context)
        with self.tracer.tool_call(context) as trace:
            execution = await self._aexecute_one(context)
            trace.finished(execution)
            return execution

    async def _aexecute_one(self, context: ToolContext) -> ToolExecution:
        started_at = self._started(context)
        prepared = self._prepared(context, started_at)
        if not isinstance(prepared, tuple):
            return self._finished(context, started_at, prepared)
        tool, arguments = prepared
        try:
            value = tool.invoke(arguments, context)
            value = (await value) if inspect.isawaitable(value) else value
        except Exception as exc:
            return self._finished(context, started_at, exc, arguments)
        return self._finished(context, started_at, value, arguments)

    def _started(self, context: ToolContext) -> datetime:
        started_at = self.clock()
        if context.run_id is not None:  # noted before it is told: a cancel told of it knows it
            note_tool_started(context.run_id, context.tool_call.id, started_at)
            emit(
                ToolCallStarted(
                    run_id=context.run_id, step_index=context.step_index, call=context.tool_call
                )
            )
        return started_at

    def _finished(
        self,
        context: ToolContext,
        started_at: datetime,
        outcome: object,
        arguments: BaseModel | None = None,
    ) -> ToolExecution:
        """The execution of a call whose tool returned ``outcome`` (or raised it, or whose
        error result it already is), told to the listener."""
        if isinstance(outcome, LedgerError):  # the ledger failed (a subagent's, say): the run
            raise outcome  # must fail, and can be resumed
        if isinstance(outcome, ToolExecution):
            execution = outcome
        elif isinstance(outcome, Exception):  # a tool's failure is a result for the model
            assert arguments is not None
            execution = self._raised(context, started_at, outcome, arguments)
        else:
            assert arguments is not None
            execution = self._output(context, started_at, outcome, arguments)
        if context.run_id is not None:
            note_tool_result(context.run_id, execution)
            emit(
                ToolCallFinished(
                    run_id=context.run_id,
                    step_index=context.step_index,
                    call_id=context.tool_call.id,
                    result=execution.result,
                    is_error=execution.is_error,
                    duration_ms=execution.duration_ms,
                )
            )
        return execution

    def _prepared(
        self, context: ToolContext, started_at: datetime
    ) -> tuple[Tool, BaseModel] | ToolExecution:
        """The tool and its validated arguments, or the error result that says why not."""
        call = context.tool_call
        tool = self.tools.get(call.name)
        if tool is None:
            return self._failed(context, started_at, _unknown_tool(call, self.tools))
        if call.raw_arguments is not None:
            return self._failed(context, started_at, _unparsed_arguments(call))
        try:
            return tool, tool.arguments_model.model_validate(call.arguments)
        except ValidationError as exc:
            message = _invalid_arguments(call, exc)
            return self._failed(context, started_at, message, metadata=tool_metadata(tool))

    def _output(
        self, context: ToolContext, started_at: datetime, value: object, arguments: BaseModel
    ) -> ToolExecution:
        """The execution of a call whose tool returned ``value``."""
        call = context.tool_call
        output = _as_output(value, call)
        if isinstance(output, str):
            return self._failed(context, started_at, output, arguments)
        unstorable = _unstorable(output, call)
        if unstorable is not None:
            return self._failed(context, started_at, unstorable, arguments)
        return ToolExecution(
            tool_call=call,
            arguments=_dumped(arguments),
            result=output.content,
            is_error=output.is_error,
            error=output.content if output.is_error else None,
            started_at=started_at,
            finished_at=self.clock(),
            child_run_id=output.child_run_id,
            subtree=output.subtree,
            metadata=output.metadata,
        )

    def _raised(
        self, context: ToolContext, started_at: datetime, exc: Exception, arguments: BaseModel
    ) -> ToolExecution:
        """The error result of a tool that raised ``exc``: the model gets one line; the log
        and the execution's metadata get the traceback, to find where it failed."""
        call = context.tool_call
        message = f"Tool {call.name!r} raised {type(exc).__name__}: {exc}"
        # The traceback goes in the message, escaped (not as exc_info): an exception's text may
        # hold a lone surrogate, which no UTF-8 log handler could write.
        logger.warning(
            "%s (run %s, step %d, tool call %s)\n%s",
            printable(message),
            context.run_id,
            context.step_index,
            call.id,
            _traceback_text(exc).rstrip("\n"),
        )
        metadata = {**tool_metadata(self.tools.get(call.name)), TRACEBACK_KEY: _kept_traceback(exc)}
        return self._failed(context, started_at, message, arguments, metadata=metadata)

    def _failed(
        self,
        context: ToolContext,
        started_at: datetime,
        message: str,
        arguments: BaseModel | None = None,
        *,
        metadata: dict[str, JsonValue] | None = None,
    ) -> ToolExecution:
        message = printable(message)  # an exception's text may hold what cannot be stored
        return ToolExecution(
            tool_call=context.tool_call,
            arguments=_dumped(arguments) if arguments is not None else None,
            result=f"Error: {message}",
            is_error=True,
            error=message,
            started_at=started_at,
            finished_at=self.clock(),
            metadata=metadata or {},
        )


def _is_async(tool: Tool | None) -> bool:
    """Whether ``tool`` is an ``async def`` function (or its ``invoke`` is)."""
    function = getattr(tool, "function", None)
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(tool, "invoke", None)
    )


def _kept_traceback(exc: BaseException, *, limit: int = TRACEBACK_LIMIT) -> str:
    """The traceback of ``exc`` as stored: its last ``limit`` characters (the end says where
    it failed), with what was cut said on the first line, and anything that cannot be stored
    escaped."""
    text = _traceback_text(exc)
    if len(text) <= limit:
        return text
    kept = text[-limit:]
    kept = kept[kept.find("\n") + 1 :]  # from the start of a line
    return f"... ({len(text) - len(kept)} characters cut)\n{kept}"


def _traceback_text(exc: BaseException) -> str:
    """The traceback of ``exc`` as Python prints it, with what cannot be stored escaped."""
    return printable("".join(traceback.format_exception(exc)))


def _dumped(arguments: BaseModel) -> dict[str, JsonValue]:
    return arguments.model_dump(mode="json")


def _as_output(value: object, call: ToolCall) -> ToolOutput | str:
    """What the tool returned as a :class:`ToolOutput`, or, when it cannot be JSON-encoded,
    the error that says so and what to return instead."""
    if isinstance(value, ToolOutput):
        return value
    if isinstance(value, str):
        return ToolOutput(content=value)
    try:
        return ToolOutput(content=pydantic_core.to_json(value).decode())
    except pydantic_core.PydanticSerializationError as exc:
        return (
            f"tool {call.name!r} returned a value of type {_type_name(value)} "
            f"that cannot be stored: it cannot be encoded as JSON ({exc}). Return a string, a "
            "JSON-compatible value (dict, list, str, int, float, bool or None), a pydantic "
            "model or a ToolOutput."
        )


def _type_name(value: object) -> str:
    kind = type(value)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def _unstorable(output: ToolOutput, call: ToolCall) -> str | None:
    """What is wrong with ``output`` when the ledger cannot store its text (content or
    metadata): which tool, where the character is and what to do; else None."""
    found = find_unstorable(output)
    if found is None:
        return None
    return (
        f"the output of tool {call.name!r} holds {found}; a tool must return valid Unicode "
        "without NUL characters: strip or escape them, or return binary data as base64."
    )


def _unknown_tool(call: ToolCall, tools: ToolSet) -> str:
    available = ", ".join(tools.names()) or "none"
    return f"unknown tool {call.name!r}. Available tools: {available}."


def _unparsed_arguments(call: ToolCall) -> str:
    raw = call.raw_arguments or ""
    shown = raw if len(raw) <= 200 else f"{raw[:200]}..."
    return (
        f"the arguments for tool {call.name!r} are not a JSON object: {shown!r}. "
        "Call it again with the arguments as one JSON object."
    )


def _invalid_arguments(call: ToolCall, exc: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or 'arguments'}: {error['msg']}"
        for error in exc.errors(include_url=False)
    )
    return (
        f"invalid arguments for tool {call.name!r}: {problems}. Call it again with valid arguments."
    )
