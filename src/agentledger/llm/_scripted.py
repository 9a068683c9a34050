"""``ScriptedLLM``: a model that replays given responses, for tests and offline demos."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator

from .._values import InferenceDelta, InferenceRequest, InferenceResponse, PriceTable, StreamItem
from ..errors import ScriptExhaustedError, UsageError

ScriptItem = InferenceResponse | Callable[[InferenceRequest], InferenceResponse]


class ScriptedLLM:
    """Replays responses in order; a callable in the script is called with the request.

    Every request is recorded in ``requests``, so a test can assert on what the model saw.
    With ``prices``, a response without a ``cost_usd`` is priced from its usage and model, as
    the HTTP providers price theirs.
    Asking for more responses than the script holds raises :class:`ScriptExhaustedError`.
    Safe to share between threads (parallel tools, concurrent subagents).

    It streams too (``stream``, and ``astream`` on an event loop): its content (then its
    reasoning) in deltas of ``chunk_size`` characters, ``chunk_delay`` seconds apart, then the
    whole response; without ``chunk_size``, one delta of the whole text. ``acomplete`` is
    ``complete``, for the asynchronous loop.
    """

    def __init__(
        self,
        responses: Iterable[ScriptItem],
        *,
        model: str = "scripted",
        prices: PriceTable | None = None,
        chunk_size: int | None = None,
        chunk_delay: float = 0.0,
    ) -> None:
        if chunk_size is not None and chunk_size < 1:
            raise UsageError(
                f"ScriptedLLM(chunk_size={chunk_size}): give a number of characters of 1 or "
                "more, or None to stream each response as one delta"
            )
        if chunk_delay < 0:
            raise UsageError(
                f"ScriptedLLM(chunk_delay={chunk_delay}): give a number of seconds of 0 or more"
            )
        self.chunk_size = chunk_size
        self.chunk_delay = chunk_delay
        self.model = model
        self.prices = prices
        self.requests: list[InferenceRequest] = []
        self._script: list[ScriptItem] = list(responses)
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """How many scripted responses are left."""
        with self._lock:
            return max(0, len(self._script) - len(self.requests))

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        with self._lock:
            position = len(self.requests)
            self.requests.append(request)
        if position >= len(self._script):
            raise ScriptExhaustedError(
                f"ScriptedLLM has {len(self._script)} scripted responses and was asked for "
                f"response {position + 1}. Add responses to the script, or lower the agent's "
                "step limit if the run should have stopped sooner."
            )
        item = self._script[position]
        response = item if isinstance(item, InferenceResponse) else item(request)
        if response.model is None:
            response = response.model_copy(update={"model": request.model or self.model})
        if self.prices is not None and response.cost_usd is None:
            cost = self.prices.cost(response.model, response.usage)
            response = response.model_copy(update={"cost_usd": cost})
        return response

    async def acomplete(self, request: InferenceRequest) -> InferenceResponse:
        return self.complete(request)

    def stream(self, request: InferenceRequest) -> Iterator[StreamItem]:
        response = self.complete(request)
        for position, delta in enumerate(self._deltas(response)):
            if position and self.chunk_delay:
                time.sleep(self.chunk_delay)
            yield delta
        yield response

    async def astream(self, request: InferenceRequest) -> AsyncIterator[StreamItem]:
        response = self.complete(request)
        for position, delta in enumerate(self._deltas(response)):
            if position and self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
            yield delta
        yield response

    def _deltas(self, response: InferenceResponse) -> list[InferenceDelta]:
        """The pieces ``response``'s text streams in."""
        size = self.chunk_size
        texts = _pieces(response.content, size)
        thoughts = _pieces(response.reasoning or "", size)
        return [InferenceDelta(text=t) for t in texts] + [
            InferenceDelta(reasoning=r) for r in thoughts
        ]

    def __repr__(self) -> str:
        return f"ScriptedLLM(model={self.model!r}, remaining={self.remaining})"


def _pieces(text: str, size: int | None) -> list[str]:
    if not text:
        return []
    if size is None:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]
