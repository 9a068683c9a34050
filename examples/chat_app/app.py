"""A chat app over an agentledger agent: the answer streams to the browser as server-sent
events, a Stop button (or a closed tab, or a dropped connection) interrupts the run, and what the
user was shown is in the ledger, flagged interrupted, when the page is reloaded.

    pip install -e '.[examples]'                 # in a checkout of agentledger
    uvicorn examples.chat_app.app:app            # then open http://127.0.0.1:8000

The model is an offline stand-in that looks the question up with a tool, then streams a few
words a second (the page says it is a stand-in); with ``OPENAI_API_KEY`` set it is OpenAI's
``gpt-4o-mini`` (``CHAT_APP_MODEL`` chooses another). The ledger is ``chat-app.db`` in the
current directory (``CHAT_APP_DB`` chooses another: a SQLite path or a ``postgresql://`` URL).
Each answer links to its run in agentledger's viewer (``agentledger ui --db chat-app.db``), at
``AGENTLEDGER_UI_URL`` (by default http://127.0.0.1:8765).

    POST /conversations/{id}/runs   {"text": "..."}: the run's events, as server-sent events
                                    ({id} = "new" starts a conversation; its id comes in the
                                    first event, run_started)
    POST /runs/{id}/cancel          stops the run: what the user was shown is kept, flagged
    GET  /conversations/{id}        the conversation as the user saw it, each answer with the
                                    tool calls of its run and the run's page in the viewer
    GET  /about                     the model (a stand-in or not) and the viewer's address
    GET  /                          the page
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import BaseModel, Field

from agentledger import (
    LLM,
    Agent,
    AgentBuilder,
    AsyncRunStream,
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    Ledger,
    Message,
    NotFoundError,
    Role,
    RunResult,
    StreamItem,
    ToolCall,
    Usage,
    UsageError,
    tool,
)
from agentledger.events import RunFinished, RunStarted

PAGE = Path(__file__).parent / "static" / "index.html"
VIEWER = "http://127.0.0.1:8765"
"""Where ``agentledger ui`` listens by default: each answer links to its run there."""


# --- the agent --------------------------------------------------------------------------------


@tool
def lookup(topic: str) -> str:
    """Look a topic up in the (offline) encyclopedia."""
    return f"{topic}: a subject with a long history, much discussed and often misunderstood."


class OfflineModel:
    """A model that needs no network: it looks the question up with ``lookup`` first, then
    streams an answer of ``words`` words from what it found, ``delay`` seconds apart."""

    def __init__(self, *, words: int = 60, delay: float = 0.15) -> None:
        self.words = words
        self.delay = delay

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        last = request.messages.last()
        if last is None or last.role is Role.USER:
            topic = last.content[:60] if last is not None else ""
            call = ToolCall(
                id=f"lookup-{len(request.messages)}", name="lookup", arguments={"topic": topic}
            )
            return InferenceResponse(
                tool_calls=(call,), usage=Usage(input_tokens=20, output_tokens=8)
            )
        found = last.content.replace(":", "").replace(",", "").replace(".", "").split()
        text = " ".join(found[n % len(found)] for n in range(self.words)) if found else "Nothing."
        return InferenceResponse(
            content=text, usage=Usage(input_tokens=40, output_tokens=self.words)
        )

    async def acomplete(self, request: InferenceRequest) -> InferenceResponse:
        return self.complete(request)

    async def astream(self, request: InferenceRequest) -> AsyncIterator[StreamItem]:
        response = self.complete(request)
        for n, word in enumerate(response.content.split()):
            await asyncio.sleep(self.delay)
            yield InferenceDelta(text=word if n == 0 else f" {word}")
        yield response


def is_stand_in(model: LLM) -> bool:
    """Whether the answers come from :class:`OfflineModel` (the page says so)."""
    return isinstance(model, OfflineModel)


def default_model() -> LLM:
    """OpenAI when ``OPENAI_API_KEY`` is set, the offline stand-in otherwise."""
    if os.environ.get("OPENAI_API_KEY"):
        from agentledger import OpenAIChat

        return OpenAIChat(model=os.environ.get("CHAT_APP_MODEL", "gpt-4o-mini"))
    return OfflineModel()


def build_agent(ledger: Ledger, model: LLM) -> Agent:
    return (
        AgentBuilder()
        .with_llm(model)
        .with_tools([lookup])
        .with_system_prompt("You answer briefly, after looking the question up.")
        .with_ledger(ledger)
        .build()
    )


# --- the app's state: the ledger, the agent, the runs streaming now ---------------------------


@dataclass
class Chat:
    """What the endpoints share, made when the app starts."""

    ledger: Ledger
    agent: Agent
    about: dict[str, Any]
    """The model (a stand-in or not) and the viewer's address, as ``GET /about`` tells them."""
    streaming: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """Each run streaming in this process, by run id: the task that reads its stream."""

    def relay(self, stream: AsyncRunStream) -> AsyncIterator[str]:
        """The run's events as server-sent events. The stream is read in a task of its own, so
        that Stop can cancel that task while this generator still sends the run's last event;
        when the client goes away, this generator is closed and cancels the task the same way."""
        events: asyncio.Queue[str | None] = asyncio.Queue()
        reader = asyncio.create_task(self._read(stream, events))
        return _sent(events, reader)

    async def _read(self, stream: AsyncRunStream, events: asyncio.Queue[str | None]) -> None:
        reader = asyncio.current_task()
        assert reader is not None
        run_id = None
        try:
            async for event in stream:
                if isinstance(event, RunStarted) and event.depth == 0:
                    run_id = event.run_id
                    self.streaming[run_id] = reader
                events.put_nowait(sse(event.type, event.model_dump(mode="json")))
        except asyncio.CancelledError:  # Stop, or the client went away
            # Closing the stream stops the run: it ends interrupted, the text this task took
            # from the stream committed as its answer, flagged. Its result tells the page so.
            await stream.aclose()
            with contextlib.suppress(UsageError):  # stopped before the run began: no result
                events.put_nowait(sse("run_finished", stopped(stream.result)))
            raise
        except Exception as exc:  # say, another run holds the conversation
            events.put_nowait(sse("error", {"error": f"{type(exc).__name__}: {exc}"}))
        finally:
            await stream.aclose()  # whatever ended this task, the run is not left running
            events.put_nowait(None)
            self.streaming.pop(run_id or "", None)


