"""OpenTelemetry comes with the ``otel`` extra (see :mod:`.._extra`)."""

from __future__ import annotations

from .._extra import require

require(
    ("opentelemetry.proto", "opentelemetry.trace"),
    library="OpenTelemetry",
    what="agentledger's tracing (OpenTelemetryTracer, export_otlp, `agentledger export otlp`)",
    extra="otel",
)
