"""What the HTTP providers share: one pooled client, retries with backoff, typed errors, and
API keys kept out of everything that is stored, logged or raised."""

from __future__ import annotations

import logging
import os
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any, ClassVar, Self

import httpx
from pydantic import JsonValue

from ..errors import (
    ConfigurationError,
    ProviderAuthenticationError,
    ProviderConnectionError,
    ProviderError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderServerError,
    ProviderTimeoutError,
)
from ..values import Clock, InferenceRequest, InferenceResponse, utc_now
from ._pricing import PriceTable

logger = logging.getLogger("agentledger.llm")

DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
"""A minute for the model to answer, ten seconds to connect."""

_KEY_LIKE = re.compile(r"\b(?:sk|pk|rk)-[\w\-*.]{4,}")


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How a provider retries connect errors, timeouts, 429 and 5xx answers.

    The delay before retry ``n`` (1-based) is ``initial_delay * multiplier ** (n - 1)``, capped
    at ``max_delay``, with jitter drawn from its upper half. A ``Retry-After`` (or
    ``retry-after-ms``) header replaces the computed delay; one longer than ``max_retry_after``
    is not waited for: the error is raised at once. ``max_retries=0`` disables retries.
    ``sleep`` waits and ``clock`` tells the time (a ``Retry-After`` given as an HTTP date is
    measured against it): the seams tests replace.
    """

    max_retries: int = 4
    initial_delay: float = 0.5
    max_delay: float = 30.0
    multiplier: float = 2.0
    jitter: bool = True
    max_retry_after: float = 60.0
    sleep: Callable[[float], None] = time.sleep
    clock: Clock = utc_now

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.initial_delay < 0 or self.max_delay < 0:
            raise ConfigurationError(
                f"invalid {self!r}: max_retries, initial_delay and max_delay must be >= 0"
            )

    def backoff(self, retry: int) -> float:
        """The computed delay before retry number ``retry``."""
        delay = min(self.max_delay, self.initial_delay * self.multiplier ** (retry - 1))
        return random.uniform(delay / 2, delay) if self.jitter else delay


@dataclass(frozen=True)
class _Failure:
    """One failed attempt: what happened and what to do about it, and whether to try again."""

    kind: type[ProviderError]
    what: str
    advice: str
    retryable: bool
    status_code: int | None = None
    retry_after: float | None = None

    def error(self, provider: str, attempts: int) -> ProviderError:
        """The error raised after the last attempt: said once, with how many were made."""
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return self.kind(
            f"{self.what}{tries}. {self.advice}",
            provider=provider,
            status_code=self.status_code,
            attempts=attempts,
            retryable=self.retryable,
        )


class HttpProvider:
    """The shared part of :class:`OpenAIChat` and :class:`AnthropicMessages`.

    Subclasses name their API and environment variables and map requests and responses; this
    class sends them with one ``httpx.Client`` (connections are reused), retries what can be
    retried, turns every failure into a :class:`~agentledger.errors.ProviderError`, and prices
    the usage with ``prices``. The API key lives only in the client's headers: it is never in
    ``repr()``, an error message, a log line or a response's metadata.
    """

    provider: ClassVar[str]
    api_key_variable: ClassVar[str]
    base_url_variable: ClassVar[str]
    default_base_url: ClassVar[str]
    endpoint: ClassVar[str]

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
        transport: httpx.BaseTransport | None = None,
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
        self._secrets = _secrets(key, headers or {})
        self.retry = retry if retry is not None else RetryPolicy()
        self.prices = prices if prices is not None else PriceTable.default()
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self._client = httpx.Client(
            base_url=self.base_url,
            timeout=self.timeout,
            transport=transport,
            headers={
                "User-Agent": f"agentledger/{_package_version()}",
                **self.auth_headers(key or None),
                **(headers or {}),
            },
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

    # -- the call -----------------------------------------------------------------------------

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        body, retries = self._post(self.payload(request))
        try:
            response = self.parse(body)
        except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise ProviderResponseError(
                self._redact(
                    f"{self.provider} answered with a response this client cannot read "
                    f"({type(exc).__name__}: {exc}). Is {self.base_url} really an "
                    f"{self.provider}-compatible API?"
                ),
                provider=self.provider,
            ) from None
        model = response.model or request.model or self.model
        metadata = dict(response.metadata)
        if retries:
            metadata["retries"] = retries
        return response.model_copy(
            update={
                "model": model,
                "cost_usd": self.prices.cost(model, response.usage),
                "metadata": metadata,
            }
        )

    def _post(self, payload: dict[str, Any]) -> tuple[Mapping[str, Any], list[JsonValue]]:
        retries: list[JsonValue] = []
        attempt = 0
        while True:
            attempt += 1
            outcome = self._attempt(payload)
            if not isinstance(outcome, _Failure):
                return outcome, retries
            delay = self._delay_before_retry(outcome, attempt)
            if delay is None:
                raise outcome.error(self.provider, attempt)
            logger.warning(
                "%s. Retry %d of %d in %.2fs.",
                outcome.what,
                attempt,
                self.retry.max_retries,
                delay,
            )
            retries.append(
                {"attempt": attempt, "status": outcome.status_code, "delay_s": round(delay, 3)}
            )
            self.retry.sleep(delay)

    def _delay_before_retry(self, failure: _Failure, attempt: int) -> float | None:
        if not failure.retryable or attempt > self.retry.max_retries:
            return None
        if failure.retry_after is None:
            return self.retry.backoff(attempt)
        if failure.retry_after > self.retry.max_retry_after:
            return None
        return failure.retry_after

    def _attempt(self, payload: dict[str, Any]) -> Mapping[str, Any] | _Failure:
        try:
            response = self._client.post(self.endpoint, json=payload)
        except httpx.TimeoutException as exc:
            return self._timeout(exc)
        except httpx.TransportError as exc:
            return _Failure(
                ProviderConnectionError,
                self._redact(
                    f"could not reach {self.provider} at {self.base_url} "
                    f"({type(exc).__name__}: {exc})"
                ),
                "Check the base URL and the network, or start the local server; the run is "
                "kept and can be resumed.",
                retryable=True,
            )
        if response.is_success:
            return self._json(response)
        return self._status_failure(response)

    def _timeout(self, exc: httpx.TimeoutException) -> _Failure:
        phase = {
            httpx.ConnectTimeout: "connecting",
            httpx.WriteTimeout: "sending",
            httpx.PoolTimeout: "waiting for a free connection",
        }.get(type(exc), "waiting for the answer")
        return _Failure(
            ProviderTimeoutError,
            f"{self.provider} timed out while {phase} ({_timeout_text(self.timeout)})",
            "Pass a longer timeout= or resume the run later.",
            retryable=True,
        )

    def _json(self, response: httpx.Response) -> Mapping[str, Any]:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise ProviderResponseError(
                self._redact(
                    f"{self.provider} answered HTTP {response.status_code} with a body that is "
                    f"not a JSON object: {_snippet(self._redact(response.text))!r}. Is "
                    f"{self.base_url} really an {self.provider}-compatible API?"
                ),
                provider=self.provider,
                status_code=response.status_code,
            )
        return body

    def _status_failure(self, response: httpx.Response) -> _Failure:
        status = response.status_code
        detail = f"HTTP {status}: {_snippet(self._redact(_server_message(response)))}"
        kind, retryable, advice = _classify(status, self)
        return _Failure(
            kind,
            f"{self.provider} {advice[0]} ({detail})",
            advice[1],
            retryable=retryable,
            status_code=status,
            retry_after=_retry_after(response.headers, self.retry.clock()) if retryable else None,
        )

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return _KEY_LIKE.sub("[redacted]", text)

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the pooled connections."""
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"


