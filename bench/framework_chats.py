"""Each framework's conversation, driven by its own runner through section 6's turn on a
scripted model, kept by one of its stores (section 18, ``bench/frameworks.py``, runs them): the
OpenAI Agents SDK's ``Runner.run`` on ``SQLiteSession`` or ``LedgerSession``; pydantic-ai's
``Agent.run`` loading and saving the conversation as JSON in a file, through
``InMemoryConversationStore`` or ``LedgerConversationStore``; ADK's ``Runner.run_async`` on
``SqliteSessionService`` or ``LedgerSessionService``. Each chat's ``prepare`` gives the next
turn, ready to run on the worker's event loop, and ``held`` what its store reads back.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

from ._common import (
    ANSWER,
    TOOL_NAME,
    TOOL_STEPS,
    USAGE,
    as_synchronous,
    call_arguments,
    lookup,
    question,
)

AGENTS_SQLITE, AGENTS_LEDGER = "OpenAI Agents SQLiteSession", "agentledger LedgerSession"
AGENTS_WHOLE = "agentledger LedgerSession, separate_trace=False"
PAI_JSON, PAI_LEDGER = "pydantic-ai JSON file", "agentledger LedgerConversationStore"
PAI_MEMORY = "pydantic-ai InMemoryConversationStore"
ADK_SQLITE, ADK_LEDGER = "ADK SqliteSessionService", "agentledger LedgerSessionService"
CONVERSATION, APP, USER = "chat", "bench", "user"


def _call_id(turn: int, step: int) -> str:
    return f"t{turn}-s{step}"


def _durable_write(path: Path, data: bytes) -> None:
    """``data`` as the whole of ``path``, surviving a crash as a SQLite commit does: written to
    a new file, fsynced, then renamed over the old one."""
    new = path.with_name(path.name + ".new")
    with new.open("wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(new, path)


def _ledger(path: Path, synchronous: str) -> Any:
    from agentledger.ledger import Ledger

    return Ledger.open(path, synchronous=as_synchronous(synchronous))


# -- the OpenAI Agents SDK ----------------------------------------------------------------------


def agents_model(turn: int) -> Any:
    """The SDK's ``Model`` answering one turn from its script: three calls, then the answer."""
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    outputs: list[Any] = [
        ResponseFunctionToolCall(
            type="function_call",
            name=TOOL_NAME,
            arguments=json.dumps(call_arguments(s, 0)),
            call_id=_call_id(turn, s),
            id=f"fc_{turn}_{s}",
            status="completed",
        )
        for s in range(TOOL_STEPS)
    ]
    text = ResponseOutputText(type="output_text", text=ANSWER, annotations=[])
    outputs.append(
        ResponseOutputMessage(
            id=f"msg_{turn}", type="message", role="assistant", status="completed", content=[text]
        )
    )
    total = USAGE.input_tokens + USAGE.output_tokens

    class Scripted(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            usage = Usage(
                requests=1,
                input_tokens=USAGE.input_tokens,
                output_tokens=USAGE.output_tokens,
                total_tokens=total,
            )
            return ModelResponse(output=[outputs.pop(0)], usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            raise NotImplementedError("the benchmark runs without streaming")

    return Scripted()


class AgentsChat:
    """One session on a file: ``SQLiteSession`` or ``LedgerSession`` (whose run hooks record
    each model call's usage). ``LedgerSession`` gives the model the user's messages and the
    answers, the tool calls kept in the runs' steps; with ``separate_trace=False``
    (:data:`AGENTS_WHOLE`) every item, as ``SQLiteSession`` does."""

    def __init__(self, path: Path, kind: str, synchronous: str) -> None:
        from agents import RunConfig, SQLiteSession, function_tool

        self.run_config = RunConfig(tracing_disabled=True)
        self.tool = function_tool(lookup.function)
        self.hooks: Any = None
        self.handle: Any = None
        if kind != AGENTS_SQLITE:
            from agentledger.integrations.openai_agents import LedgerSession

            self.handle = _ledger(path, synchronous)
            separate = kind == AGENTS_LEDGER
            self.session: Any = LedgerSession(CONVERSATION, self.handle, separate_trace=separate)
            self.hooks = self.session.hooks
        else:
            self.session = SQLiteSession(CONVERSATION, str(path))

    def prepare(self, turn: int) -> Callable[[], Coroutine[Any, Any, object]]:
        from agents import Agent, Runner

        agent = Agent(name=APP, tools=[self.tool], model=agents_model(turn))
        more = {} if self.hooks is None else {"hooks": self.hooks}
        text = question(turn)
        return lambda: Runner.run(
            agent, text, session=self.session, run_config=self.run_config, **more
        )

    async def held(self) -> int:
        return len(await self.session.get_items())

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
        else:
            self.session.close()


# -- pydantic-ai --------------------------------------------------------------------------------


def _pai_reply(messages: list[Any], info: Any) -> Any:
    """pydantic-ai's ``FunctionModel`` function: ``lookup`` until three results follow the
    turn's prompt, then the answer."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.usage import RequestUsage

    turns = returns = 0
    for message in messages:
        for part in message.parts:
            if part.part_kind == "user-prompt":
                turns, returns = turns + 1, 0
            returns += isinstance(part, ToolReturnPart)
    usage = RequestUsage(input_tokens=USAGE.input_tokens, output_tokens=USAGE.output_tokens)
    if returns < TOOL_STEPS:
        call = ToolCallPart(
            TOOL_NAME, call_arguments(returns, 0), tool_call_id=_call_id(turns, returns)
        )
        return ModelResponse(parts=[call], usage=usage, model_name="scripted")
    return ModelResponse(parts=[TextPart(ANSWER)], usage=usage, model_name="scripted")


class PydanticChat:
    """One conversation: loaded before each ``Agent.run`` and saved after it, through a
    ``ConversationStore`` (the ledger's, or pydantic-ai's in memory), or as
    ``ConversationTypeAdapter`` JSON in a file of its own (``path`` with ``.json``)."""

    def __init__(self, path: Path, kind: str, synchronous: str) -> None:
        from pydantic_ai import Agent
        from pydantic_ai.models.function import FunctionModel

        self.agent = Agent(FunctionModel(_pai_reply))
        self.agent.tool_plain(lookup.function)
        self.file, self.handle = path.with_suffix(".json"), None
        self.store: Any = None
        if kind == PAI_LEDGER:
            from agentledger.integrations.pydantic_ai import LedgerConversationStore

            self.handle = _ledger(path, synchronous)
            self.store = LedgerConversationStore(self.handle)
        elif kind == PAI_MEMORY:
            from pydantic_ai.conversation_store import InMemoryConversationStore

            self.store = InMemoryConversationStore()

    async def _load(self) -> Any:
        from pydantic_ai.conversation import Conversation, ConversationTypeAdapter

        if self.store is not None:
            loaded = await self.store.load(CONVERSATION)
        elif self.file.exists():
            loaded = ConversationTypeAdapter.validate_json(self.file.read_bytes())
        else:
            loaded = None
        return loaded or Conversation(conversation_id=CONVERSATION)

    async def _turn(self, text: str) -> None:
        from pydantic_ai.conversation import ConversationTypeAdapter
        from pydantic_ai.usage import UsageLimits

        # A conversation carries its usage into the run, and the run's default limit (50
        # requests) counts it: a long conversation needs none.
        limits = UsageLimits(request_limit=None)
        conversation = await self._load()
        result = await self.agent.run(text, conversation=conversation, usage_limits=limits)
        if self.store is not None:
            await self.store.save(result)
        else:
            _durable_write(self.file, ConversationTypeAdapter.dump_json(result.conversation))

    def prepare(self, turn: int) -> Callable[[], Coroutine[Any, Any, object]]:
        text = question(turn)
        return lambda: self._turn(text)

    async def held(self) -> int:
        return len((await self._load()).messages)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


# -- Google ADK ---------------------------------------------------------------------------------


def _adk_agent() -> Any:
    """An ``LlmAgent`` on a scripted ``BaseLlm``: ``lookup`` until three results follow the
    last user text, then the answer."""
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    class Scripted(BaseLlm):
        model: str = "scripted"

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            returns = 0
            for content in llm_request.contents:
                for part in content.parts or []:
                    if part.text and content.role == "user":
                        returns = 0
                    returns += part.function_response is not None
            usage = types.GenerateContentResponseUsageMetadata(
                prompt_token_count=USAGE.input_tokens,
                candidates_token_count=USAGE.output_tokens,
                total_token_count=USAGE.input_tokens + USAGE.output_tokens,
            )
            if returns < TOOL_STEPS:
                part = types.Part.from_function_call(
                    name=TOOL_NAME, args=call_arguments(returns, 0)
                )
            else:
                part = types.Part(text=ANSWER)
            content = types.Content(role="model", parts=[part])
            yield LlmResponse(content=content, usage_metadata=usage)

    return LlmAgent(name=APP, model=Scripted(), tools=[lookup.function], instruction="Look up.")


class AdkChat:
    """One session of an ADK ``Runner``: ``SqliteSessionService`` or ``LedgerSessionService``."""

    def __init__(self, path: Path, ledger: bool, synchronous: str, loop: Any) -> None:
        from google.adk.runners import Runner

        self.handle: Any = None
        if ledger:
            from agentledger.integrations.adk import LedgerSessionService

            self.handle = _ledger(path, synchronous)
            self.service: Any = LedgerSessionService(self.handle)
        else:
            from google.adk.sessions.sqlite_session_service import SqliteSessionService

            self.service = SqliteSessionService(str(path))
        self.runner = Runner(app_name=APP, agent=_adk_agent(), session_service=self.service)
        made = self.service.create_session(app_name=APP, user_id=USER, session_id=CONVERSATION)
        loop.run_until_complete(made)

    def prepare(self, turn: int) -> Callable[[], Coroutine[Any, Any, object]]:
        from google.genai import types

        message = types.Content(role="user", parts=[types.Part(text=question(turn))])

        async def run() -> None:
            events = self.runner.run_async(
                user_id=USER, session_id=CONVERSATION, new_message=message
            )
            async for _ in events:
                pass

        return run

    async def held(self) -> int:
        got = await self.service.get_session(app_name=APP, user_id=USER, session_id=CONVERSATION)
        return 0 if got is None else len(got.events)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
