"""Section 18: three agent frameworks, each driving the same scripted turn through its own runner,
their conversation kept by the store a user of the framework reaches for first and by the ledger's
store for that framework.

- The OpenAI Agents SDK: ``Runner.run`` on a scripted ``Model``, with ``SQLiteSession`` on a file
  (the store its documentation starts from) or ``LedgerSession``.
- pydantic-ai: ``Agent.run`` on a ``FunctionModel``, the conversation loaded before the run and
  saved after it; pydantic-ai ships no store on disk, so its usual persistence is the whole
  conversation as ``ConversationTypeAdapter`` JSON in a file of its own (written to a new file,
  fsynced and renamed over the old one, as durable as a SQLite commit), against
  ``LedgerConversationStore``; its ``InMemoryConversationStore`` is timed beside them (no bytes
  on disk).
- Google ADK: ``Runner.run_async`` on a scripted ``BaseLlm``, with ``SqliteSessionService`` on a
  file (what ``adk run`` and ``adk web`` use by default) or ``LedgerSessionService``.

A turn is section 6's: a user message, three model calls each calling ``lookup`` (a ~1 KB
result), an answer, with usage on every model call. Each system at each history length is a
worker process of its own (section 6's :func:`~bench.recording.timed_turns`): its history built
untimed, its file's size taken, then one timed turn of each in turn, the order rotating.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._common import (
    ANSWER,
    TOOL_NAME,
    TOOL_STEPS,
    USAGE,
    Samples,
    Sizes,
    call_arguments,
    lookup,
    ms,
    question,
)
from ._raw import checkpointed_size
from ._report import Row, Section, judged, ratio
from .recording import timed_turns

AGENTS_SQLITE, AGENTS_LEDGER = "OpenAI Agents SQLiteSession", "agentledger LedgerSession"
PAI_JSON, PAI_LEDGER = "pydantic-ai JSON file", "agentledger LedgerConversationStore"
PAI_MEMORY = "pydantic-ai InMemoryConversationStore"
ADK_SQLITE, ADK_LEDGER = "ADK SqliteSessionService", "agentledger LedgerSessionService"


@dataclass(frozen=True)
class Framework:
    name: str
    default: str
    ledger: str
    others: tuple[str, ...]
    """Systems timed beside the pair, held against nothing."""
    needs: tuple[tuple[str, str], ...]
    """Each module the systems import and what to install when it is missing."""


FRAMEWORKS = (
    Framework(
        "OpenAI Agents SDK",
        AGENTS_SQLITE,
        AGENTS_LEDGER,
        (),
        (
            ("agents", "the openai-agents extra"),
            ("agentledger.integrations.openai_agents", "an agentledger with LedgerSession"),
        ),
    ),
    Framework(
        "pydantic-ai",
        PAI_JSON,
        PAI_LEDGER,
        (PAI_MEMORY,),
        (
            ("pydantic_ai.conversation_store", "pydantic-ai-slim 2.66 or later"),
            (
                "agentledger.integrations.pydantic_ai",
                "an agentledger with LedgerConversationStore",
            ),
        ),
    ),
    Framework(
        "Google ADK",
        ADK_SQLITE,
        ADK_LEDGER,
        (),
        (
            ("google.adk", "google-adk"),
            ("agentledger.integrations.adk", "an agentledger with LedgerSessionService"),
        ),
    ),
)
HELD = 2 + 2 * TOOL_STEPS
"""What a store keeps of a turn: the user's message, each call and its result, the answer
(items, messages or events); ``LedgerSession`` keeps the user's message and the answer as the
session's items, the calls and results in the run's steps (its default, ``separate_trace``)."""
HELD_BY = {AGENTS_LEDGER: 2}
CONVERSATION, APP, USER = "chat", "bench", "user"
TURN_TARGET = "≤ 1.2x"


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

    return Ledger.open(path, synchronous=synchronous)


# -- the OpenAI Agents SDK ----------------------------------------------------------------------


def _agents_model(turn: int) -> Any:
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
    each model call's usage)."""

    def __init__(self, path: Path, ledger: bool, synchronous: str) -> None:
        from agents import RunConfig, SQLiteSession, function_tool

        self.run_config = RunConfig(tracing_disabled=True)
        self.tool = function_tool(lookup.function)
        self.hooks: Any = None
        self.handle: Any = None
        if ledger:
            from agentledger.integrations.openai_agents import LedgerSession

            self.handle = _ledger(path, synchronous)
            self.session: Any = LedgerSession(CONVERSATION, self.handle)
            self.hooks = self.session.hooks
        else:
            self.session = SQLiteSession(CONVERSATION, str(path))

    def prepare(self, turn: int) -> Callable[[], Coroutine[Any, Any, object]]:
        from agents import Agent, Runner

        agent = Agent(name=APP, tools=[self.tool], model=_agents_model(turn))
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
        self.file, self.handle, self.store = path.with_suffix(".json"), None, None
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
        ) -> AsyncIterator[LlmResponse]:
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


