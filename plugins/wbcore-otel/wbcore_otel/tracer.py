"""The OpenTelemetry tracer of one runtime: spans at the core's seams, exported over OTLP.

One ``TracerProvider`` per runtime (never the process-global one: two runtimes in one
process export separately), a ``BatchSpanProcessor`` (a bounded queue; export runs off
the call path), the OTLP/HTTP protobuf exporter. The provider is shut down at exit, within
the export timeout (whatever the collector does).

Tool-call spans come from the call hooks (this object is registered as a plugin of its
runtime): ``wb.call`` starts in ``wbcore_call_started`` and is made current, so broker
decisions made during the call nest under it, and ends in ``wbcore_call_finished``.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from wbcore_otel.settings import Settings
from wbcore_runtime import hookimpl
from wbcore_runtime.contract import telemetry


def _value(value: Any) -> Any:
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple, frozenset, set)):
        items = sorted(value) if isinstance(value, (frozenset, set)) else list(value)
        return [str(v) for v in items]
    return str(value)


class _Span:
    """:class:`wbcore_runtime.contract.telemetry.Span` over an OpenTelemetry span."""

    __slots__ = ("outcome", "span")

    def __init__(self, span: Any) -> None:
        self.span = span
        self.outcome: str | None = None

    def set(self, key: str, value: Any) -> None:
        if key == telemetry.OUTCOME:
            self.outcome = str(value)
        self.span.set_attribute(key, _value(value))

    def end(self, outcome: str | None = None) -> None:
        if outcome is not None:
            self.set(telemetry.OUTCOME, outcome)
        if self.outcome in ("error", "denied", "timeout"):
            self.span.set_status(Status(StatusCode.ERROR, self.outcome))
        self.span.end()


class OtelTracer:
    def __init__(self, provider: TracerProvider, *, flush_timeout_s: float = 10.0,
                 parent: Any = None) -> None:
        self.provider = provider
        #: The remote parent a child process was started under (``TRACEPARENT``), else ``None``.
        self.parent = parent
        self.tracer = provider.get_tracer("wbcore")
        self.flush_timeout_s = flush_timeout_s
        self._calls: dict[int, tuple[_Span, Any]] = {}
        self._lock = threading.Lock()
        ref = weakref.ref(self)
        atexit.register(lambda: None if (t := ref()) is None else t.shutdown())

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> OtelTracer:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        s = Settings.from_env(env)
        exporter = OTLPSpanExporter(endpoint=s.endpoint, headers=s.headers or None, timeout=s.timeout_s)
        parent = None
        if env.get("TRACEPARENT"):
            carrier = {"traceparent": env["TRACEPARENT"], "tracestate": env.get("TRACESTATE", "")}
            parent = TraceContextTextMapPropagator().extract(carrier)
        return cls.with_exporter(exporter, service=s.service, flush_timeout_s=s.timeout_s, parent=parent)

    @classmethod
    def with_exporter(cls, exporter: SpanExporter, *, service: str = "wbcore", flush_timeout_s: float = 10.0,
                      parent: Any = None) -> OtelTracer:
        # shut down at exit by OtelTracer alone, within the export timeout
        provider = TracerProvider(resource=Resource.create({"service.name": service}), shutdown_on_exit=False)
        provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=8192,
                                                       schedule_delay_millis=1000,
                                                       export_timeout_millis=int(flush_timeout_s * 1000)))
        return cls(provider, flush_timeout_s=flush_timeout_s, parent=parent)

    def _context(self) -> Any:
        """The parent for a new span: the current span, else the remote parent (if any)."""
        if self.parent is not None and not trace.get_current_span().get_span_context().is_valid:
            return self.parent
        return None

    # --- wbcore_runtime.contract.telemetry.Tracer --------------------------------------------------------

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any]) -> Iterator[_Span]:
        with self.tracer.start_as_current_span(name, context=self._context(),
                                               attributes={k: _value(v) for k, v in attributes.items()},
                                               end_on_exit=False, record_exception=True,
                                               set_status_on_exception=True) as raw:
            s = _Span(raw)
            try:
                yield s
            except BaseException:
                s.end("error")
                raise
            s.end(None if s.outcome is not None else "ok")

    def start(self, name: str, attributes: Mapping[str, Any]) -> _Span:
        return _Span(self.tracer.start_span(name, context=self._context(),
                                            attributes={k: _value(v) for k, v in attributes.items()}))

    def flush(self, timeout_s: float = 10.0) -> bool:
        return bool(self.provider.force_flush(int(timeout_s * 1000)))

    def current(self, span: Any) -> AbstractContextManager[Any]:
        return trace.use_span(span.span, end_on_exit=False)

    def carrier(self, span: Any) -> dict[str, str]:
        out: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(out, context=trace.set_span_in_context(span.span))
        return {k.upper(): v for k, v in out.items() if k in ("traceparent", "tracestate") and v}

    def shutdown(self) -> None:
        """Export what is queued and stop, waiting at most the export timeout: the SDK's shutdown
        waits 30 s for an export in progress, and one to a collector that answers a byte at a
        time (each read in time) never ends; it is left to finish in its daemon thread."""
        stopping = threading.Thread(target=self.provider.shutdown, name="wbcore-otel-shutdown", daemon=True)
        stopping.start()
        stopping.join(self.flush_timeout_s)

    # --- tool calls: the call hooks --------------------------------------------------------

    @hookimpl
    def wbcore_call_started(self, call: Any) -> None:
        attrs = {"wb.command": call.name, "wb.shape": call.shape, "wb.principal": str(call.principal),
                 telemetry.TOOLKIT: call.toolkit or "", telemetry.TIER: call.tier or "",
                 "wb.caps": sorted(call.caps)}
        raw = self.tracer.start_span(f"wb.call {call.name}", context=self._context(),
                                     attributes={k: _value(v) for k, v in attrs.items()})
        token = otel_context.attach(trace.set_span_in_context(raw))
        with self._lock:
            self._calls[id(call)] = (_Span(raw), token)

    @hookimpl
    def wbcore_call_finished(self, call: Any, result: Any) -> None:
        with self._lock:
            held = self._calls.pop(id(call), None)
        if held is None:
            return
        s, token = held
        otel_context.detach(token)  # logs (never raises) if the context moved on; the span still ends
        kind = getattr(result, "kind", None)
        if kind is not None:  # a WbError
            s.set("wb.error", kind.value)
            s.end("timeout" if kind.value == "timeout" else "error")
            return
        code = getattr(result, "exit_code", None)
        usage = getattr(result, "usage", None)
        if code is not None:
            s.set("wb.exit_code", code)
        if usage is not None:
            s.set("wb.wall_s", usage.wall_s)
            s.set("wb.bytes_out", usage.bytes_out)
            if usage.fuel is not None:
                s.set("wb.fuel", usage.fuel)
        s.end("ok" if code in (0, None) else "exit")
