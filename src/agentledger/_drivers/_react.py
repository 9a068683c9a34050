"""``ReActDriver``: tools for models without native tool calling.

The model is asked, over plain chat, for one structured decision per step, as one JSON object:
a thought, then either a tool call or a final answer. A valid tool call is filed exactly as a
native one would be (an assistant message with ``tool_calls``, then the tool result), so the
trace, the ledger and the continuation criteria see no difference; only the final answer reaches
the conversation. A decision that cannot be parsed is fed back to the model as an error
observation, a bounded number of times in a row.

What the model is sent is the state's messages rendered as plain chat: a tool call becomes the
JSON decision that made it, a tool result a user message ``Observation from <tool>: <result>``,
a malformed decision the model's text followed by ``Observation: Error: <what was wrong>``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator

from .._loop._driver import StepRequest
from .._values import (
    LLM,
    REACT_METADATA_KEY,
    AgentState,
    AgentStep,
    InferenceRequest,
    InferenceResponse,
    Message,
    Messages,
    ModelSettings,
    Role,
    StepType,
    ToolCall,
    ToolSchema,
    new_id,
    output_error,
)
from ..errors import ConfigurationError, UnstorableTextError
from ._model_call import (
    ModelAbilities,
    ask_model,
    checked_response,
    execute_tools,
    failed_step,
    inference_messages,
    step_from_response,
)

DEFAULT_MAX_INVALID_DECISIONS = 2

ACTION_FORM = (
    '{"thought": "<your reasoning, briefly>", '
    '"action": {"tool": "<tool name>", "arguments": {<the tool\'s arguments>}}}'
)
ANSWER_FORM = (
    '{"thought": "<your reasoning, briefly>", "final_answer": "<your answer to the user>"}'
)


# --- the decision ---------------------------------------------------------------------------------


class _Action(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    tool: str = Field(min_length=1)
    arguments: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("arguments", mode="before")
    @classmethod
    def _decode_text(cls, value: object) -> object:
        """Arguments sent as a JSON string (as some models do) are decoded."""
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError:
                return value
        return value


class _Decision(BaseModel):
    """One step's decision as the model sent it: a thought, then an action or an answer."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    thought: str = ""
    action: _Action | None = None
    final_answer: str | None = None


@dataclass(frozen=True)
class _Malformed:
    """A reply that is not a valid decision: what was wrong, and what to send instead."""

    error: str


_FENCE = re.compile(r"```[\w-]*[ \t]*\n?(.*?)```", re.DOTALL)


def _parse_decision(text: str, *, final: bool = False) -> _Decision | _Malformed:
    """The decision in ``text``: the outermost ``{...}`` (inside a code fence when there is
    one), validated. ``final``: only a final answer is asked for."""
    candidate = _json_object_text(text)
    if candidate is None:
        return _Malformed(f"Your reply contains no JSON object. {_what_to_send(final)}")
    try:
        value = json.loads(candidate)
    except json.JSONDecodeError as exc:
        return _Malformed(
            f"Your reply is not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno}). "
            f"{_what_to_send(final)}"
        )
    try:
        decision = _Decision.model_validate(value)
    except ValidationError as exc:
        return _Malformed(f"Your decision is not valid: {_problems(exc)}. {_what_to_send(final)}")
    return _checked(decision, value, final)


def _json_object_text(text: str) -> str | None:
    """The outermost ``{...}`` of the first code fence that has one, or else of the text."""
    for body in (*(fence.group(1) for fence in _FENCE.finditer(text)), text):
        start, end = body.find("{"), body.rfind("}")
        if 0 <= start < end:
            return body[start : end + 1]
    return None


def _checked(decision: _Decision, value: dict[str, object], final: bool) -> _Decision | _Malformed:
    has_action, has_answer = decision.action is not None, decision.final_answer is not None
    if has_action and has_answer:
        problem = 'it has both "action" and "final_answer"; send one of them'
    elif has_action or has_answer:
        return decision
    else:
        keys = ", ".join(json.dumps(k) for k in value) or "none"
        problem = f'it has neither "action" nor "final_answer" (its keys: {keys})'
    return _Malformed(f"Your decision is not valid: {problem}. {_what_to_send(final)}")


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or 'the decision'}: {error['msg']}"
        for error in exc.errors(include_url=False)
    )


def _what_to_send(final: bool) -> str:
    if final:
        return f"Reply with exactly one JSON object and nothing else: {ANSWER_FORM}"
    return (
        "Reply with exactly one JSON object and nothing else, either "
        f"{ACTION_FORM} or {ANSWER_FORM}"
    )


