"""OpenTelemetry traces of agentledger's runs, by the GenAI semantic conventions of semantic
conventions v1.44.0 (:data:`SEMCONV_VERSION`): the ``otel`` extra
(``pip install 'agentledger[otel]'``).

Live, :class:`OpenTelemetryTracer` given to ``AgentBuilder.with_tracing`` emits the spans of
each run as it happens, to the application's tracer provider; after the fact,
:func:`export_otlp` (``agentledger export otlp``) turns the runs a ledger recorded into the
same spans, sent to an OTLP/HTTP collector or written as OTLP JSON.

Spans: ``invoke_agent {agent}`` per run, ``chat {model}`` per model call and
``execute_tool {tool}`` per tool call under it, and a subagent's run under the tool call that
spawned it. Message contents are left out unless asked for
(``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, or ``capture_content=True``).
"""

# First: a missing extra is a clear error naming it, before anything imports OpenTelemetry.
from . import _require  # noqa: F401  (isort: keep first)
from ._attributes import capture_content_from_env
from ._export import DEFAULT_SERVICE_NAME, OtlpExport, export_otlp
from ._live import OpenTelemetryTracer
from ._semconv import CAPTURE_CONTENT_ENV, SEMCONV_VERSION

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "DEFAULT_SERVICE_NAME",
    "SEMCONV_VERSION",
    "OpenTelemetryTracer",
    "OtlpExport",
    "capture_content_from_env",
    "export_otlp",
]
