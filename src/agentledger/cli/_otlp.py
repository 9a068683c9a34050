"""``agentledger export otlp``: the ledger's recorded runs as OpenTelemetry traces (the otel
extra), POSTed to an OTLP/HTTP collector or written as OTLP JSON."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import click

from ._analytics import export
from ._app import cli_errors, open_ledger, scope
from ._json import json_option, print_json_lines


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``--since``: an ISO 8601 date or time (UTC unless it says otherwise), or a time ago
    (``30m``, ``12h``, ``7d``, ``2w``). :class:`ValueError` saying what is accepted."""
    from .._values import moment, time_ago

    ago = time_ago(text)
    if ago is not None:
        return (now or datetime.now(UTC)) - ago
    try:
        return moment(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a date or time (2026-11-01, 2026-11-01T08:00:00Z) nor a "
            "time ago (30m, 12h, 7d, 2w)"
        ) from None


class Since(click.ParamType[datetime]):
    name = "TIME"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return parse_since(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@export.command()
@click.option(
    "--since",
    type=Since(),
    required=True,
    help="Export the run trees whose root run started at or after this time: an ISO 8601 "
    "date or time (UTC unless it says otherwise), or a time ago (30m, 12h, 7d, 2w).",
)
@click.option(
    "--endpoint",
    metavar="URL",
    help="POST the spans as OTLP/HTTP protobuf to this collector (its /v1/traces unless the "
    "URL names a path), such as http://localhost:4318.",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the spans as OTLP JSON to this file instead, one request a line.",
)
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="NAME=VALUE",
    help="An HTTP header for the collector (an API key, say); repeat for more.",
)
@click.option(
    "--capture-content/--no-capture-content",
    default=None,
    help="Include message contents (the model's output, tool arguments and results). "
    "Default: as OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT says (off).",
)
@click.option(
    "--service-name", default="agentledger", show_default=True, help="The spans' service.name."
)
@json_option
@click.pass_context
def otlp(
    ctx: click.Context,
    since: datetime,
    endpoint: str | None,
    output: Path | None,
    headers: tuple[str, ...],
    capture_content: bool | None,
    service_name: str,
    as_json: bool,
) -> None:
    """The runs as OpenTelemetry traces.

    By the GenAI semantic conventions: one trace per run tree (invoke_agent, chat and
    execute_tool spans, timed by the ledger's rows), for any tracing backend. Span ids come
    from the rows' ids: exporting the same runs again sends the same spans. With --tenant or
    --owner, only that scope's runs. Needs the otel extra: pip install 'agentledger[otel]'.

    \b
    Examples:
      agentledger export otlp --endpoint http://localhost:4318 --since 7d
      agentledger export otlp --output spans.jsonl --capture-content
    """
    if (endpoint is None) == (output is None):
        raise click.UsageError("give exactly one of --endpoint URL or --output FILE")
    tenant, owner = scope(ctx)
    with cli_errors():
        from ..integrations.otel import export_otlp

        with open_ledger(ctx) as ledger:
            exported = export_otlp(
                ledger,
                since=since,
                endpoint=endpoint,
                output=output,
                capture_content=capture_content,
                service_name=service_name,
                headers=_headers(headers),
                progress=_progress,
                tenant_id=tenant,
                owner_id=owner,
            )
    if as_json:
        print_json_lines([dataclasses.asdict(exported)])
        return
    rejected = (
        f", {exported.rejected_spans} rejected by the collector" if exported.rejected_spans else ""
    )
    click.echo(
        f"Exported {_counted(exported.traces, 'trace')} ({_counted(exported.spans, 'span')}) "
        f"to {exported.destination} in {_counted(exported.requests, 'request')}{rejected}."
    )


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _headers(given: tuple[str, ...]) -> dict[str, str]:
    headers = {}
    for header in given:
        name, equals, value = header.partition("=")
        if not equals or not name.strip():
            raise click.BadParameter(f"{header!r} is not NAME=VALUE", param_hint="--header")
        headers[name.strip()] = value.strip()
    return headers


def _progress(done: int, total: int) -> None:
    click.echo(f"exported {done} of {total} run trees", err=True)
