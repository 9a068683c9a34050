"""``ScriptedLLM``: a model that replays given responses, for tests and offline demos."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from ..errors import ScriptExhaustedError
from ..values import InferenceRequest, InferenceResponse
from ._pricing import PriceTable

ScriptItem = InferenceResponse | Callable[[InferenceRequest], InferenceResponse]


class ScriptedLLM:
    """Replays responses in order; a callable in the script is called with the request.

    Every request is recorded in ``requests``, so a test can assert on what the model saw.
    With ``prices``, a response without a ``cost_usd`` is priced from its usage and model, as
    the HTTP providers price theirs.
    Asking for more responses than the script holds raises :class:`ScriptExhaustedError`.
    Safe to share between threads (parallel tools, concurrent subagents).
    """

    def __init__(
        self,
        responses: Iterable[ScriptItem],
        *,
        model: str = "scripted",
        prices: PriceTable | None = None,
    ) -> None:
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

    def __repr__(self) -> str:
        return f"ScriptedLLM(model={self.model!r}, remaining={self.remaining})"
