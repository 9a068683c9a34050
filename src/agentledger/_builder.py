"""``AgentBuilder``: the one place an agent is put together."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal, TypeGuard

from ._core import (
    DEFAULT_STOP_FINISH_REASONS,
    AppendStepMessages,
    AppendToolTraceToBuffer,
    CarryMaskedTrace,
    CarryOver,
    ClearExecutionBuffer,
    ContextBudget,
    Criterion,
    ObservationMasking,
    ProcessFunction,
    StateProcessor,
    Summarizer,
    Tool,
    ToolSet,
    ToolSource,
    as_processor,
    default_criteria,
)
from ._defaults import DEFAULT_MAX_STEPS as DEFAULT_MAX_STEPS
from ._drivers import ToolCallingDriver
from ._loop import (
    DEFAULT_FINAL_INSTRUCTION,
    Agent,
    AgentConfig,
    Driver,
    FinalResponse,
    PartialFlush,
    SpawnSubagentTool,
    SubagentPolicy,
    SubagentSpec,
    Tracer,
)
from ._recording import HasRecorder, InMemoryRecorder, Recorder
from ._values import LLM, Clock, ExecutionBudget, ModelSettings, check_storable, utc_now
from .errors import ConfigurationError

Processor = StateProcessor | ProcessFunction
"""What ``with_processors`` takes: a processor object, or a plain function."""


@dataclass(frozen=True)
class AgentBuilder:
    """Builds an :class:`Agent`, fluently. Every ``with_*`` returns a new builder, so a
    builder can be shared as a base and specialised.

    >>> agent = AgentBuilder().with_llm(llm).with_tools([get_weather]).build()  # doctest: +SKIP
    """

    llm: LLM | None = None
    driver: Driver | None = None
    tools: tuple[Tool | Callable[..., object], ...] = ()
    system_prompt: str | None = None
    carry_over: CarryOver = CarryOver.SEPARATED
    budget: ExecutionBudget = field(
        default_factory=lambda: ExecutionBudget(max_steps=DEFAULT_MAX_STEPS)
    )
    processors: tuple[StateProcessor, ...] = ()
    criteria: tuple[Criterion, ...] = ()
    stop_finish_reasons: frozenset[str] = DEFAULT_STOP_FINISH_REASONS
    final_response: FinalResponse = FinalResponse.GENERATE
    final_instruction: str = DEFAULT_FINAL_INSTRUCTION
    model: str | None = None
    settings: ModelSettings = field(default_factory=ModelSettings)
    name: str = "agent"
    clock: Clock = utc_now
    max_parallel_tools: int = 1
    recorder: Recorder | None = None
    subagents: tuple[SubagentSpec, ...] = ()
    subagent_policy: SubagentPolicy = field(default_factory=SubagentPolicy)
    context_budget: ContextBudget | None = None
    summarize: bool = True
    summarizer: LLM | None = None
    summary_model: str | None = None
    partial_flush: PartialFlush = PartialFlush()
    tracer: Tracer | None = None
    mcp_servers: tuple[ToolSource, ...] = ()

    def _with(self, **changes: object) -> AgentBuilder:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def with_llm(self, llm: LLM, *, model: str | None = None) -> AgentBuilder:
        """The model the agent calls; ``model`` names it in every request."""
        return self._with(llm=llm, model=model if model is not None else self.model)

    def with_driver(self, driver: Driver) -> AgentBuilder:
        """Replace the default :class:`ToolCallingDriver` (built from ``with_llm``)."""
        return self._with(driver=driver)

    def with_tools(self, tools: Iterable[Tool | Callable[..., object]]) -> AgentBuilder:
        """Add tools: ``@tool`` functions, plain typed functions or any :class:`Tool`."""
        return self._with(tools=(*self.tools, *tools))

    def with_mcp_servers(self, servers: Iterable[ToolSource]) -> AgentBuilder:
        """Add the tools of Model Context Protocol servers: ``MCPServer.stdio(...)`` or
        ``MCPServer.http(...)`` from :mod:`agentledger.integrations.mcp` (the ``mcp`` extra).

        Each server is started (or connected to) at the agent's first run and its tools listed
        at the start of every run (again when the server said its list changed); they are
        called like the agent's own, and each call records the server and the tool's name
        there. A tool whose name another tool has is offered as ``<server>_<tool>``.
        ``Agent.close()`` (or ``with agent:``) stops the servers.
        """
        added = tuple(servers)
        for server in added:
            if not isinstance(server, ToolSource):
                raise ConfigurationError(
                    f"with_mcp_servers() takes MCPServer.stdio(...) or MCPServer.http(...) "
                    f"(from agentledger.integrations.mcp), not {server!r}"
                )
        _check_unique_names((*self.mcp_servers, *added))
        return self._with(mcp_servers=(*self.mcp_servers, *added))

    def with_system_prompt(self, prompt: str) -> AgentBuilder:
        return self._with(system_prompt=prompt)

    def with_separated_tool_trace(self, enabled: bool = True) -> AgentBuilder:
        """``True`` (the default): only user messages and answers reach the conversation.
        ``False``: every step's output is appended to it (inline). The same as
        :meth:`with_carry_over` ``"separated"`` and ``"inline"``."""
        return self._with(carry_over=CarryOver.SEPARATED if enabled else CarryOver.INLINE)

    def with_carry_over(self, policy: CarryOver | str) -> AgentBuilder:
        """What a finished run leaves in the conversation for later runs: ``"separated"`` (the
        answer only, the default), ``"inline"`` (tool calls, results and answer) or
        ``"masked"`` (tool calls and answer, each result replaced by a placeholder saying
        where the full result is)."""
        try:
            return self._with(carry_over=CarryOver(policy))
        except ValueError:
            choices = ", ".join(repr(p.value) for p in CarryOver)
            raise ConfigurationError(
                f"unknown carry-over policy {policy!r}: choose one of {choices}"
            ) from None

    def with_max_steps(self, max_steps: int | None) -> AgentBuilder:
        """At most ``max_steps`` steps per run (default 20), plus a final-response step;
        ``None`` removes the limit."""
        return self._with(budget=self.budget.model_copy(update={"max_steps": max_steps}))

    def with_budget(self, budget: ExecutionBudget) -> AgentBuilder:
        """Limits per run; a limit left ``None`` in ``budget`` keeps the builder's."""
        merged = {**self.budget.model_dump(), **budget.model_dump(exclude_none=True)}
        return self._with(budget=ExecutionBudget.model_validate(merged))

    def with_context_budget(
        self,
        max_tokens: int,
        *,
        keep_recent: int = 3,
        summarize: bool = True,
        summarize_at: float = 0.5,
        summary_tokens: int | None = None,
        summarizer: LLM | None = None,
        summary_model: str | None = None,
    ) -> AgentBuilder:
        """Keep what the model is sent within ``max_tokens`` (estimated: see
        :mod:`agentledger.context`).

        - Within a run, before a step that would exceed it, the oldest tool results of the run
          are masked, the ``keep_recent`` most recent ones left raw.
        - Between runs (with ``summarize``, the default), a conversation that takes more than
          ``summarize_at`` of the budget has its oldest messages summarized into a system
          message, by the agent's own model or by ``summarizer`` (with ``summary_model``); a
          summary may take ``summary_tokens``. ``Agent.compact`` does it on demand.
        """
        budget = ContextBudget(
            max_tokens,
            keep_recent=keep_recent,
            summarize_at=summarize_at,
            summary_tokens=summary_tokens,
        )
        return self._with(
            context_budget=budget,
            summarize=summarize,
            summarizer=summarizer,
            summary_model=summary_model,
        )

    def with_processors(self, *processors: Processor | Iterable[Processor]) -> AgentBuilder:
        """Add state processors, or lists of them; they run outside the built-in ones, first
        listed outermost. A processor is an object with ``can_process(state)`` and
        ``process(state, next)``, or a plain function ``(state, next) -> state`` (its
        ``process`` alone, run at every step)."""
        flat: list[StateProcessor] = []
        for item in processors:
            group = [item] if _is_processor(item) else item
            if isinstance(group, str) or not isinstance(group, Iterable):
                raise _not_a_processor(item)
            for processor in group:
                if not _is_processor(processor):
                    raise _not_a_processor(processor)
                flat.append(as_processor(processor))
        return self._with(processors=(*self.processors, *flat))

    def with_continuation_criteria(self, *criteria: Criterion) -> AgentBuilder:
        """Add criteria ``(state) -> ContinuationDecision``, judged after the built-in ones."""
        return self._with(criteria=(*self.criteria, *criteria))

    def with_stop_finish_reasons(self, *reasons: str) -> AgentBuilder:
        """Provider finish reasons that stop the run (default: content_filter, refusal)."""
        return self._with(stop_finish_reasons=frozenset(reasons))

    def with_final_response(
        self, policy: FinalResponse | Literal["generate", "none"], *, instruction: str | None = None
    ) -> AgentBuilder:
        """``"generate"`` (the default) or ``"none"``: whether a run stopped by a limit before
        the model answered makes one more inference, with no tools, to get the answer."""
        return self._with(
            final_response=FinalResponse(policy),
            final_instruction=instruction if instruction is not None else self.final_instruction,
        )

    def with_model_settings(self, settings: ModelSettings) -> AgentBuilder:
        return self._with(settings=settings)

    def with_name(self, name: str) -> AgentBuilder:
        """The name the agent's runs are recorded under (``agent_runs.agent_name``)."""
        check_storable(name, "the agent's name")
        return self._with(name=name)

    def with_clock(self, clock: Clock) -> AgentBuilder:
        """The time source for timestamps and time limits (timezone-aware UTC datetimes)."""
        return self._with(clock=clock)

    def with_parallel_tools(self, max_parallel: int) -> AgentBuilder:
        """Run up to ``max_parallel`` tool calls of one step at once; results keep call order."""
        if max_parallel < 1:
            raise ConfigurationError(f"with_parallel_tools needs at least 1, got {max_parallel}")
        return self._with(max_parallel_tools=max_parallel)

    def with_partial_flush(self, *, seconds: float = 0.5, characters: int = 2000) -> AgentBuilder:
        """While a streamed step's text is shown, make it durable (the run's partial output)
        every ``seconds`` or every ``characters`` shown, whichever comes first: what a process
        killed mid-answer leaves for recovery to commit. A cancelled run commits all it showed,
        whatever the interval."""
        return self._with(partial_flush=PartialFlush(seconds=seconds, characters=characters))

    def with_subagents(
        self, subagents: Iterable[SubagentSpec], *, policy: SubagentPolicy | None = None
    ) -> AgentBuilder:
        """Offer the model the ``spawn_subagent`` tool for these subagents.

        A subagent runs with its own tools, conversation and run (recorded where this agent's
        runs are), within what this agent's budget has left, and returns only its answer.
        """
        return self._with(
            subagents=(*self.subagents, *subagents),
            subagent_policy=policy if policy is not None else self.subagent_policy,
        )

    def with_tracing(self, tracer: Tracer | None) -> AgentBuilder:
        """Trace the agent's runs as they happen with ``tracer``, its subagents' runs included:
        ``OpenTelemetryTracer()`` from :mod:`agentledger.integrations.otel` (the ``otel``
        extra) sends them to OpenTelemetry as GenAI spans. None (the default) traces nothing,
        at no cost to the loop."""
        return self._with(tracer=tracer)

    def with_ledger(self, ledger: HasRecorder | Recorder) -> AgentBuilder:
        """Record ``Agent.run`` in ``ledger``: a :class:`agentledger.ledger.Ledger` (its
        ``recorder``), or any :class:`Recorder`. Without one, runs are kept in memory."""
        recorder = ledger.recorder if isinstance(ledger, HasRecorder) else ledger
        return self._with(recorder=recorder)

    def build(self) -> Agent:
        check_storable(self.name, "the agent's name")  # set directly, or a subagent's
        recorder = self.recorder if self.recorder is not None else InMemoryRecorder()
        tools: tuple[Tool | Callable[..., object], ...] = self.tools
        if self.subagents:
            spawn = SpawnSubagentTool(
                subagents=self.subagents,
                policy=self.subagent_policy,
                make_agent=lambda spec: self._subagent(spec, recorder).build(),
            )
            tools = (*tools, spawn)
        return Agent(
            AgentConfig(
                driver=self._driver(),
                tools=ToolSet(tools),
                processors=(*self.processors, *self._context(), *self._builtin_processors()),
                criteria=(*default_criteria(self.stop_finish_reasons), *self.criteria),
                budget=self.budget,
                clock=self.clock,
                name=self.name,
                system_prompt=self.system_prompt,
                final_response=self.final_response,
                final_instruction=self.final_instruction,
                max_parallel_tools=self.max_parallel_tools,
                recorder=recorder,
                context_budget=self.context_budget,
                summarizer=self._summarizer(),
                partial_flush=self.partial_flush,
                tracer=self.tracer,
                tool_sources=self.mcp_servers,
            )
        )

    def _subagent(self, spec: SubagentSpec, recorder: Recorder) -> AgentBuilder:
        """The builder of a subagent: the spec's own prompt, tools, model and subagents, this
        agent's recorder, clock and execution settings."""
        same_model = spec.llm is None
        builder = AgentBuilder(
            llm=self.llm if same_model else spec.llm,
            driver=self.driver if same_model else None,
            model=self.model if same_model else None,
            settings=self.settings,
            tools=tuple(spec.tools),
            system_prompt=spec.system_prompt,
            name=spec.name,
            clock=self.clock,
            max_parallel_tools=self.max_parallel_tools,
            final_response=self.final_response,
            final_instruction=self.final_instruction,
            stop_finish_reasons=self.stop_finish_reasons,
            recorder=recorder,
            partial_flush=self.partial_flush,
            tracer=self.tracer,
            subagents=tuple(spec.subagents),
            subagent_policy=self.subagent_policy,
        )
        if spec.mcp_servers:
            builder = builder.with_mcp_servers(spec.mcp_servers)
        return builder.with_budget(spec.budget) if spec.budget is not None else builder

    def _driver(self) -> Driver:
        if self.driver is not None:
            return self.driver
        if self.llm is None:
            raise ConfigurationError(
                "AgentBuilder.build(): the agent has no model. Call .with_llm(...) with an object "
                "that has complete(InferenceRequest) -> InferenceResponse (ScriptedLLM in tests), "
                "or .with_driver(...)."
            )
        return ToolCallingDriver(llm=self.llm, model=self.model, settings=self.settings)

    def _context(self) -> tuple[StateProcessor, ...]:
        budget = self.context_budget
        return () if budget is None else (ObservationMasking(budget),)

    def _summarizer(self) -> Summarizer | None:
        if self.context_budget is None or not self.summarize:
            return None
        if self.summarizer is not None:
            return Summarizer(self.summarizer, model=self.summary_model)
        llm = self.llm if self.llm is not None else getattr(self.driver, "llm", None)
        if llm is None:
            raise ConfigurationError(
                "with_context_budget(): summarizing needs a model, and the agent's driver has "
                "none this builder can see. Pass summarizer=<an LLM>, or summarize=False."
            )
        model = self.summary_model if self.summary_model is not None else self.model
        return Summarizer(llm, model=model, settings=self.settings)

    def _builtin_processors(self) -> tuple[StateProcessor, ...]:
        # Outermost first: post-step work runs innermost first, so the trace reaches the
        # buffer, then (masked) the conversation, then the answer reaches the conversation,
        # then the buffer is cleared.
        if self.carry_over is CarryOver.INLINE:
            return (AppendStepMessages(separate_tool_trace=False),)
        carried = (CarryMaskedTrace(),) if self.carry_over is CarryOver.MASKED else ()
        return (
            ClearExecutionBuffer(),
            AppendStepMessages(separate_tool_trace=True),
            *carried,
            AppendToolTraceToBuffer(),
        )


def _is_processor(item: object) -> TypeGuard[Processor]:
    return isinstance(item, StateProcessor) or callable(item)


def _not_a_processor(item: object) -> ConfigurationError:
    return ConfigurationError(
        f"with_processors() takes processors, or lists of them: an object with "
        f"can_process(state) and process(state, next), or a function (state, next) -> state; "
        f"not {item!r}"
    )


def _check_unique_names(servers: tuple[ToolSource, ...]) -> None:
    """Each server's name is what its calls are recorded under: two alike would be mixed up."""
    names = [server.name for server in servers]
    for name in names:
        if names.count(name) > 1:
            raise ConfigurationError(
                f"two MCP servers are named {name!r}: give each its own name "
                "(MCPServer.stdio(..., name=...) or MCPServer.http(..., name=...))"
            )
