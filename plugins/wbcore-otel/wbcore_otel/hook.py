"""The ``wbcore_tracer`` implementation, in a module that does not import pluggy:
``wbcore_otel.plugin`` marks it as the hook implementation, and a ``wbx run`` that reads its
plugins from the index (``wbcore_runtime.plugins.index``) imports only this to learn that tracing
is off. Nothing of OpenTelemetry is imported unless tracing is on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
DISABLED = "OTEL_SDK_DISABLED"


def enabled(env: Mapping[str, str]) -> bool:
    """Whether the environment turns tracing on (``wbcore_otel.settings`` reads the rest)."""
    if env.get(DISABLED, "").strip().lower() == "true":
        return False
    return bool(env.get(TRACES_ENDPOINT) or env.get(ENDPOINT))


def wbcore_tracer(runtime: Any) -> Any:
    """A tracer when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``…_TRACES_ENDPOINT``) is set in the
    runtime's environment and ``OTEL_SDK_DISABLED`` is not ``true``; else ``None`` (no cost)."""
    if not enabled(runtime.env):
        return None
    from wbcore_otel.tracer import OtelTracer

    return OtelTracer.from_env(runtime.env)
