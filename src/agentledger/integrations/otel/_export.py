"""``export_otlp``: a ledger's recorded runs loaded into any tracing backend, after the fact.

Each run tree whose root started since a given time and has ended becomes one trace, of the
same spans the live tracer emits, timed by the ledger's rows. Trace and span ids are derived
from the run, step and tool-execution ids, so exporting the same runs twice sends the same
spans (a backend keeps one copy of each).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Protocol

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ..._values import StepExecution
from ...errors import ExportError, UsageError
from ...ledger import AgentRun, Ledger, Scope
from . import _otlp
from ._attributes import capture_content_from_env
from ._spans import SpanRecord, tree_spans, trees

DEFAULT_SERVICE_NAME = "agentledger"
TREES_PER_REQUEST = 50
"""How many run trees go in one request: requests stay small, and progress is told often."""

Progress = Callable[[int, int], None]
"""Told ``(trees exported, trees in all)`` after each request."""


@dataclass(frozen=True)
class OtlpExport:
    """What :func:`export_otlp` sent: how many traces (run trees) and spans, in how many
    requests, where, and how many spans the collector said it rejected."""

    traces: int
    spans: int
    requests: int
    destination: str
    rejected_spans: int = 0


def export_otlp(
    ledger: Ledger | str | os.PathLike[str],
    *,
    since: datetime,
    endpoint: str | None = None,
    output: str | os.PathLike[str] | None = None,
    capture_content: bool | None = None,
    service_name: str = DEFAULT_SERVICE_NAME,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    progress: Progress | None = None,
    transport: httpx.BaseTransport | None = None,
    tenant_id: str | None = None,
    owner_id: str | None = None,
) -> OtlpExport:
    """Export the run trees of ``ledger`` (a :class:`Ledger`, or its URL or path) whose root
    run started at or after ``since`` (a naive datetime is UTC) and has ended, as OTLP spans:
    POSTed as protobuf to the collector at ``endpoint`` (its ``/v1/traces`` unless the URL
    names a path), or written as OTLP JSON lines to the file ``output``. Exactly one of the
    two.

    Message contents (the model's output, tool arguments and results) are exported only when
    ``capture_content`` is set, or, when None, when
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true``.

    With ``tenant_id`` or ``owner_id``, only the runs of that tenant and owner are exported
    (a subagent run has its parent's); a blank one, or one holding a control character, raises
    :class:`UsageError`.

    Raises :class:`UsageError` for a bad ``endpoint`` or ``since``, :class:`ExportError` when
    the collector cannot be reached or answers other than 2xx (what was sent before stays
    sent) or the file cannot be written."""
    if (endpoint is None) == (output is None):
        raise UsageError(
            "export_otlp needs exactly one destination: endpoint= (an OTLP/HTTP collector) "
            "or output= (a file for OTLP JSON)"
        )
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    content = capture_content_from_env() if capture_content is None else capture_content
    scope = Scope(tenant_id, owner_id)
    with _destination(endpoint, output, headers, timeout, transport) as destination:
        if isinstance(ledger, Ledger):
            return _export(ledger, since, scope, destination, content, service_name, progress)
        with Ledger.open(ledger, migrate=False, read_only=True) as opened:
            return _export(opened, since, scope, destination, content, service_name, progress)


def _in_scope(run: AgentRun, scope: Scope) -> bool:
    """Whether ``run`` is of the tenant and the owner of ``scope`` (each, when it has one)."""
    return scope.tenant_id in (None, run.tenant_id) and scope.owner_id in (None, run.owner_id)


def _export(
    ledger: Ledger,
    since: datetime,
    scope: Scope,
    destination: _Destination,
    content: bool,
    service_name: str,
    progress: Progress | None,
) -> OtlpExport:
    found = trees(run for run in ledger.runs(since=since) if _in_scope(run, scope))
    spans = requests = rejected = 0
    for start in range(0, len(found), TREES_PER_REQUEST):
        batch = [
            _spans_of(ledger, tree, content) for tree in found[start : start + TREES_PER_REQUEST]
        ]
        records = [span for tree in batch for span in tree]
        rejected += destination.send(_otlp.request_of(records, service_name=service_name))
        spans, requests = spans + len(records), requests + 1
        if progress is not None:
            progress(min(start + TREES_PER_REQUEST, len(found)), len(found))
    return OtlpExport(
        traces=len(found),
        spans=spans,
        requests=requests,
        destination=destination.name,
        rejected_spans=rejected,
    )


def _spans_of(ledger: Ledger, tree: Sequence[AgentRun], content: bool) -> list[SpanRecord]:
    steps: dict[str, tuple[StepExecution, ...]] = {run.id: ledger.steps(run.id) for run in tree}
    return tree_spans(tree, steps, content=content)


class _Destination(Protocol):
    name: str

    def send(self, request: ExportTraceServiceRequest) -> int:
        """Deliver ``request``; the spans refused."""
        ...


@dataclass
class _Collector:
    """An OTLP/HTTP collector."""

    client: httpx.Client
    name: str
    headers: Mapping[str, str] | None

    def send(self, request: ExportTraceServiceRequest) -> int:
        return _otlp.post(self.client, self.name, request, headers=self.headers)


@dataclass
class _JsonFile:
    """A file of OTLP JSON, one request a line."""

    file: IO[str]
    name: str

    def send(self, request: ExportTraceServiceRequest) -> int:
        try:
            self.file.write(json.dumps(_otlp.to_json(request), ensure_ascii=False) + "\n")
        except OSError as exc:
            raise ExportError(
                f"cannot write OTLP JSON to {self.name}: {exc.strerror or exc}"
            ) from exc
        return 0


@contextmanager
def _destination(
    endpoint: str | None,
    output: str | os.PathLike[str] | None,
    headers: Mapping[str, str] | None,
    timeout: float,
    transport: httpx.BaseTransport | None,
) -> Iterator[_Destination]:
    if endpoint is not None:
        url = _otlp.traces_url(endpoint)
        with httpx.Client(timeout=timeout, transport=transport) as client:
            yield _Collector(client, url, headers)
        return
    assert output is not None
    path = Path(output)
    try:
        file = path.open("w", encoding="utf-8")
    except OSError as exc:
        raise ExportError(f"cannot write OTLP JSON to {path}: {exc.strerror or exc}") from exc
    with file:
        yield _JsonFile(file, str(path))
