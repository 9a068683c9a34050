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
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import ConfigurationError
from .messages import Message, Messages, Role
from .processors import Next
from .state import AgentState

CHARS_PER_TOKEN = 4
"""Characters per token in :func:`estimate_tokens`."""
TOKENS_PER_MESSAGE = 4
"""Tokens :func:`estimate_tokens` adds per message for its role and framing."""
MASKED_KEY = "masked"
"""Where a masked tool result keeps what it replaced, in ``Message.metadata``."""


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
        response = step.inference_response
        if response is None or response.usage.input_tokens <= 0 or not step.input_messages:
            continue
        return response.usage.input_tokens / estimate_tokens(step.input_messages)
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
    masking, conversation messages when summarizing)."""

    max_tokens: int
    keep_recent: int = 3

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
        if masking.masked:
            section = state.store.section(state.EXECUTION_BUFFER_SECTION)
            state = state.with_message_store(section.set_messages(masking.messages))
        return next(state)

    def __repr__(self) -> str:
        return f"ObservationMasking({self.budget!r})"
