"""What every request to the viewer passes before it reaches a page, and what every response
carries.

- Only GET and HEAD are served: the viewer never writes, so no other method has a meaning.
- Without a token the viewer listens on the loopback interface, and answers only requests
  addressed to it by a loopback name (``Host: 127.0.0.1:8765``, ``localhost``, ``[::1]``): a
  page on another site that points a name of its own at 127.0.0.1 (DNS rebinding) is refused.
- With a token every request carries it: as ``Authorization: Bearer TOKEN``, or in the cookie
  the viewer sets when its address is opened with ``?token=TOKEN`` (then it sends the browser
  on to the same address without it, so the token stays out of history and links).
- Every response forbids what a page needs none of: scripts and styles from anywhere but the
  viewer (no inline ones), frames, other origins, a referrer, caching.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, urlencode

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE = "agentledger_ui_token"
TOKEN_PARAMETER = "token"
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
"""Nothing but the viewer's own script, stylesheet and requests (the live updates' stream
among them): no inline script or style (no ``'unsafe-inline'``), no plugin, no other origin,
and no page of another site may frame it."""

HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)


class Guard:
    """The ASGI middleware that applies the rules of the module to every HTTP request."""

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        target = refusal or self.app
        await target(scope, receive, _with_headers(send))

    def _refusal(self, scope: Scope) -> Response | None:
        """The response refusing the request, or None to serve it."""
        if scope["method"] not in ("GET", "HEAD"):
            return PlainTextResponse(
                "The viewer only reads: it serves GET and HEAD.",
                status_code=405,
                headers={"Allow": "GET, HEAD"},
            )
        headers = Headers(scope=scope)
        if self.token is None:
            return None if _loopback(headers.get("host", "")) else _misaddressed()
        return self._token_refusal(scope, headers)

    def _token_refusal(self, scope: Scope, headers: Headers) -> Response | None:
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), True)
        given = [value for name, value in query if name == TOKEN_PARAMETER]
        if given and self._matches(given[0]):
            return _remember(_raw_path(scope), query, given[0])
        bearer = headers.get("authorization", "")
        if bearer.startswith("Bearer ") and self._matches(bearer[len("Bearer ") :]):
            return None
        cookie = SimpleCookie(headers.get("cookie", ""))
        if COOKIE in cookie and self._matches(cookie[COOKIE].value):
            return None
        return PlainTextResponse(
            "This viewer needs its token: open the address `agentledger ui` printed (it ends "
            "with ?token=...), or send it as Authorization: Bearer TOKEN.",
            status_code=401,
        )

    def _matches(self, given: str) -> bool:
        assert self.token is not None
        return hmac.compare_digest(given.encode(), self.token.encode())


def _loopback(host: str) -> bool:
    """Whether a ``Host`` header names the loopback interface (with or without a port)."""
    name = host[: host.find("]") + 1] if host.startswith("[") else host.partition(":")[0]
    return name.lower() in LOOPBACK_NAMES


def _misaddressed() -> Response:
    return PlainTextResponse(
        "This viewer answers requests to 127.0.0.1 or localhost only: open the address "
        "`agentledger ui` printed.",
        status_code=403,
    )


def _remember(path: str, query: Iterable[tuple[str, str]], token: str) -> Response:
    """Send the browser on to the address without its token, keeping it in a cookie that
    only this viewer's pages send back (never to another site, never to a script)."""
    kept = urlencode([(n, v) for n, v in query if n != TOKEN_PARAMETER])
    path = "/" + path.lstrip("/")  # "//host/..." would send the browser to another host
    response = RedirectResponse(path + (f"?{kept}" if kept else ""), status_code=303)
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
    return response


def _raw_path(scope: Scope) -> str:
    """The request's path as it was sent (still percent-encoded)."""
    raw = scope.get("raw_path")
    return raw.decode("latin-1") if raw else quote(scope["path"])


def _with_headers(send: Send) -> Send:
    """``send``, adding the module's headers to the response's start."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
        await send(message)

    return sending
