"""When a provider call is tried again: the retry policy, one failed attempt, and the retry
decisions of a call, which the synchronous and asynchronous calls share (they differ only in
how they wait)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx
from pydantic import JsonValue

from .._logs import library_logger
from .._values import Clock, utc_now
from ..errors import ConfigurationError, ProviderError
from ._statuses import ErrorDetails

logger = library_logger("agentledger.llm")


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How a provider retries connect errors, timeouts, 429 and 5xx answers.

    The delay before retry ``n`` (1-based) is ``initial_delay * multiplier ** (n - 1)``, capped
    at ``max_delay``, with jitter drawn from its upper half. A ``Retry-After`` (or
    ``retry-after-ms``) header replaces the computed delay; one longer than ``max_retry_after``
    is not waited for: the error is raised at once. ``max_retries=0`` disables retries.
    ``sleep`` waits (``async_sleep`` on an event loop, for ``acomplete`` and ``astream``) and
    ``clock`` tells the time (a ``Retry-After`` given as an HTTP date is measured against it):
    the seams tests replace.
    """

    max_retries: int = 4
    initial_delay: float = 0.5
    max_delay: float = 30.0
    multiplier: float = 2.0
    jitter: bool = True
    max_retry_after: float = 60.0
    sleep: Callable[[float], None] = time.sleep
    async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
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
class Failure:
    """One failed attempt: what happened and what to do about it, and whether to try again."""

    kind: type[ProviderError]
    what: str
    advice: str
    retryable: bool
    status_code: int | None = None
    retry_after: float | None = None
    details: ErrorDetails = ErrorDetails()

    def error(self, provider: str, attempts: int, *, after: str = "") -> ProviderError:
        """The error raised after the last attempt: said once, with how many were made."""
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return self.kind(
            f"{self.what}{after}{tries}. {self.advice}",
            provider=provider,
            status_code=self.status_code,
            attempts=attempts,
            retryable=self.retryable,
            **self.details.fields(),
        )


class Retries:
    """The retry decisions of one call, shared by its synchronous and asynchronous forms:
    how long to wait after a failure, or the error to raise when no retry is left."""

    def __init__(self, policy: RetryPolicy, provider: str) -> None:
        self.policy = policy
        self.provider = provider
        self.failed = 0
        self.log: list[JsonValue] = []

    def delay_after(self, failure: Failure) -> float:
        """Seconds to wait before the next attempt; raises the failure's error instead when
        it is not retried."""
        self.failed += 1
        delay = self._delay(failure)
        if delay is None:
            raise failure.error(self.provider, self.failed)
        logger.warning(
            "%s. Retry %d of %d in %.2fs.",
            failure.what,
            self.failed,
            self.policy.max_retries,
            delay,
        )
        self.log.append(
            {"attempt": self.failed, "status": failure.status_code, "delay_s": round(delay, 3)}
        )
        return delay

    def _delay(self, failure: Failure) -> float | None:
        policy = self.policy
        if not failure.retryable or self.failed > policy.max_retries:
            return None
        if failure.retry_after is None:
            return policy.backoff(self.failed)
        if failure.retry_after > policy.max_retry_after:
            return None
        return failure.retry_after


_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "invalid_api_key": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "model_not_found": 404,
    "request_too_large": 413,
    "insufficient_quota": 429,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "api_error": 500,
    "server_error": 500,
    "overloaded_error": 529,
}


def status_of_error(*names: str | None) -> int:
    """The HTTP status the first known of an error's names (its code, its type) stands for,
    in a stream or a 200's error body (a server error when none is known: the provider failed
    mid-answer)."""
    for name in names:
        if name in _ERROR_STATUS:
            return _ERROR_STATUS[name]
    return 500


def retry_after(headers: httpx.Headers, now: datetime) -> float | None:
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