def decision_text(thought: str | None, call: ToolCall) -> str:
    """The canonical JSON decision that makes ``call``."""
    action = {"tool": call.name, "arguments": dict(call.arguments)}
    return json.dumps({"thought": thought or "", "action": action}, ensure_ascii=False)


# --- the prompt and the plain chat ----------------------------------------------------------------


def react_instructions(tools: Sequence[ToolSchema]) -> str:
    """How to reply, and the tools with the JSON schemas of their parameters."""
    if not tools:
        return (
            "You cannot call tools. Reply with exactly one JSON object and nothing else:\n"
            f"{ANSWER_FORM}"
        )
    return "\n".join(
        [
            "You can call tools. At each step, reply with exactly one JSON object and nothing "
            "else, in one of two forms.",
            "",
            "To call a tool (one tool per reply):",
            ACTION_FORM,
            "",
            "To answer the user, once you have what you need:",
            ANSWER_FORM,
            "",
            'The result of a tool call comes back as a message "Observation from <tool name>: '
            '<result>". A message "Observation: Error: ..." means your last reply could not be '
            "used, and says why.",
            "",
            "Tools:",
            *(_tool_lines(schema) for schema in tools),
        ]
    )


def _tool_lines(schema: ToolSchema) -> str:
    parameters = json.dumps(schema.parameters, ensure_ascii=False)
    return f"- {schema.name}: {schema.description}\n  Parameters (JSON schema): {parameters}"


def react_system_prompt(system_prompt: str | None, tools: Sequence[ToolSchema]) -> str:
    """The agent's system prompt, if any, followed by the ReAct instructions."""
    instructions = react_instructions(tools)
    return f"{system_prompt}\n\n{instructions}" if system_prompt else instructions


def plain_chat(messages: Iterable[Message]) -> Messages:
    """``messages`` as a model without tool calling can read them: tool calls as JSON decisions,
    tool results and errors as user observations."""
    return Messages.of(*(rendered for m in messages for rendered in _plain(m)))


def _plain(message: Message) -> tuple[Message, ...]:
    if message.role is Role.TOOL:
        tool_name = message.name or "the tool"
        return (Message.user(f"Observation from {tool_name}: {message.content}"),)
    if message.tool_calls:
        decisions = "\n".join(decision_text(message.reasoning, c) for c in message.tool_calls)
        return (_assistant_text(message, decisions),)
    error = output_error(message)
    if error is not None:
        return (
            _assistant_text(message, message.content),
            Message.user(f"Observation: Error: {error}"),
        )
    return (message,)


def _assistant_text(message: Message, content: str) -> Message:
    return Message(
        id=message.id, role=Role.ASSISTANT, content=content, created_at=message.created_at
    )


