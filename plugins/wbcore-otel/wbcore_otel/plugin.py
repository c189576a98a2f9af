"""Entry point of wbcore-otel. Nothing of OpenTelemetry is imported unless tracing is on."""

from __future__ import annotations

from wbcore_otel import hook
from wbcore_runtime import hookimpl

#: The function itself lives in wbcore_otel.hook (importable without pluggy); marked here.
wbcore_tracer = hookimpl(hook.wbcore_tracer)
