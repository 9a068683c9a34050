"""How an HTTP provider's failed attempts are told: each failure judged by its status, error
body or transport error, said with the provider's own message and what to do next, and every
text that may hold the API key redacted before it is raised or logged."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

import httpx

from ..errors import ProviderConnectionError, ProviderResponseError, ProviderTimeoutError
from ._retries import Failure, RetryPolicy, retry_after, status_of_error
from ._sse import StreamErrorEvent
from ._statuses import (
    ErrorDetails,
    Named,
    classify,
    error_details,
    server_message,
    should_retry,
    snippet,
)

_KEY_LIKE = re.compile(r"\b(?:sk|pk|rk)-[\w\-*.]{4,}")
_SECRET_HEADERS = ("authorization", "x-api-key", "api-key", "proxy-authorization")


class _Provider(Named, Protocol):
    """What a failure names: the provider, besides what the advice names (where its key comes
    from, its base URL and model), and the retry policy whose clock reads a ``Retry-After``
    date."""

    @property
    def provider(self) -> str: ...

    @property
    def retry(self) -> RetryPolicy: ...


class Failures:
    """The failures of one provider's attempts, told in its name, with its secrets (the API
    key, and credentials in the extra headers) redacted."""

    def __init__(self, provider: _Provider, key: str | None, headers: Mapping[str, str]) -> None:
        self._provider = provider
        self._secrets = _secrets(key, headers)

    @property
    def _name(self) -> str:
        return self._provider.provider

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return _KEY_LIKE.sub("[redacted]", text)

    def unreadable(self, what: str, exc: Exception, quoted: str = "") -> ProviderResponseError:
        """The error for a response or event (``quoted``) that ``parse`` or an assembler
        could not read."""
        provider = self._provider
        shown = f": {snippet(quoted)!r}" if quoted else ""
        return ProviderResponseError(
            self.redact(
                f"{provider.provider} {what} this client cannot read ({type(exc).__name__}: "
                f"{exc}){shown}. Is {provider.base_url} really an "
                f"{provider.provider}-compatible API?"
            ),
            provider=provider.provider,
        )

    def event(self, event: StreamErrorEvent) -> Failure:
        """An error event in the stream, judged as the HTTP status it stands for."""
        details = error_details(event.body)
        kind, retryable, advice = classify(event.status, self._provider, details)
        return Failure(
            kind,
            f"{self._name} {advice[0]} (error event in the stream: "
            f"{snippet(self.redact(event.message))}{self.redact(details.text())})",
            advice[1],
            retryable=retryable,
            details=details,
        )

    def stream_broke(self, exc: httpx.TransportError, timeout: httpx.Timeout) -> Failure:
        if isinstance(exc, httpx.TimeoutException):
            return self.timeout(exc, timeout)
        return Failure(
            ProviderConnectionError,
            self.redact(f"{self._name}'s stream broke off ({type(exc).__name__}: {exc})"),
            "Check the network or the server; the run is kept and can be resumed.",
            retryable=True,
        )

    def ended_early(self) -> Failure:
        return Failure(
            ProviderConnectionError,
            f"{self._name}'s stream ended before the answer was complete",
            "Check the network or the server; the run is kept and can be resumed.",
            retryable=True,
        )

    def transport(self, exc: httpx.TransportError, timeout: httpx.Timeout) -> Failure:
        if isinstance(exc, httpx.TimeoutException):
            return self.timeout(exc, timeout)
        return Failure(
            ProviderConnectionError,
            self.redact(
                f"could not reach {self._name} at {self._provider.base_url} "
                f"({type(exc).__name__}: {exc})"
            ),
            "Check the base URL and the network, or start the local server; the run is "
            "kept and can be resumed.",
            retryable=True,
        )

    def timeout(self, exc: httpx.TimeoutException, timeout: httpx.Timeout) -> Failure:
        phase = {
            httpx.ConnectTimeout: "connecting",
            httpx.WriteTimeout: "sending",
            httpx.PoolTimeout: "waiting for a free connection",
        }.get(type(exc), "waiting for the answer")
        return Failure(
            ProviderTimeoutError,
            f"{self._name} timed out while {phase} ({_timeout_text(timeout)})",
            "Pass a longer timeout= (to the provider, or ModelSettings(timeout=...) for one "
            "request) or resume the run later.",
            retryable=True,
        )

    def json_body(self, response: httpx.Response) -> Mapping[str, Any]:
        """The response's JSON object; anything else is a ``ProviderResponseError``."""
        body = _json_or_none(response)
        if not isinstance(body, dict):
            raise ProviderResponseError(
                self.redact(
                    f"{self._name} answered HTTP {response.status_code} with a body that is "
                    f"not a JSON object: {snippet(self.redact(response.text))!r}. Is "
                    f"{self._provider.base_url} really an {self._name}-compatible API?"
                ),
                provider=self._name,
                status_code=response.status_code,
            )
        return body

    def status(self, response: httpx.Response) -> Failure:
        status = response.status_code
        details = error_details(_json_or_none(response), response.headers)
        return self._failure(response, status, f"HTTP {status}", server_message(response), details)

    def error_body(self, response: httpx.Response, body: Mapping[str, Any]) -> Failure:
        """A 200 whose body is an error object: judged as the status its code or type
        stands for (a server error when neither is known)."""
        details = error_details(body, response.headers)
        error = body.get("error")
        message = str(error.get("message") or error) if isinstance(error, Mapping) else str(body)
        status = status_of_error(details.code, details.type)
        where = f"HTTP {response.status_code} with an error body"
        return self._failure(response, status, where, message, details)

    def _failure(
        self,
        response: httpx.Response,
        status: int,
        where: str,
        message: str,
        details: ErrorDetails,
    ) -> Failure:
        """A failed answer, judged by ``status``, saying the provider's message and details;
        the server's ``x-should-retry`` decides the retry, except for an exhausted quota."""
        kind, retryable, advice = classify(status, self._provider, details)
        if not details.out_of_quota:
            retryable = should_retry(response.headers, retryable)
        said = self.redact(f"{snippet(message)}{details.text()}")
        clock = self._provider.retry.clock
        return Failure(
            kind,
            f"{self._name} {advice[0]} ({where}: {said})",
            advice[1],
            retryable=retryable,
            status_code=response.status_code,
            retry_after=retry_after(response.headers, clock()) if retryable else None,
            details=details,
        )


def _secrets(key: str | None, headers: Mapping[str, str]) -> tuple[str, ...]:
    """What to redact: the key, and credentials in the extra headers (``Bearer <token>``)."""
    values = [v for name, v in headers.items() if name.lower() in _SECRET_HEADERS]
    tokens = [v.split(" ", 1)[-1] for v in values]
    found = {s for s in (key, *values, *tokens) if s and len(s) >= 4}
    return tuple(sorted(found, key=len, reverse=True))


def _json_or_none(response: httpx.Response) -> object:
    try:
        return response.json()
    except (ValueError, RecursionError):  # not JSON, or nested deeper than Python parses
        return None


def _timeout_text(timeout: httpx.Timeout) -> str:
    return f"read timeout {timeout.read}s, connect timeout {timeout.connect}s"
