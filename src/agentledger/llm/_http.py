"""What the HTTP providers share: one pooled client, retries with backoff, typed errors, and
API keys kept out of everything that is stored, logged or raised."""

from __future__ import annotations

import os
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Generator,
    Iterator,
    Mapping,
)
from contextlib import aclosing, closing
from importlib.metadata import PackageNotFoundError, version
from typing import Any, ClassVar, Self

import httpx
from pydantic import JsonValue

from .._values import (
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    PriceTable,
    StreamItem,
)
from ..errors import (
    ConfigurationError,
    ProviderConnectionError,
    ProviderResponseError,
    ProviderStreamCutError,
    ProviderTimeoutError,
)
from ._failures import Failures
from ._retries import Failure, Retries, RetryPolicy
from ._sse import EventDecoder, StreamAssembler, StreamErrorEvent
from ._statuses import is_error_body
from ._structured import parsed_output

DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
"""A minute for the model to answer, ten seconds to connect."""

_AFTER_DELTAS = " after part of the answer had been streamed"


def _deltas(
    items: Iterator[InferenceDelta | Failure],
) -> Generator[InferenceDelta, None, Failure | None]:
    """Yields an attempt's deltas; returns its failure, if it failed."""
    for item in items:
        if isinstance(item, Failure):
            return item
        yield item
    return None


