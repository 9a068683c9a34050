"""Spans in OTLP, the OpenTelemetry protocol: a protobuf ``ExportTraceServiceRequest``
(``opentelemetry-proto``), POSTed to a collector over OTLP/HTTP, or written as OTLP JSON (one
request per line, as the collector's file exporter writes and its JSON file receiver reads)."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from ...errors import ExportError, UsageError
from . import _semconv as sc
from ._attributes import AttributeValue, library_version
from ._spans import SpanRecord

TRACES_PATH = "/v1/traces"
"""Where an OTLP/HTTP collector takes traces."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def request_of(spans: Sequence[SpanRecord], *, service_name: str) -> ExportTraceServiceRequest:
    """``spans`` as one export request, from a resource named ``service_name``."""
    resource = Resource(attributes=[_key_value("service.name", service_name)])
    scope = InstrumentationScope(name="agentledger", version=library_version())
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=resource,
                scope_spans=[
                    ScopeSpans(
                        scope=scope, spans=[_span(s) for s in spans], schema_url=sc.SCHEMA_URL
                    )
                ],
                schema_url=sc.SCHEMA_URL,
            )
        ]
    )


def _span(record: SpanRecord) -> Span:
    status = (
        Status(code=Status.STATUS_CODE_ERROR, message=record.error)
        if record.error is not None
        else Status()
    )
    return Span(
        trace_id=record.trace_id,
        span_id=record.span_id,
        parent_span_id=record.parent_span_id or b"",
        name=record.name,
        kind=int(record.kind),  # type: ignore[arg-type]
        start_time_unix_nano=_nanos(record.start),
        end_time_unix_nano=_nanos(max(record.start, record.end)),
        attributes=[_key_value(k, v) for k, v in record.attributes.items()],
        status=status,
    )


def _nanos(moment: datetime) -> int:
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return (aware - _EPOCH) // timedelta(microseconds=1) * 1000


def _key_value(key: str, value: AttributeValue) -> KeyValue:
    return KeyValue(key=key, value=_any_value(value))


def _any_value(value: AttributeValue) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    return AnyValue(array_value=ArrayValue(values=[_any_value(v) for v in value]))


def to_json(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """``request`` in OTLP JSON: protobuf's JSON mapping, but trace and span ids in hex and
    enums as numbers, as the OTLP specification asks."""
    shaped: dict[str, Any] = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource in shaped.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return shaped


def traces_url(endpoint: str) -> str:
    """The URL to POST traces to: ``endpoint`` as given when it names a path, else its
    ``/v1/traces``. :class:`UsageError` for anything but an http(s) URL with a host."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"the OTLP endpoint {endpoint!r} is not an http:// or https:// URL with a host: "
            "give the collector's OTLP/HTTP address, such as http://localhost:4318"
        )
    if parts.path in ("", "/"):
        parts = parts._replace(path=TRACES_PATH)
    return urlunsplit(parts)


def post(
    client: httpx.Client,
    url: str,
    request: ExportTraceServiceRequest,
    *,
    headers: Mapping[str, str] | None = None,
) -> int:
    """POST ``request`` to the collector at ``url``; the number of spans it says it rejected
    (a partial success). :class:`ExportError` when it cannot be reached or does not answer
    2xx."""
    try:
        response = client.post(
            url,
            content=request.SerializeToString(),
            headers={"Content-Type": "application/x-protobuf", **(headers or {})},
        )
    except httpx.HTTPError as exc:
        raise ExportError(
            f"cannot send traces to the collector at {url}: {exc or type(exc).__name__}. "
            "Check that it runs and takes OTLP/HTTP there; nothing more was sent."
        ) from exc
    if not response.is_success:
        raise ExportError(
            f"the collector at {url} answered {response.status_code} "
            f"{response.reason_phrase}: {_body_text(response)}. Nothing more was sent; the "
            "export can be run again (the spans keep their ids, so none is duplicated)."
        )
    return _rejected(response)


def _body_text(response: httpx.Response) -> str:
    text = (
        response.text.strip() if "protobuf" not in response.headers.get("content-type", "") else ""
    )
    return (text[:300] + "...") if len(text) > 300 else (text or "(no message)")


def _rejected(response: httpx.Response) -> int:
    """The spans a 2xx answer says were rejected (OTLP's partial success)."""
    if "protobuf" not in response.headers.get("content-type", "") or not response.content:
        return 0
    answer = ExportTraceServiceResponse()
    try:
        answer.ParseFromString(response.content)
    except Exception:  # an answer we cannot read is no rejection we can count
        return 0
    return int(answer.partial_success.rejected_spans)