async def _sent(
    events: asyncio.Queue[str | None], reader: asyncio.Task[None]
) -> AsyncIterator[str]:
    try:
        while (event := await events.get()) is not None:
            yield event
    finally:  # the client went away (or the run ended): the run stops, if it has not
        reader.cancel()


def sse(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n"


def stopped(result: RunResult) -> dict[str, Any]:
    """The ``run_finished`` event of a stopped run (whose stream, closed, tells none)."""
    return RunFinished.of(result).model_dump(mode="json")


def shown(message: Message, run: dict[str, Any]) -> dict[str, Any]:
    """A message of the conversation, as the page draws it, with what ``run`` (:func:`traced`)
    says of the run that wrote it."""
    return {
        "id": message.id,
        "role": str(message.role),
        "content": message.content,
        "interrupted": message.interrupted,
        **run,
    }


def traced(ledger: Ledger, run_id: str | None, viewer: str) -> dict[str, Any]:
    """The run that wrote an answer, read from the ledger: its id, its tool calls (the
    conversation holds the questions and answers; the calls are in the run's trace, kept apart)
    and its page in the viewer. Nothing for a message no run wrote."""
    if run_id is None:
        return {"run_id": None, "tool_calls": [], "trace": None}
    calls = [
        {
            "id": t.tool_call.id,
            "name": t.tool_call.name,
            "arguments": t.tool_call.arguments,
            "is_error": t.is_error,
        }
        for t in ledger.tool_executions(run_id)
    ]
    return {"run_id": run_id, "tool_calls": calls, "trace": f"{viewer}/r/{run_id}"}


def told(ledger: Ledger, conversation_id: str, viewer: str) -> list[dict[str, Any]]:
    """The conversation's questions and answers, each answer with its run's trace."""
    talk = []
    for turn in ledger.turns(conversation_id):
        run = traced(ledger, turn.run_id, viewer)
        for message in turn.messages:
            if message.role in (Role.USER, Role.ASSISTANT):
                answer = message.role is Role.ASSISTANT
                talk.append(shown(message, run if answer else traced(ledger, None, viewer)))
    return talk


# --- the endpoints ----------------------------------------------------------------------------


def current_chat(request: Request) -> Chat:
    chat: Chat = request.app.state.chat
    return chat


ChatDep = Annotated[Chat, Depends(current_chat)]
router = APIRouter()


class Question(BaseModel):
    text: str = Field(min_length=1)


@router.get("/")
async def page() -> FileResponse:
    return FileResponse(PAGE)


@router.get("/about")
async def about(chat: ChatDep) -> dict[str, Any]:
    return chat.about


@router.get("/conversations/{conversation_id}")
async def conversation(conversation_id: str, chat: ChatDep) -> dict[str, Any]:
    try:
        found = await asyncio.to_thread(chat.ledger.conversation, conversation_id)
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from exc
    talk = await asyncio.to_thread(told, chat.ledger, found.id, chat.about["viewer"])
    return {"id": found.id, "messages": talk}


@router.post("/conversations/{conversation_id}/runs")
async def start_run(conversation_id: str, question: Question, chat: ChatDep) -> StreamingResponse:
    existing = None
    if conversation_id != "new":
        try:
            existing = (await asyncio.to_thread(chat.ledger.conversation, conversation_id)).id
        except NotFoundError as exc:
            raise HTTPException(404, str(exc)) from exc
    stream = chat.agent.astream(question.text, conversation_id=existing)
    return StreamingResponse(chat.relay(stream), media_type="text/event-stream")


@router.post("/runs/{run_id}/cancel")
async def cancel(run_id: str, chat: ChatDep) -> dict[str, Any]:
    reader = chat.streaming.get(run_id)
    if reader is None:
        raise HTTPException(
            404, f"run {run_id} is not streaming here: it has ended, or never began"
        )
    reader.cancel()
    await asyncio.wait([reader])  # the run is recorded interrupted when this returns
    run = await asyncio.to_thread(chat.ledger.run, run_id)
    return {"run_id": run.id, "status": str(run.status), "stop_reason": str(run.stop_reason)}


def create_app(
    ledger_url: str | None = None, model: LLM | None = None, viewer: str | None = None
) -> FastAPI:
    """The app over the ledger at ``ledger_url`` and ``model`` (by default ``CHAT_APP_DB`` or
    ``chat-app.db``, and :func:`default_model`), opened when the app starts; its answers link
    to the viewer at ``viewer`` (by default ``AGENTLEDGER_UI_URL``, else :data:`VIEWER`)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        url = ledger_url or os.environ.get("CHAT_APP_DB", "chat-app.db")
        answering = model or default_model()
        address = (viewer or os.environ.get("AGENTLEDGER_UI_URL") or VIEWER).rstrip("/")
        about = {
            "model": type(answering).__name__,
            "stand_in": is_stand_in(answering),
            "viewer": address,
        }
        with Ledger.open(url) as ledger:
            chat = Chat(ledger, build_agent(ledger, answering), about)
            app.state.chat = chat
            try:
                yield
            finally:  # runs still streaming end interrupted, before the ledger closes
                readers = list(chat.streaming.values())
                for reader in readers:
                    reader.cancel()
                if readers:
                    await asyncio.wait(readers)

    app = FastAPI(title="agentledger chat", lifespan=lifespan)
    app.include_router(router)
    return app


app = create_app()
