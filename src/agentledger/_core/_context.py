"""The model's context: how many tokens it holds, the budget an agent keeps it within, and
observation masking.

**Token counts.** No provider's tokenizer is available offline, so the library estimates:
:func:`estimate_tokens` counts a message's characters (content, reasoning, name, tool calls as
JSON) and takes one token per :data:`CHARS_PER_TOKEN` characters, rounded up, plus
:data:`TOKENS_PER_MESSAGE` for the message's framing. That is close for English prose and code
with the common BPE tokenizers, and it errs high for most other text. Once a step has run, the
provider has said how many tokens that step's input took: :func:`context_tokens` scales the
estimate by the ratio of that report to the estimate of the same messages, so the figure
follows the model's own tokenizer from the second step on.

**Observation masking.** Within a long run, old tool results are what fills the context (and
what the model needs least). :func:`mask_observations` replaces the oldest tool results of the
execution buffer with a short placeholder (which tool, how long the result was, where the full
result is) until the context fits the budget, and never touches the ``keep_recent`` most recent
ones; a tool call keeps its result message, so every call is still answered.

**Summarization.** Between runs, when the conversation takes more than ``summarize_at`` of the
budget, its oldest messages move to the ``buffer`` section and a model call (:class:`Summarizer`)
writes what they said into one system message in the ``summary`` section; the moved messages
(and the summary before, which the new one takes in) leave the model's context. The ledger
keeps every one of them, out of context and pointing at the summary that replaced them, so the
conversation as the user saw it never changes (:func:`plan_summary` chooses what moves).

**Carry-over.** What a finished run leaves in the conversation for later runs
(:class:`CarryOver`): its answer only, everything it did, or its tool calls with their results
masked.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from .._values import (
    LLM,
    AgentState,
    AgentStatus,
    ContextMasking,
    InferenceRequest,
    InferenceResponse,
    Message,
    Messages,
    ModelSettings,
    Role,
    new_id,
)
from ..errors import ConfigurationError
from ._processors import Next

CHARS_PER_TOKEN = 4
"""Characters per token in :func:`estimate_tokens`."""
TOKENS_PER_MESSAGE = 4
"""Tokens :func:`estimate_tokens` adds per message for its role and framing."""
MASKED_KEY = "masked"
"""Where a masked tool result keeps what it replaced, in ``Message.metadata``."""
SUMMARY_KEY = "summary"
"""Where a summary message says what it replaced, in ``Message.metadata``."""


def message_characters(message: Message) -> int:
    """The characters of ``message`` that reach the model."""
    count = len(message.content) + len(message.reasoning or "") + len(message.name or "")
    for call in message.tool_calls:
        arguments = call.raw_arguments or json.dumps(dict(call.arguments), ensure_ascii=False)
        count += len(call.id) + len(call.name) + len(arguments)
    return count + len(message.tool_call_id or "")


def estimate_tokens(messages: Iterable[Message]) -> int:
    """The documented approximation of the tokens ``messages`` take (see the module)."""
    return sum(
        math.ceil(message_characters(m) / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE for m in messages
    )


def calibration(state: AgentState) -> float:
    """Reported input tokens / estimated ones, for the last step of ``state``'s run whose
    provider reported them (1.0 before any such step)."""
    for execution in reversed(state.step_executions):
        step = execution.step
        if step.usage.input_tokens <= 0 or not step.input_messages:
            continue
        return step.usage.input_tokens / estimate_tokens(step.input_messages)
    return 1.0


def context_tokens(state: AgentState, messages: Iterable[Message] | None = None) -> int:
    """The tokens of ``messages`` (by default the state's inference messages), estimated and
    scaled by :func:`calibration`."""
    chosen = state.messages_for_inference() if messages is None else messages
    return math.ceil(estimate_tokens(chosen) * calibration(state))


@dataclass(frozen=True)
class ContextBudget:
    """How many tokens an agent's context may hold (``max_tokens``), and how many of the most
    recent messages stay raw whatever the budget says (``keep_recent``: tool results when
    masking, conversation messages when summarizing).

    Before a run, a conversation that takes more than ``summarize_at`` of ``max_tokens`` (with
    the system prompt and the new user message) is summarized down to half that share, which
    leaves the rest of the budget to the run; a summary may take ``summary_tokens`` (by
    default an eighth of the budget).
    """

    max_tokens: int
    keep_recent: int = 3
    summarize_at: float = 0.5
    summary_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_tokens <= 0:
            raise ConfigurationError(
                f"a context budget needs max_tokens > 0, not {self.max_tokens}: give the "
                "number of tokens the model's context may hold"
            )
        if self.keep_recent < 0:
            raise ConfigurationError(
                f"keep_recent is how many recent messages stay raw: 0 or more, not "
                f"{self.keep_recent}"
            )
        if not 0 < self.summarize_at <= 1:
            raise ConfigurationError(
                f"summarize_at is the share of max_tokens the conversation may take before it "
                f"is summarized: more than 0 and at most 1, not {self.summarize_at}"
            )
        if self.summary_tokens is not None and self.summary_tokens <= 0:
            raise ConfigurationError(
                f"summary_tokens is how long a summary may be: more than 0, not "
                f"{self.summary_tokens}"
            )

    @property
    def summary_limit(self) -> int:
        """The tokens a summary may take."""
        if self.summary_tokens is not None:
            return self.summary_tokens
        return max(self.max_tokens // 8, 16)


@dataclass(frozen=True)
class Masking:
    """What :func:`mask_observations` did: the messages, and the tokens before and after."""

    messages: Messages
    masked: int
    tokens_before: int
    tokens_after: int


def placeholder(message: Message) -> Message:
    """``message`` (a tool result) with its content replaced by a short note saying which tool
    it came from, how long it was and where the full result is; the same id and call id."""
    tool = message.name or "the tool"
    note = (
        f"[The result of {tool} ({len(message.content):,} characters) was removed to save "
        f"context. The full result is recorded in tool_executions, tool_call_id "
        f"{message.tool_call_id}.]"
    )
    metadata = {
        **message.metadata,
        MASKED_KEY: {"characters": len(message.content), "tool_call_id": message.tool_call_id},
    }
    return message.model_copy(update={"content": note, "metadata": metadata})


def is_masked(message: Message) -> bool:
    return MASKED_KEY in message.metadata


def mask_observations(state: AgentState, budget: ContextBudget) -> Masking:
    """The state's execution buffer with its oldest tool results masked (:func:`placeholder`),
    oldest first, until the inference messages fit ``budget``, the ``keep_recent`` most recent
    results left raw. When everything that may be masked is, and the context still does not
    fit, the result says so (``tokens_after > budget.max_tokens``): summarizing the
    conversation, between runs, is the next resort."""
    buffer = state.execution_buffer()
    scale = calibration(state)
    sections = [s for s in state.INFERENCE_SECTIONS if s != state.EXECUTION_BUFFER_SECTION]
    others = estimate_tokens(state.store.select(*sections))
    messages = list(buffer)
    sizes = [estimate_tokens((m,)) for m in messages]
    before = math.ceil((others + sum(sizes)) * scale)
    results = [i for i, m in enumerate(messages) if m.role is Role.TOOL and not is_masked(m)]
    maskable = results[: max(len(results) - budget.keep_recent, 0)]
    total, masked = others + sum(sizes), 0
    for index in maskable:
        if math.ceil(total * scale) <= budget.max_tokens:
            break
        replaced = placeholder(messages[index])
        new_size = estimate_tokens((replaced,))
        if new_size >= sizes[index]:
            continue  # a result shorter than its placeholder stays as it is
        messages[index] = replaced
        total += new_size - sizes[index]
        masked += 1
    return Masking(Messages.of(*messages), masked, before, math.ceil(total * scale))


class ObservationMasking:
    """A state processor that masks old tool results (:func:`mask_observations`) before each
    step whose context would exceed ``budget``.

    Only what the model is sent changes: the buffer rows in the ledger and the rows of
    ``tool_executions`` keep every result whole, and a run rebuilt from them (``Agent.resume``)
    is masked again before its next step.
    """

    def __init__(self, budget: ContextBudget) -> None:
        self.budget = budget

    def can_process(self, state: AgentState) -> bool:
        return not state.execution_buffer().is_empty()

    def process(self, state: AgentState, next: Next) -> AgentState:
        masking = mask_observations(state, self.budget)
        if not masking.masked:
            return next(state)
        section = state.store.section(state.EXECUTION_BUFFER_SECTION)
        after = next(state.with_message_store(section.set_messages(masking.messages)))
        execution = after.current_execution
        if execution is None or execution.step_index != state.step_count:
            return after  # a processor inside did not take the step: nothing to report on
        report = ContextMasking(
            masked=masking.masked,
            tokens_before=masking.tokens_before,
            tokens_after=masking.tokens_after,
        )
        step = execution.step.model_copy(update={"context_masking": report})
        return after.with_step_execution(execution.model_copy(update={"step": step}))

    def __repr__(self) -> str:
        return f"ObservationMasking({self.budget!r})"


# --- summarization between runs -------------------------------------------------------------------


@dataclass(frozen=True)
class SummaryPlan:
    """What :func:`plan_summary` chose: the messages that leave the context (the summary before,
    if any, then the oldest conversation messages, in order) and the tokens of the context
    before, with the system prompt and the incoming message."""

    previous: Messages
    moved: Messages
    kept: Messages
    tokens_before: int
    fixed_tokens: int

    @property
    def replaced(self) -> int:
        """How many messages the summary replaces: the summary before, and those moved."""
        return len(self.previous) + len(self.moved)


def plan_summary(
    state: AgentState,
    budget: ContextBudget,
    *,
    fixed: Sequence[Message] = (),
    force: bool = False,
) -> SummaryPlan | None:
    """The oldest conversation messages to summarize so that the conversation, with ``fixed``
    (the system prompt and the next user message), takes at most half of ``summarize_at`` of
    the budget; ``None`` when it is within ``summarize_at`` already (unless ``force``) or when
    nothing can move.

    The ``keep_recent`` newest messages stay. The cut never separates a tool call from its
    results, and moves to the start of a run (a user message) when one is within reach, so the
    messages left are whole runs.
    """
    previous = state.store.select(state.SUMMARY_SECTION, state.BUFFER_SECTION)
    messages = list(state.messages())
    fixed_tokens = estimate_tokens(fixed)
    sizes = [estimate_tokens((m,)) for m in messages]
    before = estimate_tokens(previous) + sum(sizes) + fixed_tokens
    limit = budget.max_tokens * budget.summarize_at
    if before <= limit and not force:
        return None
    movable = len(messages) - min(budget.keep_recent, len(messages))
    target = limit / 2 - budget.summary_limit - fixed_tokens
    cut, remaining = 0, sum(sizes)
    while cut < movable and (remaining > target or (force and cut == 0)):
        remaining -= sizes[cut]
        cut += 1
    cut = _run_boundary(messages, cut, movable)
    if cut == 0:
        return None
    return SummaryPlan(
        previous=previous,
        moved=Messages.of(*messages[:cut]),
        kept=Messages.of(*messages[cut:]),
        tokens_before=before,
        fixed_tokens=fixed_tokens,
    )


def _run_boundary(messages: list[Message], cut: int, movable: int) -> int:
    """``cut`` moved forward to the next user message within ``movable``, or, without one, to
    the first place that does not leave a tool result without its call; 0 when there is none."""
    for index in range(cut, movable + 1):
        if index == len(messages) or messages[index].role is Role.USER:
            return index
    for index in range(cut, movable + 1):
        if index == len(messages) or messages[index].role is not Role.TOOL:
            return index
    return 0


SUMMARY_INSTRUCTIONS = (
    "You condense the earlier part of a conversation between a user and an AI assistant into "
    "a summary the assistant will read instead of it. Keep every fact, decision, number, name, "
    "open question and promise the rest of the conversation may need; say who asked for what. "
    "Leave out greetings and repetition. Write plain prose or short bullets, in the "
    "conversation's language, and nothing else."
)
"""The system prompt of a summarization call."""

SUMMARY_HEADER = "Summary of the earlier conversation ({count} messages):\n\n"
"""The start of a summary message's text, before what the model wrote."""


def transcript(messages: Iterable[Message]) -> str:
    """``messages`` as the text a summarizer reads: one paragraph each, with who said it."""
    parts: list[str] = []
    for message in messages:
        if message.role is Role.TOOL:
            who = f"tool result ({message.name or message.tool_call_id})"
        elif message.role is Role.SYSTEM:
            who = "earlier summary" if SUMMARY_KEY in message.metadata else "system"
        else:
            who = message.role.value
        text = message.content
        if message.tool_calls:
            calls = ", ".join(
                f"{c.name}({c.raw_arguments or json.dumps(dict(c.arguments), ensure_ascii=False)})"
                for c in message.tool_calls
            )
            text = f"{text}\n[calls {calls}]" if text else f"[calls {calls}]"
        parts.append(f"{who}: {text}")
    return "\n\n".join(parts)


@dataclass(frozen=True)
class Summarizer:
    """Writes a summary with a model: the agent's own (the default) or one given to
    :meth:`agentledger.AgentBuilder.with_context_budget`."""

    llm: LLM
    model: str | None = None
    settings: ModelSettings = field(default_factory=ModelSettings)
    instructions: str = SUMMARY_INSTRUCTIONS

    def request(self, messages: Messages, max_tokens: int) -> InferenceRequest:
        """The agent's settings, but the summary is prose and calls no tool: the agent's
        ``response_format`` and ``tool_choice`` are left out."""
        limit = self.settings.max_output_tokens
        settings = self.settings.model_copy(
            update={
                "max_output_tokens": max_tokens if limit is None else min(limit, max_tokens),
                "tool_choice": None,
                "response_format": None,
            }
        )
        prompt = (
            "Summarize this conversation so far (an earlier summary, if there is one, comes "
            f"first):\n\n{transcript(messages)}"
        )
        return InferenceRequest(
            messages=Messages.of(Message.system(self.instructions), Message.user(prompt)),
            model=self.model,
            settings=settings,
        )

    def summarize(self, messages: Messages, max_tokens: int) -> InferenceResponse:
        return self.llm.complete(self.request(messages, max_tokens))


def summary_message(text: str, plan: SummaryPlan, compaction_id: str) -> Message:
    """The system message that replaces ``plan.moved`` (and the summary before) in the
    context."""
    return Message(
        role=Role.SYSTEM,
        content=SUMMARY_HEADER.format(count=plan.replaced) + text.strip(),
        metadata={SUMMARY_KEY: {"messages": plan.replaced, "compaction_id": compaction_id}},
    )


# --- carry-over -----------------------------------------------------------------------------------


class CarryOver(StrEnum):
    """What a finished run leaves in the conversation for the runs after it."""

    SEPARATED = "separated"
    """The answer only; the tool trace stays in the ledger's trace tables (the default)."""
    INLINE = "inline"
    """Everything the run did: tool calls, results and answer."""
    MASKED = "masked"
    """The tool calls and the answer, each result replaced by a placeholder saying where it is
    (:func:`placeholder`): later runs know what was done without its bulk."""


def carried_trace(trace: Iterable[Message]) -> list[Message]:
    """A run's trace as :attr:`CarryOver.MASKED` leaves it in the conversation: new messages
    (new ids), results masked, reasoning left out (it is trace, never conversation)."""
    carried: list[Message] = []
    for message in trace:
        if message.role is Role.TOOL:
            message = message if is_masked(message) else placeholder(message)
        elif not message.tool_calls:
            continue
        carried.append(message.model_copy(update={"id": new_id(), "reasoning": None}))
    return carried


class CarryMaskedTrace:
    """Files a finished run's tool trace in the conversation with its results masked
    (:attr:`CarryOver.MASKED`), before its answer. A failed run files nothing yet: it keeps its
    buffer, and files it when it is resumed and ends."""

    def can_process(self, state: AgentState) -> bool:
        return True

    def process(self, state: AgentState, next: Next) -> AgentState:
        after = next(state)
        outcome = after.continuation_outcome
        if outcome is None or outcome.should_continue or after.status is AgentStatus.FAILED:
            return after
        return after.file(AgentState.DEFAULT_SECTION, carried_trace(after.execution_buffer()))