# -- a worker's system --------------------------------------------------------------------------


class Chat:
    """One conversation of one system (``kind``, a name of :data:`FRAMEWORKS`) in its file at
    ``path``, growing a turn at a time on one event loop, kept for the worker's life (as a
    long-lived app keeps its store)."""

    def __init__(self, path: str, kind: str, synchronous: str) -> None:
        self.path, self.kind, self.turns, self.grown = Path(path), kind, 0, 0
        self.loop = asyncio.new_event_loop()
        self.chat: AgentsChat | PydanticChat | AdkChat
        if kind in (AGENTS_SQLITE, AGENTS_LEDGER):
            self.chat = AgentsChat(self.path, kind == AGENTS_LEDGER, synchronous)
        elif kind in (PAI_JSON, PAI_LEDGER, PAI_MEMORY):
            self.chat = PydanticChat(self.path, kind, synchronous)
        else:
            self.chat = AdkChat(self.path, kind == ADK_LEDGER, synchronous, self.loop)

    def _timed(self, work: Callable[[], Coroutine[Any, Any, object]]) -> float:
        started = time.perf_counter()
        self.loop.run_until_complete(work())
        self.turns += 1
        return time.perf_counter() - started

    def grow(self, turns: int) -> float:
        """``turns`` turns; the file's size is then taken (:meth:`size_grown`)."""
        spent = sum(self._timed(self.chat.prepare(self.turns)) for _ in range(turns))
        self.grown = self._size()
        return spent

    def turn(self) -> float:
        """One more turn, its seconds (its model script built, and the garbage of earlier turns
        collected, untimed)."""
        work = self.chat.prepare(self.turns)
        gc.collect()
        return self._timed(work)

    def check(self) -> None:
        """The store holds every message of every turn, read back through the framework."""
        held = self.loop.run_until_complete(self.chat.held())
        if held != HELD_BY.get(self.kind, HELD) * self.turns:
            raise AssertionError(f"{self.kind}: {held} messages after {self.turns} turns")

    def _size(self) -> int:
        """The bytes on disk (-1: none, the store is in memory)."""
        if self.kind == PAI_MEMORY:
            return -1
        if isinstance(self.chat, PydanticChat) and self.kind == PAI_JSON:
            return self.chat.file.stat().st_size
        return checkpointed_size(self.path)

    def size_grown(self) -> int:
        """The bytes on disk once the history was built, before any timed turn."""
        return self.grown

    def close(self) -> None:
        self.chat.close()
        self.loop.close()


# -- measuring and the report -------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    histories: tuple[int, ...]
    reps: int


PLANS = {"quick": Plan((50, 200), 7), "default": Plan((50, 200), 15)}
PLANS["full"] = Plan((50, 200), 31)


@dataclass
class Measured:
    plan: Plan
    systems: list[str]
    turns: Samples
    sizes: dict[str, int]
    """Each worker's bytes on disk once its history was built (-1: in memory)."""
    skipped: list[str]


def skipped() -> dict[str, str]:
    """Why each system that cannot be measured cannot be (a framework's systems all go
    together: neither side of a pair is measured alone)."""
    why: dict[str, str] = {}
    for framework in FRAMEWORKS:
        for module, what in framework.needs:
            try:
                found = importlib.util.find_spec(module) is not None
            except ImportError:
                found = False
            if not found:
                systems = (framework.default, framework.ledger, *framework.others)
                why |= dict.fromkeys(systems, f"needs {what} (no {module} here)")
                break
    return why