# --- the driver -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReActDriver:
    """Tools for a model without native tool calling, over plain chat.

    Each step asks the model for one JSON decision, ``{"thought": ..., "action": {"tool": ...,
    "arguments": {...}}}`` or ``{"thought": ..., "final_answer": ...}``, with the tools and the
    JSON schemas of their parameters listed after the agent's system prompt; no native tool
    schemas are sent. A tool call is filed and run like a native one (an unknown tool or invalid
    arguments become an error result the model sees), and only the final answer reaches the
    conversation; the thought is kept as the step's reasoning.

    A reply that is not a valid decision makes a step of type ``invalid_output``: the error is fed
    back to the model, which tries again. After ``max_invalid_decisions`` such steps in a row,
    the next one ends the run as ``failed`` (a step of type ``error``), its buffer kept. In a
    final-response step only an answer is asked for, and a reply that is not one is taken as the
    answer as it is. A failed model call ends the run as ``failed``, as with
    :class:`~agentledger.ToolCallingDriver`, and so does a decision holding text the ledger
    cannot store (a NUL character or a lone surrogate, sent as such or as a JSON escape).

    >>> builder = AgentBuilder().with_driver(ReActDriver(llm))  # doctest: +SKIP
    """

    llm: LLM
    _: dataclasses.KW_ONLY
    model: str | None = None
    settings: ModelSettings = field(default_factory=ModelSettings)
    max_invalid_decisions: int = DEFAULT_MAX_INVALID_DECISIONS
    _abilities: ModelAbilities = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Decided once, here: whether the model can be awaited (its text is never told).
        object.__setattr__(self, "_abilities", ModelAbilities.of(self.llm))
        if self.max_invalid_decisions < 0:
            raise ConfigurationError(
                f"ReActDriver(max_invalid_decisions={self.max_invalid_decisions}): give 0 or "
                "more, the number of malformed decisions in a row the model is told about and "
                "may correct before the run fails."
            )

    def perform_step(self, state: AgentState, request: StepRequest) -> AgentStep:
        messages = inference_messages(state, request)
        try:
            inference = self._inference(state, request)
            # Its text is a JSON decision, not words for the user: it is not told as it comes.
            asked = ask_model(self._abilities, inference, state, request, tell=False)
            response = checked_response(asked)
        except Exception as exc:  # the run fails and keeps its buffer; it can be continued
            return failed_step(exc, messages, request)
        final = request.is_final_response
        decision = _parse_decision(response.content, final=final)
        if final:
            decided = _answered(response, decision)
        elif isinstance(decision, _Malformed):
            return self._rejected(response, decision, state, messages, request)
        else:
            decided = _decided(response, decision)
        try:  # JSON escapes ("\u0000") can decode to text the reply itself did not hold
            checked_response(decided)
        except UnstorableTextError as exc:
            return failed_step(exc, messages, request)
        executions = execute_tools(decided, state, request)
        return step_from_response(decided, executions, messages, request, request.clock())

    def _inference(self, state: AgentState, request: StepRequest) -> InferenceRequest:
        prompt = react_system_prompt(request.system_prompt, request.tools.schemas())
        prompted = dataclasses.replace(request, system_prompt=prompt)
        return InferenceRequest(
            messages=plain_chat(inference_messages(state, prompted)),
            tools=(),
            model=self.model,
            settings=self.settings,
        )

    def _rejected(
        self,
        response: InferenceResponse,
        malformed: _Malformed,
        state: AgentState,
        messages: Messages,
        request: StepRequest,
    ) -> AgentStep:
        """The step of a malformed decision: ``invalid_output``, or ``error`` once the model has
        had its ``max_invalid_decisions`` corrections."""
        rejected = response.model_copy(
            update={
                "tool_calls": (),
                "metadata": _react_metadata(response, error=malformed.error),
            }
        )
        step = step_from_response(rejected, (), messages, request, request.clock())
        in_a_row = _invalid_in_a_row(state) + 1
        if in_a_row <= self.max_invalid_decisions:
            return step.model_copy(update={"step_type": StepType.INVALID_OUTPUT})
        return step.model_copy(
            update={"step_type": StepType.ERROR, "error": _too_many(in_a_row, malformed)}
        )


def _decided(response: InferenceResponse, decision: _Decision) -> InferenceResponse:
    """``response`` as the decision says: a tool call, or an answer."""
    update: dict[str, object] = {
        "reasoning": decision.thought or None,
        "metadata": _react_metadata(response),
    }
    if decision.action is not None:
        call = ToolCall(id=new_id(), name=decision.action.tool, arguments=decision.action.arguments)
        update.update(content="", tool_calls=(call,))
    else:
        update.update(content=decision.final_answer or "", tool_calls=())
    return response.model_copy(update=update)


def _answered(response: InferenceResponse, decision: _Decision | _Malformed) -> InferenceResponse:
    """The answer of a final-response step: the decision's, or else the reply as it is."""
    if isinstance(decision, _Decision) and decision.final_answer is not None:
        return _decided(response, decision)
    return response.model_copy(
        update={
            "content": response.content.strip(),
            "tool_calls": (),
            "metadata": _react_metadata(response),
        }
    )


def _react_metadata(
    response: InferenceResponse, *, error: str | None = None
) -> dict[str, JsonValue]:
    react: dict[str, JsonValue] = {"raw": response.content}
    if error is not None:
        react["error"] = error
    return {**response.metadata, REACT_METADATA_KEY: react}


def _invalid_in_a_row(state: AgentState) -> int:
    """How many steps at the end of the run are malformed decisions."""
    count = 0
    for execution in reversed(state.step_executions):
        if execution.step.step_type is not StepType.INVALID_OUTPUT:
            break
        count += 1
    return count


def _too_many(in_a_row: int, malformed: _Malformed) -> str:
    return (
        f"the model gave {in_a_row} malformed ReAct decisions in a row (the last: "
        f"{malformed.error}). Use a model that follows the decision format, allow it more "
        "corrections with ReActDriver(max_invalid_decisions=...), or use ToolCallingDriver with "
        "a model that supports native tool calling."
    )
