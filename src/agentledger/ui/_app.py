"""The viewer's web application: its routes, the templates, and what guards every request.

Every response is read from the ledger and written by a template that escapes every value; the
only methods served are GET and HEAD (nothing writes); a strict Content-Security-Policy lets a
page load nothing but the viewer's own stylesheet and script. Without a token the viewer
answers only requests addressed to the loopback interface (its ``Host``), so that a web page
elsewhere cannot reach it through a name that resolves to 127.0.0.1; with one, every request
must carry it (see :mod:`._access`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .._values import cost_text
from ..errors import AgentLedgerError, AmbiguousIdError, NotFoundError, UsageError
from ..ledger import Ledger
from . import _pages, _text
from ._access import Guard
from ._insights import KeptAnalytics, analytics_page
from ._live import ChangeFeed, since_of

HERE = Path(__file__).parent
TITLE = "agentledger"

Page = Callable[[Ledger, Request], tuple[str, Mapping[str, Any]]]
"""A page: the template it renders, and what the template is given."""


def templates() -> jinja2.Environment:
    """The templates, escaping every value they write, after :func:`._text.shown`."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=_text.shown,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(
        path=_text.path_part,
        cost=_text.cost,
        run_cost=_text.run_cost,
        ms=_text.milliseconds,
        time=_text.time_text,
        iso=_text.iso,
        json=_text.json_text,
        beginning=_text.beginning,
    )
    environment.tests["folded"] = _text.folded
    environment.globals.update(writer=_text.writer, cost_text=cost_text, title=TITLE)
    return environment


def create_app(
    ledger: Ledger,
    *,
    token: str | None = None,
    page_size: int = _pages.PAGE_SIZE,
    turns_shown: int = _pages.TURNS_SHOWN,
) -> Starlette:
    """The viewer of ``ledger`` (opened read-only, and scoped as it should show): the
    conversations at ``/``, a conversation at ``/c/{id}``, a run at ``/r/{id}`` (each id in
    full or by a unique prefix), the analytics' charts at ``/analytics``, its stylesheet and
    script under ``/static``; what changed, as server-sent events, at ``/events``, and the
    parts of the pages that show it under ``/live/`` (:mod:`._live`). With ``token``,
    every request must carry it (see :mod:`._access`); without, only requests addressed to
    the loopback interface are answered. The listing shows ``page_size`` conversations a
    page, a conversation its last ``turns_shown`` turns (and links to the ones before)."""
    environment = templates()
    environment.globals["scope_text"] = _scope_text(ledger)
    hues = _text.Hues()
    environment.filters["hue"] = hues.of
    feed = ChangeFeed(ledger)
    charts = KeptAnalytics(functools.partial(analytics_page, hues=hues))

    def page(render: Page, *, live: bool = True) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            try:
                # The stamp and the page in one snapshot: a run and its steps read together
                # agree, and what is committed after is told to the page by its stamp.
                def read() -> tuple[int | None, tuple[str, Mapping[str, Any]]]:
                    return ledger.changes_since().stamp if live else None, render(ledger, request)

                stamp, (name, context) = ledger.reading("a page of the viewer", read)
                context = {**context, "stamp": stamp}
            except NotFoundError as exc:
                return _not_found(environment, request, exc)
            except UsageError as exc:
                return _html(environment, "problem.html", request, {"problem": str(exc)}, 400)
            except AgentLedgerError as exc:  # the ledger could not be read: said, not a trace
                return _html(environment, "problem.html", request, {"problem": str(exc)}, 500)
            return _html(environment, name, request, context)

        return endpoint

    async def events(request: Request) -> Response:
        given = request.headers.get("last-event-id") or request.query_params.get("since")
        return StreamingResponse(feed.events(since_of(given)), media_type="text/event-stream")

    listed = functools.partial(_conversations, page_size)
    routes = [
        Route("/", page(listed), methods=GET),
        Route("/c/{given:path}", page(functools.partial(_conversation, turns_shown)), methods=GET),
        Route("/r/{given:path}", page(_run), methods=GET),
        Route("/analytics", page(functools.partial(_analytics, charts), live=False), methods=GET),
        Route("/events", events, methods=["GET"]),
        Route("/live/", page(_fragment(listed, "listing"), live=False), methods=GET),
        Route("/live/c/{given:path}", page(_live_turns, live=False), methods=GET),
        Route("/live/r/{given:path}", page(_fragment(_run, "run"), live=False), methods=GET),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        problem = "no such page" if status == 404 else "not served: the viewer only reads"
        return _html(environment, "problem.html", request, {"problem": problem}, status)

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})
    app.add_middleware(Guard, token=token)
    return app


