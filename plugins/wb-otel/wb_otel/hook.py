"""The ``wbcore_tracer`` implementation, in a module that does not import pluggy:
``wb_otel.plugin`` marks it as the hook implementation, and a ``wbx run`` that reads its
plugins from the index (``wbcore.plugin_index``) imports only this to learn that tracing
is off. Nothing of OpenTelemetry is imported unless tracing is on."""

from __future__ import annotations

from typing import Any

from wb_otel.settings import enabled


def wbcore_tracer(runtime: Any) -> Any:
    """A tracer when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``…_TRACES_ENDPOINT``) is set in the
    runtime's environment and ``OTEL_SDK_DISABLED`` is not ``true``; else ``None`` (no cost)."""
    if not enabled(runtime.env):
        return None
    from wb_otel.tracer import OtelTracer

    return OtelTracer.from_env(runtime.env)
