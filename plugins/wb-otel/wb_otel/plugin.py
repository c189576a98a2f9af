"""Entry point of wb-otel. Nothing of OpenTelemetry is imported unless tracing is on."""

from __future__ import annotations

from wb_otel import hook
from wbcore import hookimpl

#: The function itself lives in wb_otel.hook (importable without pluggy); marked here.
wbcore_tracer = hookimpl(hook.wbcore_tracer)
