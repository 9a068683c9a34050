"""OpenTelemetry comes with the ``otel`` extra: importing this package without it raises
:class:`ConfigurationError` naming the extra, not a bare ``ImportError``."""

from __future__ import annotations

from ...errors import ConfigurationError

try:
    import opentelemetry.proto
    import opentelemetry.trace  # noqa: F401
except ImportError:
    raise ConfigurationError(
        "OpenTelemetry is not installed: agentledger's tracing (OpenTelemetryTracer, "
        "export_otlp, `agentledger export otlp`) comes with the otel extra. Install it: "
        "pip install 'agentledger[otel]'"
    ) from None