_SECRET_HEADERS = ("authorization", "x-api-key", "api-key", "proxy-authorization")


def _secrets(key: str | None, headers: Mapping[str, str]) -> tuple[str, ...]:
    """What to redact: the key, and credentials in the extra headers (``Bearer <token>``)."""
    values = [v for name, v in headers.items() if name.lower() in _SECRET_HEADERS]
    tokens = [v.split(" ", 1)[-1] for v in values]
    found = {s for s in (key, *values, *tokens) if s and len(s) >= 4}
    return tuple(sorted(found, key=len, reverse=True))


def _classify(
    status: int, provider: HttpProvider
) -> tuple[type[ProviderError], bool, tuple[str, str]]:
    """The error type, whether to retry, and what happened / what to do, for an HTTP status."""
    if status == 429:
        return (
            ProviderRateLimitError,
            True,
            (
                "is rate limiting the requests",
                "Wait and resume the run, lower the request rate, or allow more retries "
                "with RetryPolicy(max_retries=...).",
            ),
        )
    if status in (408, 409):
        return (
            ProviderRequestError,
            True,
            ("could not take the request now", "The run is kept: resume it later."),
        )
    if status >= 500:
        return (
            ProviderServerError,
            True,
            ("failed on its side", "The run is kept: resume it later."),
        )
    if status in (401, 403):
        what = "refused the API key" if status == 401 else "refused the key's permissions"
        return (
            ProviderAuthenticationError,
            False,
            (
                what,
                f"Set {provider.api_key_variable} to a valid key (or pass api_key=) and "
                "check that the key may use this model.",
            ),
        )
    if status == 404:
        return (
            ProviderRequestError,
            False,
            (
                f"has no such endpoint or model at {provider.base_url}",
                f"Check the model name ({provider.model!r}) and the base URL.",
            ),
        )
    return (
        ProviderRequestError,
        False,
        (
            "refused the request",
            "Check the model name, the model settings and the messages; retrying the same "
            "request will not help.",
        ),
    )


def _server_message(response: httpx.Response) -> str:
    """The error message in an OpenAI- or Anthropic-style error body, else the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return response.text


def _retry_after(headers: httpx.Headers, now: datetime) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``Retry-After`` (seconds, or an HTTP date
    that is ``now`` or later)."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def _package_version() -> str:
    try:
        return version("agentledger")
    except PackageNotFoundError:  # pragma: no cover - a source tree without install
        return "0"


def _snippet(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit]}..."


def _timeout_text(timeout: httpx.Timeout) -> str:
    return f"read timeout {timeout.read}s, connect timeout {timeout.connect}s"
