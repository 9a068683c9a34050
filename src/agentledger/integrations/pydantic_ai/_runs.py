"""A save's new messages as runs of the ledger, recorded through ``ledger.turn`` in the
transaction that stores the record and its entries (a save that loses the race records no run).

pydantic-ai saves a conversation after an agent run, so each save's new messages are read in
order: a request with a user prompt (as text) begins a run (its user message); a response with
tool calls is a step, recorded with the tool returns and retry prompts that answer its calls
(its tool executions); a response without tool calls is the answer, which ends the run
``completed``. A run still open when the save's messages end (deferred tool calls awaiting
approval or results, or no answer) is ended ``interrupted``: what a later save brings before
the next user prompt resumes outside it, kept by the entries only. A message that fits none of
these (a system prompt, instructions, a prompt of content blocks) is kept by its entry only.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ..._recording import Turn, TurnStep
from ..._values import ToolCall, Usage
from ...ledger import Ledger

AGENT_NAME = "pydantic-ai"
"""The agent name of the runs a conversation's saves are recorded as."""

UNANSWERED = "the pydantic-ai run was saved before an answer (deferred tool calls, or none)"


class _Projection:
    """The run one save is recording, and the step waiting for its tool returns."""

    def __init__(self, ledger: Ledger, conversation_id: str) -> None:
        self._ledger = ledger
        self._conversation_id = conversation_id
        self._turn: Turn | None = None
        self._step: TurnStep | None = None

    def message(self, message: ModelMessage) -> None:
        if isinstance(message, ModelRequest):
            self._request(message)
        else:
            self._response(message)

    def close(self) -> None:
        """End the run left open: the save holds no answer to it."""
        if self._turn is not None and self._turn.result is None:
            self._turn.interrupt(UNANSWERED)
        self._turn, self._step = None, None

    def _request(self, message: ModelRequest) -> None:
        prompt = _prompt_of(message)
        if prompt is not None:
            self.close()
            self._turn = self._ledger.turn(
                prompt, conversation_id=self._conversation_id, agent_name=AGENT_NAME
            )
            self._turn.begin()
            return
        step = self._step
        if step is None:
            return
        for part in message.parts:
            if isinstance(part, ToolReturnPart | RetryPromptPart) and (
                part.tool_call_id in step.waiting_for
            ):
                if isinstance(part, RetryPromptPart):
                    step.tool_result(part.tool_call_id, part.model_response(), is_error=True)
                else:
                    step.tool_result(part.tool_call_id, part.model_response_str())
        if step.recorded:
            self._step = None

    def _response(self, message: ModelResponse) -> None:
        turn = self._turn
        if turn is None or turn.result is not None or self._step is not None:
            return
        text = "".join(part.content for part in message.parts if isinstance(part, TextPart))
        calls = [
            ToolCall(id=part.tool_call_id, name=part.tool_name, arguments=part.args_as_dict())
            for part in message.parts
            if isinstance(part, ToolCallPart)
        ]
        usage = Usage(
            input_tokens=message.usage.input_tokens,
            output_tokens=message.usage.output_tokens,
            cache_read_tokens=message.usage.cache_read_tokens,
            cache_write_tokens=message.usage.cache_write_tokens,
        )
        if calls:
            self._step = turn.step(
                text or None,
                tool_calls=calls,
                usage=usage,
                model=message.model_name,
                finish_reason=message.finish_reason,
            )
        elif text.strip():
            turn.answer(
                text, usage=usage, model=message.model_name, finish_reason=message.finish_reason
            )


def record_runs(ledger: Ledger, conversation_id: str, messages: Sequence[ModelMessage]) -> None:
    """Record ``messages``, new in conversation ``conversation_id``, as its runs (see the
    module); called in the save's transaction."""
    projection = _Projection(ledger, conversation_id)
    for message in messages:
        projection.message(message)
    projection.close()


def _prompt_of(message: ModelRequest) -> str | None:
    """The user prompt ``message`` brings, as text; None when it brings none."""
    prompts = [part.content for part in message.parts if isinstance(part, UserPromptPart)]
    if len(prompts) != 1 or not isinstance(prompts[0], str) or not prompts[0].strip():
        return None
    return prompts[0]