def _conversations(
    page_size: int, ledger: Ledger, request: Request
) -> tuple[str, Mapping[str, Any]]:
    wanted = request.query_params
    filters = _pages.Filters(**{name: wanted.get(name, "").strip() for name in _FILTERS})
    context = _pages.listing(ledger, filters, page_size)
    return "conversations.html", {
        **context,
        "filters": filters,
        "statuses": _pages.STATUSES,
        "unscoped": ledger.scope.everything,
    }


_FILTERS = ("query", "agent", "status", "tenant", "owner", "after")


def _conversation(
    turns_shown: int, ledger: Ledger, request: Request
) -> tuple[str, Mapping[str, Any]]:
    before = request.query_params.get("before", "").strip()
    return "conversation.html", _pages.conversation_page(
        ledger, request.path_params["given"], before, turns_shown
    )


def _run(ledger: Ledger, request: Request) -> tuple[str, Mapping[str, Any]]:
    return "run.html", _pages.run_page(ledger, request.path_params["given"])


GET = ["GET", "HEAD"]

LIVE_TURNS = 3
"""The turns a live conversation's page fetches again when the conversation changes: the
last, being answered, and any that began since."""


def _fragment(render: Page, fragment: str) -> Page:
    """A page's part that changes, as a live page fetches it again (``_live.html``)."""

    def part(ledger: Ledger, request: Request) -> tuple[str, Mapping[str, Any]]:
        _name, context = render(ledger, request)
        return "_live.html", {**context, "fragment": fragment}

    return part


_live_turns = _fragment(functools.partial(_conversation, LIVE_TURNS), "turns")


def _analytics(
    analytics: KeptAnalytics, ledger: Ledger, request: Request
) -> tuple[str, Mapping[str, Any]]:
    return "analytics.html", analytics.page(ledger)


def _not_found(environment: jinja2.Environment, request: Request, exc: NotFoundError) -> Response:
    """The same answer for an id that does not exist and one outside the viewer's scope; a
    prefix that begins several ids in scope links to each."""
    letter = request.url.path.removeprefix("/live")[1]
    kind = {"c": "conversation", "r": "run"}[letter]
    given = request.path_params.get("given", "")
    context: dict[str, Any] = {
        "problem": f"No {kind} {given!r} here: check the id, or open the listing to find it."
    }
    if isinstance(exc, AmbiguousIdError):
        context = {"problem": str(exc), "letter": letter, "candidates": exc.candidates}
    return _html(environment, "problem.html", request, context, 404)


def _html(
    environment: jinja2.Environment,
    name: str,
    request: Request,
    context: Mapping[str, Any],
    status: int = 200,
) -> HTMLResponse:
    text = environment.get_template(name).render(**context, request=request)
    return HTMLResponse(text, status_code=status)


def _scope_text(ledger: Ledger) -> str:
    """What the header says of the viewer's scope."""
    scope = ledger.scope
    parts = [f"tenant {scope.tenant_id}"] if scope.tenant_id else []
    parts += [f"owner {scope.owner_id}"] if scope.owner_id else []
    return ", ".join(parts)