class HttpProvider:
    """The shared part of :class:`OpenAIChat`, :class:`OpenAIResponses` and
    :class:`AnthropicMessages`.

    Subclasses name their API and environment variables and map requests and responses
    (whole and streamed); this class sends them with one ``httpx.Client``, or one
    ``httpx.AsyncClient`` for ``acomplete`` and ``astream`` (connections are reused), retries
    what can be retried, turns every failure into a
    :class:`~agentledger.errors.ProviderError`, and prices the usage with ``prices``. The
    API key lives only in the clients' headers: it is never in ``repr()``, an error message,
    a log line or a response's metadata.

    ``transport`` replaces the network (``httpx.MockTransport`` serves both forms); an
    asynchronous transport serves ``acomplete`` and ``astream``, a synchronous one
    ``complete`` and ``stream``.
    """

    provider: ClassVar[str]
    api_key_variable: ClassVar[str]
    base_url_variable: ClassVar[str]
    default_base_url: ClassVar[str]
    endpoint: ClassVar[str]
    max_continuations: int = 8
    """How many times one call continues an answer the API paused before it fails with a
    :class:`~agentledger.errors.ProviderResponseError`."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        prices: PriceTable | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.model = model
        self.base_url = (
            base_url or os.environ.get(self.base_url_variable) or self.default_base_url
        ).rstrip("/")
        key = api_key if api_key is not None else os.environ.get(self.api_key_variable)
        if not key and self.base_url == self.default_base_url:
            raise ConfigurationError(
                f"no API key for {self.provider}: set {self.api_key_variable} or pass "
                f"api_key=. (A local {self.provider}-compatible server needs only base_url=.)"
            )
        self._failures = Failures(self, key, headers or {})
        self.retry = retry if retry is not None else RetryPolicy()
        self.prices = prices if prices is not None else PriceTable.default()
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self._headers = {
            "User-Agent": f"agentledger/{_package_version()}",
            **self.auth_headers(key or None),
            **(headers or {}),
        }
        self._transport = transport
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None

    def _sync_client(self) -> httpx.Client:
        """The pooled client of ``complete`` and ``stream``, made when first used."""
        if self._client is None:
            self._client = httpx.Client(
                base_url=self.base_url,
                timeout=self.timeout,
                transport=self._sync_transport(),
                headers=self._headers,
            )
        return self._client

    def _async_client(self) -> httpx.AsyncClient:
        """The pooled client of ``acomplete`` and ``astream``, made when first used."""
        if self._aclient is None:
            self._aclient = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=self.timeout,
                transport=self._async_transport(),
                headers=self._headers,
            )
        return self._aclient

    def _sync_transport(self) -> httpx.BaseTransport | None:
        if self._transport is None or isinstance(self._transport, httpx.BaseTransport):
            return self._transport
        raise ConfigurationError(
            f"{self!r} was given an asynchronous transport only: call acomplete() or "
            "astream(), or pass a transport that also serves synchronous calls "
            "(httpx.MockTransport serves both)."
        )

    def _async_transport(self) -> httpx.AsyncBaseTransport | None:
        if self._transport is None or isinstance(self._transport, httpx.AsyncBaseTransport):
            return self._transport
        raise ConfigurationError(
            f"{self!r} was given a synchronous transport only: call complete() or stream(), "
            "or pass a transport that also serves asynchronous calls "
            "(httpx.MockTransport serves both)."
        )

    # -- what a subclass provides -------------------------------------------------------------

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        raise NotImplementedError

    def payload(self, request: InferenceRequest) -> dict[str, Any]:
        """The request body for ``request``, in this API's wire format."""
        raise NotImplementedError

    def parse(self, body: Mapping[str, Any]) -> InferenceResponse:
        """A provider-neutral response from this API's response body."""
        raise NotImplementedError

    def stream_payload(self, request: InferenceRequest) -> dict[str, Any]:
        """The request body that asks for a stream: the body with ``stream: true`` (an API that
        needs more says so)."""
        return self.payload(request) | {"stream": True}

    def assembler(self) -> StreamAssembler:
        """A fresh assembler of this API's stream events."""
        raise NotImplementedError

    def continuation(
        self, payload: dict[str, Any], body: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """The request that continues the answer ``body`` when the API paused it in the middle
        of the model's turn (Anthropic's ``pause_turn``), built from the call's first request
        ``payload``; ``None`` when the answer is whole (the default: an API that pauses says
        so). The call sends it, and joins the answers with ``joined``, until one is whole."""
        return None

    def joined(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> Mapping[str, Any]:
        """One response body of a paused answer ``before`` and its continuation ``after``, in
        this API's wire format (an API whose ``continuation`` is ever a request says how)."""
        raise NotImplementedError

    # -- the call: one request, one whole response ---------------------------------------------

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        """The model's answer to ``request``, after the retries the policy allows (and the
        continuations of an answer the API paused)."""
        retries = Retries(self.retry, self.provider)
        answer, timeout = _Answer(self, self.payload(request)), self._timeout_of(request)
        while answer.payload is not None:
            outcome = self._attempt(answer.payload, timeout)
            if isinstance(outcome, Failure):
                self.retry.sleep(retries.delay_after(outcome))
            else:
                answer.add(outcome)
        return self._finish(answer.body, request, retries.log)

    async def acomplete(self, request: InferenceRequest) -> InferenceResponse:
        """``complete`` on an event loop: the same request, retries, errors and response."""
        retries = Retries(self.retry, self.provider)
        answer, timeout = _Answer(self, self.payload(request)), self._timeout_of(request)
        while answer.payload is not None:
            outcome = await self._aattempt(answer.payload, timeout)
            if isinstance(outcome, Failure):
                await self.retry.async_sleep(retries.delay_after(outcome))
            else:
                answer.add(outcome)
        return self._finish(answer.body, request, retries.log)

    def _timeout_of(self, request: InferenceRequest) -> httpx.Timeout:
        """The request's own timeout (``ModelSettings.timeout``, every phase), else the
        client's."""
        seconds = request.settings.timeout
        return self.timeout if seconds is None else httpx.Timeout(seconds)

    def _attempt(
        self, payload: dict[str, Any], timeout: httpx.Timeout
    ) -> Mapping[str, Any] | Failure:
        try:
            response = self._sync_client().post(self.endpoint, json=payload, timeout=timeout)
        except httpx.TransportError as exc:
            return self._failures.transport(exc, timeout)
        return self._outcome(response)

    async def _aattempt(
        self, payload: dict[str, Any], timeout: httpx.Timeout
    ) -> Mapping[str, Any] | Failure:
        try:
            client = self._async_client()
            response = await client.post(self.endpoint, json=payload, timeout=timeout)
        except httpx.TransportError as exc:
            return self._failures.transport(exc, timeout)
        return self._outcome(response)

    def _outcome(self, response: httpx.Response) -> Mapping[str, Any] | Failure:
        if not response.is_success:
            return self._failures.status(response)
        body = self._failures.json_body(response)
        return self._failures.error_body(response, body) if is_error_body(body) else body

    def _finish(
        self, body: Mapping[str, Any], request: InferenceRequest, retries: list[JsonValue]
    ) -> InferenceResponse:
        """The response ``body`` says, named after its model, priced, with its retries, read
        back as the request's response format asked."""
        response = self._parse(body)
        model = response.model or request.model or self.model
        metadata = dict(response.metadata)
        if retries:
            metadata["retries"] = retries
        return response.model_copy(
            update={
                "model": model,
                "cost_usd": self.prices.cost(model, response.usage),
                "metadata": metadata,
                "parsed": parsed_output(response.content, request.settings.response_format),
            }
        )

    def _parse(self, body: Mapping[str, Any]) -> InferenceResponse:
        try:
            return self.parse(body)
        except (AttributeError, KeyError, IndexError, TypeError, ValueError, RecursionError) as exc:
            raise self._failures.unreadable("answered with a response", exc) from None

    # -- the call, streamed -------------------------------------------------------------------

    def stream(self, request: InferenceRequest) -> Iterator[StreamItem]:
        """The answer to ``request`` as it comes: deltas, then the whole response.

        A failure before the first delta is retried as ``complete`` retries it; a stream cut
        after one raises :class:`~agentledger.errors.ProviderStreamCutError` with the answer
        so far. Closing the iterator early closes the HTTP response."""
        retries = Retries(self.retry, self.provider)
        answer, timeout = _Answer(self, self.stream_payload(request)), self._timeout_of(request)
        while answer.payload is not None:
            assembler = answer.assembler()
            with closing(self._stream_attempt(answer.payload, timeout, assembler)) as items:
                failure = yield from _deltas(items)
            if failure is None:
                answer.add(assembler.body(), assembler)
                continue
            self._raise_if_shown(failure, assembler, answer, request, retries)
            self.retry.sleep(retries.delay_after(failure))
        yield self._finish(answer.body, request, retries.log)

    async def astream(self, request: InferenceRequest) -> AsyncIterator[StreamItem]:
        """``stream`` on an event loop; ``aclose()`` or cancelling the task closes the HTTP
        response."""
        retries = Retries(self.retry, self.provider)
        answer, timeout = _Answer(self, self.stream_payload(request)), self._timeout_of(request)
        while answer.payload is not None:
            assembler = answer.assembler()
            failure = None
            attempt = self._astream_attempt(answer.payload, timeout, assembler)
            async with aclosing(attempt) as items:
                async for item in items:
                    if isinstance(item, Failure):
                        failure = item
                    else:
                        yield item
            if failure is None:
                answer.add(assembler.body(), assembler)
                continue
            self._raise_if_shown(failure, assembler, answer, request, retries)
            await self.retry.async_sleep(retries.delay_after(failure))
        yield self._finish(answer.body, request, retries.log)

    def _stream_attempt(
        self, payload: dict[str, Any], timeout: httpx.Timeout, assembler: StreamAssembler
    ) -> Generator[InferenceDelta | Failure, None, None]:
        """One streamed request: its deltas, then a failure if it failed."""
        try:
            client = self._sync_client()
            with client.stream("POST", self.endpoint, json=payload, timeout=timeout) as response:
                if not response.is_success:
                    response.read()
                    yield self._failures.status(response)
                    return
                try:
                    decoder = EventDecoder()
                    for line in response.iter_lines():
                        yield from self._feed(assembler, decoder, line)
                        if assembler.done:
                            return
                except httpx.TransportError as exc:
                    yield self._failures.stream_broke(exc, timeout)
                    return
        except httpx.TransportError as exc:
            yield self._failures.transport(exc, timeout)
            return
        except StreamErrorEvent as event:
            yield self._failures.event(event)
            return
        yield self._failures.ended_early()

    async def _astream_attempt(
        self, payload: dict[str, Any], timeout: httpx.Timeout, assembler: StreamAssembler
    ) -> AsyncGenerator[InferenceDelta | Failure, None]:
        try:
            client = self._async_client()
            async with client.stream(
                "POST", self.endpoint, json=payload, timeout=timeout
            ) as response:
                if not response.is_success:
                    await response.aread()
                    yield self._failures.status(response)
                    return
                try:
                    decoder = EventDecoder()
                    async for line in response.aiter_lines():
                        for delta in self._feed(assembler, decoder, line):
                            yield delta
                        if assembler.done:
                            return
                except httpx.TransportError as exc:
                    yield self._failures.stream_broke(exc, timeout)
                    return
        except httpx.TransportError as exc:
            yield self._failures.transport(exc, timeout)
            return
        except StreamErrorEvent as event:
            yield self._failures.event(event)
            return
        yield self._failures.ended_early()

    def _feed(
        self, assembler: StreamAssembler, decoder: EventDecoder, line: str
    ) -> list[InferenceDelta]:
        """The deltas a line of the stream completes; an event that cannot be read is a
        :class:`ProviderResponseError`, as an unreadable whole response is."""
        event = decoder.feed(line)
        if event is None or assembler.done:
            return []
        try:
            return assembler.feed(event)
        except (AttributeError, KeyError, IndexError, TypeError, ValueError, RecursionError) as exc:
            raise self._failures.unreadable("streamed an event", exc, event.data) from None

    def _raise_if_shown(
        self,
        failure: Failure,
        assembler: StreamAssembler,
        answer: _Answer,
        request: InferenceRequest,
        retries: Retries,
    ) -> None:
        """A stream that failed after a delta was yielded (by this attempt or by the answer
        it continues) is not retried: the caller has shown that text. A cut raises
        ``ProviderStreamCutError`` with the answer so far; an error the provider sent raises
        its own error."""
        if not assembler.shown:
            return
        attempts = retries.failed + 1
        if failure.kind not in (ProviderConnectionError, ProviderTimeoutError):
            raise failure.error(self.provider, attempts, after=_AFTER_DELTAS)
        raise ProviderStreamCutError(
            f"{failure.what}{_AFTER_DELTAS}. The text streamed so far is in the error's "
            "partial response; the run is kept and can be resumed.",
            provider=self.provider,
            partial=self._partial(assembler, answer, request, retries),
            attempts=attempts,
        )

    def _partial(
        self,
        assembler: StreamAssembler,
        answer: _Answer,
        request: InferenceRequest,
        retries: Retries,
    ) -> InferenceResponse:
        """The answer as far as it came (with the paused answers it continues): its text and
        reasoning, whole tool calls only."""
        try:
            return self._finish(answer.joined(assembler.partial_body()), request, retries.log)
        except ProviderResponseError:
            return InferenceResponse(content=assembler.text, reasoning=assembler.reasoning or None)

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the pooled connections of the synchronous client (``aclose`` closes the
        asynchronous one's)."""
        if self._client is not None:
            self._client.close()

    async def aclose(self) -> None:
        """Close the pooled connections of both clients."""
        self.close()
        if self._aclient is not None:
            await self._aclient.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"


class _Answer:
    """The answer of one call as it comes: the body of its response, joined with those of
    its continuations when the API paused it (``HttpProvider.continuation``), and the request
    to send next (``None`` once the answer is whole). A stream's continuations carry on from
    what it has shown, so its deltas keep flowing and a cut keeps every text shown."""

    def __init__(self, provider: HttpProvider, payload: dict[str, Any]) -> None:
        self._provider = provider
        self._first = payload
        self.payload: dict[str, Any] | None = payload
        self._body: Mapping[str, Any] | None = None
        self._pauses = 0
        self._shown: StreamAssembler | None = None

    @property
    def body(self) -> Mapping[str, Any]:
        assert self._body is not None, "the answer has no response yet"
        return self._body

    def add(self, body: Mapping[str, Any], assembler: StreamAssembler | None = None) -> None:
        """Takes a response; asks for its continuation when the API paused it."""
        self._body = self.joined(body)
        self._shown = assembler
        self.payload = self._provider.continuation(self._first, self._body)
        if self.payload is None:
            return
        self._pauses += 1
        limit = self._provider.max_continuations
        if self._pauses > limit:
            raise ProviderResponseError(
                f"{self._provider.provider} paused its answer {self._pauses} times in one "
                f"call, more than the {limit} continuations allowed. Raise the provider's "
                "max_continuations, or ask for less work (fewer server tool uses) per turn.",
                provider=self._provider.provider,
            )

    def joined(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """``body`` after what the answer holds so far."""
        return body if self._body is None else self._provider.joined(self._body, body)

    def assembler(self) -> StreamAssembler:
        """A fresh assembler that carries on from the text and reasoning already shown."""
        assembler = self._provider.assembler()
        if self._shown is not None:
            assembler.text, assembler.reasoning = self._shown.text, self._shown.reasoning
            assembler.shown = self._shown.shown
        return assembler


def _package_version() -> str:
    try:
        return version("agentledger")
    except PackageNotFoundError:  # pragma: no cover - a source tree without install
        return "0"
