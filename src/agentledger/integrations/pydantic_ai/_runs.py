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

What the runs recorded is said back, message by message (:data:`Rows`): the parts of each
message a row holds (the prompt in the user message, the answer's text in the answer, a
step's text in its step, a tool call's arguments, given as a dict, and its text return in its
tool execution), so that the entry refers to that row instead of holding them again.
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

Rows = dict[int, dict[int, str]]
"""The rows holding the text of the save's messages: by message (its index among the save's
new messages), by part (its index in the message), the row's id."""


class _Projection:
    """The run one save is recording, and the step waiting for its tool returns."""

    def __init__(self, ledger: Ledger, conversation_id: str) -> None:
        self._ledger = ledger
        self._conversation_id = conversation_id
        self._turn: Turn | None = None
        self._step: TurnStep | None = None
        self.rows: Rows = {}
        self._index = 0
        self._asked: tuple[int, int | None] = (0, None)
        """The step's message and the part holding its text (None: it has none)."""
        self._executed: list[tuple[int, int, str]] = []
        """The parts the step's tool executions will hold (its calls' arguments, their text
        returns): message, part, call id."""

    def message(self, index: int, message: ModelMessage) -> None:
        self._index = index
        if isinstance(message, ModelRequest):
            self._request(message)
        else:
            self._response(message)

    def close(self) -> None:
        """End the run left open: the save holds no answer to it."""
        if self._turn is not None and self._turn.result is None:
            self._turn.interrupt(UNANSWERED)
        self._turn, self._step, self._executed = None, None, []

    def _request(self, message: ModelRequest) -> None:
        prompt = _prompt_of(message)
        if prompt is not None:
            self.close()
            self._turn = self._ledger.turn(
                prompt[1], conversation_id=self._conversation_id, agent_name=AGENT_NAME
            )
            self._turn.begin()
            self._held(prompt[0], self._turn.user_message.id)
            return
        step = self._step
        if step is None:
            return
        for n, part in enumerate(message.parts):
            if isinstance(part, ToolReturnPart | RetryPromptPart) and (
                part.tool_call_id in step.waiting_for
            ):
                self._tool_result(step, n, part)
        if step.recorded:
            self._step_recorded(step)

    def _tool_result(self, step: TurnStep, n: int, part: ToolReturnPart | RetryPromptPart) -> None:
        if isinstance(part, RetryPromptPart):
            step.tool_result(part.tool_call_id, part.model_response(), is_error=True)
            return
        shown = part.model_response_str()
        step.tool_result(part.tool_call_id, shown)
        if part.content == shown:
            self._executed.append((self._index, n, part.tool_call_id))

    def _step_recorded(self, step: TurnStep) -> None:
        """The step is recorded with its last tool result: its rows hold their parts now."""
        executions = {e.tool_call.id: e.id for e in step.executions()}
        for index, n, call_id in self._executed:
            self._held(n, executions[call_id], index)
        asked, text_part = self._asked
        called = step.step.assistant_message
        if text_part is not None and called is not None:
            self._held(text_part, called.id, asked)
        self._step, self._executed = None, []

    def _held(self, part: int, row_id: str, index: int | None = None) -> None:
        """Part ``part`` of message ``index`` (the one being read) is held by a row."""
        self.rows.setdefault(self._index if index is None else index, {})[part] = row_id

    def _response(self, message: ModelResponse) -> None:
        turn = self._turn
        if turn is None or turn.result is not None or self._step is not None:
            return
        texts = [(n, part) for n, part in enumerate(message.parts) if isinstance(part, TextPart)]
        text = "".join(part.content for _, part in texts)
        text_part = texts[0][0] if len(texts) == 1 and text else None
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
            self._asked = (self._index, text_part)
            self._executed = [
                (self._index, n, part.tool_call_id)
                for n, part in enumerate(message.parts)
                if isinstance(part, ToolCallPart) and isinstance(part.args, dict)
            ]
        elif text.strip():
            turn.answer(
                text, usage=usage, model=message.model_name, finish_reason=message.finish_reason
            )
            answer = turn.state.messages().last()
            if answer is not None and text_part is not None:
                self._held(text_part, answer.id)


def record_runs(ledger: Ledger, conversation_id: str, messages: Sequence[ModelMessage]) -> Rows:
    """Record ``messages``, new in conversation ``conversation_id``, as its runs (see the
    module); called in the save's transaction. Returns the rows that hold their texts."""
    projection = _Projection(ledger, conversation_id)
    for index, message in enumerate(messages):
        projection.message(index, message)
    projection.close()
    return projection.rows


def _prompt_of(message: ModelRequest) -> tuple[int, str] | None:
    """The user prompt ``message`` brings, as text, with the part that holds it; None when it
    brings none."""
    prompts = [(n, p) for n, p in enumerate(message.parts) if isinstance(p, UserPromptPart)]
    if len(prompts) != 1:
        return None
    n, part = prompts[0]
    if not isinstance(part.content, str) or not part.content.strip():
        return None
    return n, part.content
