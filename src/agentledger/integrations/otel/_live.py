"""``OpenTelemetryTracer``: runs traced as they happen, as OpenTelemetry GenAI spans.

One ``invoke_agent {agent}`` span per run (``INTERNAL``), one ``chat {model}`` span per model
call (``CLIENT``), one ``execute_tool {tool}`` span per tool call (``INTERNAL``), under the
run's span; a subagent's run is a child of the tool call that spawned it. Each span is current
while its work runs, so spans the application makes there (an instrumented HTTP client under a
model call, a tool's own spans) nest where they happened.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ..._core import ToolContext
from ..._recording import RunResult
from ..._values import (
    AgentState,
    InferenceRequest,
    InferenceResponse,
    Message,
    Messages,
    Role,
    ToolExecution,
)
from . import _attributes as at
from . import _semconv as sc

T = TypeVar("T")

INSTRUMENTATION_NAME = "agentledger"
"""The instrumentation scope of the spans."""


class OpenTelemetryTracer:
    """Traces an agent's runs as OpenTelemetry spans, by the GenAI semantic conventions
    (:data:`SEMCONV_VERSION`): give it to ``AgentBuilder.with_tracing``.

    ``tracer_provider`` defaults to the global one (``opentelemetry.trace``), looked up when
    a span starts, so a provider the application sets later is used. Message contents (the
    model's inputs and output, tool arguments and results) are left out unless
    ``capture_content`` is set, or, when it is None, the environment variable
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true``.
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        capture_content: bool | None = None,
    ) -> None:
        self._tracer = trace.get_tracer(
            INSTRUMENTATION_NAME,
            at.library_version(),
            tracer_provider=tracer_provider,
            schema_url=sc.SCHEMA_URL,
        )
        self.capture_content = (
            at.capture_content_from_env() if capture_content is None else capture_content
        )

    def run_started(self, state: AgentState, agent_name: str) -> RunSpan:
        assert state.run_id is not None
        span = self._tracer.start_span(
            f"{sc.INVOKE_AGENT} {agent_name}",
            kind=SpanKind.INTERNAL,
            attributes=at.run_start_attributes(
                run_id=state.run_id,
                agent_name=agent_name,
                conversation_id=state.conversation_id,
                parent_run_id=state.parent_run_id,
                root_run_id=state.root_run_id,
                depth=state.depth,
            ),
        )
        return RunSpan(span)

    @contextmanager
    def model_call(
        self, llm: object, inference: InferenceRequest, state: AgentState, step_index: int
    ) -> Iterator[ModelCallSpan]:
        model = inference.model or _model_of(llm)
        attributes = at.chat_start_attributes(
            conversation_id=state.conversation_id,
            run_id=state.run_id,
            step_index=step_index,
            request_model=model,
            provider=at.provider_name(llm),
        )
        with self._span(at.chat_name(model), SpanKind.CLIENT, attributes) as span:
            inputs = inference.messages if self.capture_content else None
            yield ModelCallSpan(span, inputs)

    @contextmanager
    def tool_call(self, context: ToolContext) -> Iterator[ToolCallSpan]:
        call = context.tool_call
        attributes = at.tool_start_attributes(
            call,
            conversation_id=context.state.conversation_id,
            run_id=context.run_id,
            step_index=context.step_index,
        )
        with self._span(at.tool_name(call), SpanKind.INTERNAL, attributes) as span:
            yield ToolCallSpan(span, self.capture_content)

    @contextmanager
    def _span(self, name: str, kind: SpanKind, attributes: at.Attributes) -> Iterator[Span]:
        """A span current while the block runs; an exception that leaves it is its error."""
        with self._tracer.start_as_current_span(
            name,
            kind=kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as exc:
                _failed(span, type(exc).__name__, str(exc))
                raise


class RunSpan:
    """The ``invoke_agent`` span of a run in progress."""

    def __init__(self, span: Span) -> None:
        self.span = span

    def within(self, function: Callable[[], T]) -> T:
        with trace.use_span(
            self.span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        ):
            return function()

    def ended(self, result: RunResult | None, error: BaseException | None) -> None:
        if result is not None and self.span.is_recording():
            state = result.state
            self.span.set_attributes(
                at.run_end_attributes(
                    status=result.status,
                    stop_reason=result.stop_reason,
                    usage=result.usage,
                    cost_usd=result.cost_usd,
                    model=_last_model(state),
                    step_count=state.step_count,
                    error=result.error,
                )
            )
            if at.run_failed(result.status, result.stop_reason):
                self.span.set_status(Status(StatusCode.ERROR, result.error))
        if error is not None:
            _failed(self.span, type(error).__name__, str(error))
        self.span.end()


class ModelCallSpan:
    """The ``chat`` span of a model call in progress."""

    def __init__(self, span: Span, inputs: Messages | None) -> None:
        self.span = span
        self._inputs = inputs

    def answered(self, response: InferenceResponse) -> None:
        if not self.span.is_recording():
            return
        self.span.set_attributes(
            at.chat_end_attributes(
                usage=response.usage,
                model=response.model,
                finish_reason=response.finish_reason,
                cost_usd=response.cost_usd,
            )
        )
        if self._inputs is not None:
            answer = Message(
                role=Role.ASSISTANT,
                content=response.content,
                tool_calls=response.tool_calls,
                reasoning=response.reasoning,
            )
            self.span.set_attributes(
                at.content_attributes(self._inputs, answer, response.finish_reason)
            )


class ToolCallSpan:
    """The ``execute_tool`` span of a tool call in progress."""

    def __init__(self, span: Span, content: bool) -> None:
        self.span = span
        self._content = content

    def finished(self, execution: ToolExecution) -> None:
        if not self.span.is_recording():
            return
        self.span.set_attributes(at.tool_end_attributes(execution, content=self._content))
        if execution.is_error:
            self.span.set_status(Status(StatusCode.ERROR, execution.error))


def _failed(span: Span, kind: str, message: str) -> None:
    span.set_attribute(sc.ERROR_TYPE, kind)
    span.set_status(Status(StatusCode.ERROR, f"{kind}: {message}" if message else kind))


def _model_of(llm: object) -> str | None:
    model = getattr(llm, "model", None)
    return model if isinstance(model, str) else None


def _last_model(state: AgentState) -> str | None:
    """The model of the run's last step that says one: the run row's ``model``."""
    for execution in reversed(state.step_executions):
        if execution.step.model:
            return execution.step.model
    return None
