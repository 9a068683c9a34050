"""A chat app over an agentledger agent: the answer streams to the browser as server-sent
events, a Stop button (or a closed tab, or a dropped connection) interrupts the run, and what the
user was shown is in the ledger, flagged interrupted, when the page is reloaded.

    pip install 'agentledger[examples]'
    uvicorn examples.chat_app.app:app            # then open http://127.0.0.1:8000

The model is an offline stand-in that streams a few words a second and looks something up with
a tool first; with ``OPENAI_API_KEY`` set it is OpenAI's ``gpt-4o-mini`` (``CHAT_APP_MODEL``
chooses another). The ledger is ``chat-app.db`` in the current directory (``CHAT_APP_DB``
chooses another, a SQLite path or a ``postgresql://`` URL).

    POST /conversations/{id}/runs   {"text": "..."}: the run's events, as server-sent events
                                    ({id} = "new" starts a conversation; its id comes in the
                                    first event, run_started)
    POST /runs/{id}/cancel          stops the run: its partial answer is kept, flagged
    GET  /conversations/{id}        the conversation, as the user saw it
    GET  /                          the page
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import BaseModel

from agentledger import (
    LLM,
    Agent,
    AgentBuilder,
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    Ledger,
    NotFoundError,
    Role,
    StreamItem,
    ToolCall,
    Usage,
    tool,
)

STATIC = Path(__file__).parent / "static"


@tool
def lookup(topic: str) -> str:
    """Look a topic up in the (offline) encyclopedia."""
    return f"{topic}: a subject with a long history, much discussed and often misunderstood."


class OfflineModel:
    """A model that needs no network: it looks the question up with ``lookup`` first, then
    streams an answer of ``words`` words, ``delay`` seconds apart."""

    def __init__(self, *, words: int = 60, delay: float = 0.15) -> None:
        self.words = words
        self.delay = delay

    def _respond(self, request: InferenceRequest) -> InferenceResponse:
        last = request.messages.last()
        if last is not None and last.role is Role.USER:
            call = ToolCall(id=f"lookup-{len(request.messages)}", name="lookup",
                            arguments={"topic": last.content[:60]})
            return InferenceResponse(tool_calls=(call,), usage=Usage(input_tokens=20, output_tokens=8))
        found = last.content if last is not None else ""
        text = " ".join(f"({n + 1}) {word}" for n, word in enumerate(_words(found, self.words)))
        return InferenceResponse(content=text, usage=Usage(input_tokens=40, output_tokens=self.words))

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        return self._respond(request)

    async def acomplete(self, request: InferenceRequest) -> InferenceResponse:
        return self._respond(request)

    async def astream(self, request: InferenceRequest) -> AsyncIterator[StreamItem]:
        response = self._respond(request)
        for n, word in enumerate(response.content.split(" ")):
            await asyncio.sleep(self.delay)
            yield InferenceDelta(text=word if n == 0 else f" {word}")
        yield response


def _words(text: str, count: int) -> list[str]:
    source = text.replace(":", "").replace(",", "").replace(".", "").split() or ["nothing"]
    return [source[n % len(source)] for n in range(count)]


def default_model() -> LLM:
    if os.environ.get("OPENAI_API_KEY"):
        from agentledger import OpenAIChat

        return OpenAIChat(model=os.environ.get("CHAT_APP_MODEL", "gpt-4o-mini"))
    return OfflineModel()


class Question(BaseModel):
    text: str


def create_app(ledger_url: str | None = None, model: Any = None) -> FastAPI:
    """The app, over the ledger at ``ledger_url`` and ``model`` (the defaults above)."""
    runs: dict[str, asyncio.Task[None]] = {}
    held: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        url = ledger_url or os.environ.get("CHAT_APP_DB", "chat-app.db")
        ledger = Ledger.open(url)
        held["ledger"] = ledger
        held["agent"] = (
            AgentBuilder()
            .with_llm(model or default_model())
            .with_tools([lookup])
            .with_system_prompt("You answer briefly, after looking the question up.")
            .with_ledger(ledger)
            .build()
        )
        try:
            yield
        finally:
            for task in runs.values():
                task.cancel()
            await asyncio.gather(*runs.values(), return_exceptions=True)
            ledger.close()

    app = FastAPI(title="agentledger chat", lifespan=lifespan)

    @app.get("/")
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/conversations/{conversation_id}")
    async def conversation(conversation_id: str) -> dict[str, Any]:
        ledger: Ledger = held["ledger"]
        try:
            found = await asyncio.to_thread(ledger.conversation, conversation_id)
            history = await asyncio.to_thread(ledger.history, found.id)
        except NotFoundError as exc:
            raise HTTPException(404, str(exc)) from exc
        return {
            "id": found.id,
            "messages": [
                {
                    "id": m.id,
                    "role": str(m.role),
                    "content": m.content,
                    "interrupted": bool(getattr(m, "interrupted", False)),
                }
                for m in history
                if m.role in (Role.USER, Role.ASSISTANT) and m.content
            ],
        }

    @app.post("/conversations/{conversation_id}/runs")
    async def start_run(conversation_id: str, question: Question) -> StreamingResponse:
        agent: Agent = held["agent"]
        existing = None if conversation_id == "new" else conversation_id
        events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

        async def produce() -> None:
            try:
                async for event in agent.astream(question.text, conversation_id=existing):
                    data = event.model_dump(mode="json")
                    if data.get("type") == "run_started":
                        runs[data["run_id"]] = task
                    events.put_nowait(data)
            finally:
                events.put_nowait(None)

        task = asyncio.create_task(produce())

        async def send() -> AsyncIterator[str]:
            try:
                while (data := await events.get()) is not None:
                    yield f"event: {data['type']}\ndata: {json.dumps(data)}\n\n"
            finally:  # the client went away: the run is interrupted, its partial answer kept
                if not task.done():
                    task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                for run_id in [r for r, t in runs.items() if t is task]:
                    del runs[run_id]

        return StreamingResponse(send(), media_type="text/event-stream")

    @app.post("/runs/{run_id}/cancel")
    async def cancel(run_id: str) -> dict[str, Any]:
        task = runs.get(run_id)
        if task is None:
            raise HTTPException(404, f"no run {run_id} is streaming in this process")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return {"run_id": run_id, "cancelled": True}

    return app


app = create_app()