def measure(plan: Plan, tmp: Path) -> Measured:
    why = skipped()
    systems = [
        s
        for f in FRAMEWORKS
        for s in (f.default, f.ledger, *f.others)
        if s not in why  # a framework's systems are skipped together
    ]
    chosen = {
        f"{s} @ {n}": (None, s, "FULL", n)
        for n in sorted(plan.histories, reverse=True)  # the longest take longest to build
        for s in systems
    }
    with ExitStack() as stack:
        workers, turns = timed_turns(stack, tmp, chosen, plan.reps, factory=Chat)
        sizes = {name: int(w.call("size_grown")) for name, w in workers.items()}
    notes = [f"{s}: skipped, {r}." for s, r in why.items()]
    return Measured(plan, systems, turns, sizes, notes)


def run(sizes: Sizes, tmp: Path) -> list[Section]:
    print("three frameworks' stores: a turn at each history ...", file=sys.stderr, flush=True)
    return [report(measure(PLANS[sizes.name], tmp))]


def _megabytes(size: int) -> str:
    return "in memory" if size < 0 else f"{size / 1e6:,.2f} MB"


def _framework_rows(measured: Measured, framework: Framework) -> list[Row]:
    """At each history: each system's file and turn, then the ledger's turn over the default's
    (the ratio of the medians [the interquartile range of the per-repetition ratios], judged
    at every history) and its file over the default's."""
    turns, sizes, rows = measured.turns, measured.sizes, []
    largest = measured.plan.histories[-1]
    for n in measured.plan.histories:
        for s in (framework.default, framework.ledger, *framework.others):
            rows += [
                Row(f"@ {n}: {s}: on disk", _megabytes(sizes[f"{s} @ {n}"])),
                Row(f"@ {n}: {s}: a turn", ms(turns.median(f"{s} @ {n}"))),
            ]
        top, bottom = f"{framework.ledger} @ {n}", f"{framework.default} @ {n}"
        value = turns.ratio(top, bottom)
        shown = judged(turns.paired(top, bottom), value, TURN_TARGET)
        pair = f"{framework.ledger} / {framework.default}"
        rows.append(
            Row(f"@ {n}: a turn, {pair} (target {TURN_TARGET})", ratio=shown, headline=True)
        )
        rows.append(ratio(f"@ {n}: on disk, {pair}", sizes[top] / sizes[bottom], "", n == largest))
        for other in framework.others:
            value = turns.ratio(top, f"{other} @ {n}")
            rows.append(ratio(f"@ {n}: a turn, {framework.ledger} / {other}", value))
    return rows


def report(measured: Measured) -> Section:
    plan, measuring = measured.plan, set(measured.systems)
    rows = [
        row
        for framework in FRAMEWORKS
        if framework.default in measuring
        for row in _framework_rows(measured, framework)
    ]
    return Section(
        "18. Three frameworks' stores: each one's default against the ledger",
        "Each framework runs the turn of section 6 (a user message, three model calls each "
        "calling `lookup` for a ~1 KB result, an answer; usage on every call; a scripted model, "
        "no network) through its own runner: the OpenAI Agents SDK's `Runner.run` with "
        "`SQLiteSession` on a file or `LedgerSession`; pydantic-ai's `Agent.run` on a "
        "`FunctionModel`, the conversation loaded before and saved after, as "
        "`ConversationTypeAdapter` JSON in a file of its own (pydantic-ai ships no store on "
        "disk: its usual persistence; rewritten whole to a new file, fsynced and renamed over "
        "the old) or through `LedgerConversationStore`, with its `InMemoryConversationStore` "
        "timed beside them; Google ADK's `Runner.run_async` with `SqliteSessionService` (the "
        "`adk run` default) or `LedgerSessionService`. The ledger at synchronous=FULL, the "
        "SQLite stores at their own settings. One conversation each, "
        f"{', '.join(map(str, plan.histories))} turns of history; each system and history in a "
        "process of its own; the bytes on disk once the history is built (a SQLite file after "
        f"`PRAGMA wal_checkpoint(TRUNCATE)`); then one whole turn each in turn, {plan.reps} "
        "repetitions, medians, the ledger's over the default's with the interquartile range "
        "of the per-repetition ratios; checked before and after, through each framework's own "
        f"reads: the store holds {HELD} messages a turn.",
        rows,
        measured.skipped,
    )
