"""Telemetry seams: the spans the core opens, when a tracer is installed, and nothing when not.

A plugin serves a tracer through ``wbcore_tracer(runtime)`` (wbcore-otel: OpenTelemetry over
OTLP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set). The runtime asks once, when it opens
(:func:`open_tracer`); with no tracer ``runtime.tracer`` is ``None`` and every seam below
is one attribute read and a ``None`` test — the call path is unchanged (``call_hooks``
stays ``None`` too). A tracer is registered as a plugin of its runtime, so it may
implement ``wbcore_call_started`` / ``wbcore_call_finished`` for the tool-call spans.

The span tree (names and attributes: docs/telemetry.md)::

    wb.pipeline → wb.stage → wb.agent.step → wb.call → wb.broker
                           ↘ wb.call → wb.broker

Seams: :mod:`wbcore_fabric_local.pipeline` (pipeline, stage), :mod:`wbcore_runtime.dispatch.fabric`
(one span per map), :class:`wbcore_runtime.dispatch.dock.Dock` (each broker decision), the call
hooks (each tool call), and :func:`agent_step` for the agent loop.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices


def _log() -> Any:
    import logging  # only to warn: a call with telemetry off never imports it

    return logging.getLogger(__name__)


#: Attribute names shared by every tracer (OpenTelemetry GenAI names where one exists).
MODEL = "gen_ai.request.model"
PROVIDER = "gen_ai.system"
TOKENS_IN = "gen_ai.usage.input_tokens"
TOKENS_OUT = "gen_ai.usage.output_tokens"
COST = "wb.cost_usd"
TOOLKIT = "wb.toolkit"
CAP = "wb.cap"
TIER = "wb.tier"
OUTCOME = "wb.outcome"


@runtime_checkable
class Span(Protocol):
    def set(self, key: str, value: Any) -> None:
        """Set one attribute (str, bool, int, float, or a sequence of one of them)."""

    def end(self, outcome: str | None = None) -> None:
        """End the span (idempotent); ``outcome`` sets :data:`OUTCOME` (``ok``, ``error``…)."""


@runtime_checkable
class Tracer(Protocol):
    def span(self, name: str, attributes: Mapping[str, Any]) -> AbstractContextManager[Span]:
        """A span that is the current one inside the block (children nest under it); it ends
        with the block, outcome ``error`` (and the exception recorded) if the block raised."""

    def start(self, name: str, attributes: Mapping[str, Any]) -> Span:
        """A child of the current span that is *not* made current (a generator's span)."""

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Export what is buffered; ``True`` when it all went out in time."""

    def carrier(self, span: Span) -> dict[str, str]:
        """Environment variables that make ``span`` the parent of the spans a child
        process's runtime opens (W3C ``TRACEPARENT`` / ``TRACESTATE``): fabric workers."""

    def current(self, span: Span) -> AbstractContextManager[Any]:
        """``span`` (from :meth:`start`) made the current span inside the block, on this
        thread: spans opened in the block, or in a thread started with a copy of its
        ``contextvars`` context (the ``threads`` fabric engine's pool), are its children."""


class _Noop:
    __slots__ = ()

    def set(self, key: str, value: Any) -> None:
        pass

    def end(self, outcome: str | None = None) -> None:
        pass


NOOP: Span = _Noop()
_NULL = nullcontext(NOOP)


def open_tracer(runtime: RuntimeServices) -> Tracer | None:
    """The tracer a plugin serves for ``runtime`` (``None``: telemetry is off). A tracer
    that fails to start is a warning, never a runtime that does not open."""
    # Plugins not loaded yet and indexed (wbcore_runtime.plugins.index): call the same hook
    # implementations, in pluggy's order, without importing every plugin to find them.
    until = getattr(runtime, "index_until_loaded", None)
    index = until() if until is not None else None
    try:
        if index is not None:  # pluggy's calls are untyped: the tracer is what wbcore_tracer returns
            tracer: Tracer | None = index.call_first("wbcore_tracer", runtime=runtime)
        else:
            tracer = runtime.pm.hook.wbcore_tracer(runtime=runtime)
    except Exception as exc:  # noqa: BLE001 - a broken exporter must not take the runtime down
        _log().warning("telemetry is off: the tracer failed to start (%s: %s)", type(exc).__name__, exc)
        return None
    if tracer is not None:
        runtime.pm.register(tracer, name="wbcore-tracer")  # it may implement the call hooks
    return tracer


def flush(runtime: RuntimeServices, timeout_s: float = 10.0) -> None:
    """Export what ``runtime``'s tracer buffered, if it opened one: for a process that ends
    with ``os._exit`` (a fabric worker), which skips the exporter's own atexit flush."""
    tracer = runtime.__dict__.get("tracer")  # never opens one (and loads plugins) just to flush
    if tracer is not None:
        try:
            tracer.flush(timeout_s)
        except Exception as exc:  # noqa: BLE001 - a collector that is down must not keep a worker alive
            _log().warning("telemetry: the last spans were not exported (%s: %s)", type(exc).__name__, exc)


def span(runtime: RuntimeServices, name: str,
         attributes: Mapping[str, Any] | None = None) -> AbstractContextManager[Span]:
    """``with telemetry.span(runtime, "wb.x", {...}) as s:`` — a no-op when telemetry is off."""
    tracer: Tracer | None = getattr(runtime, "tracer", None)
    if tracer is None:
        return _NULL
    return tracer.span(name, attributes or {})


def agent_step(runtime: RuntimeServices, *, step: int, agent: str | None = None, model: str | None = None,
               provider: str | None = None, session: str | None = None) -> AbstractContextManager[Span]:
    """The agent loop's seam: one span per step (an LLM turn and the tool calls it asks
    for). Tool calls made inside the block nest under it. Set what is known at the end::

        with telemetry.agent_step(runtime, step=n, agent="helper", model="gpt-x", provider="openai") as s:
            reply = provider.complete(...)
            s.set(telemetry.TOKENS_IN, reply.usage.input); s.set(telemetry.TOKENS_OUT, reply.usage.output)
            s.set(telemetry.COST, reply.cost)
            ... run the tool calls ...
    """
    tracer: Tracer | None = getattr(runtime, "tracer", None)
    if tracer is None:
        return _NULL
    attrs: dict[str, Any] = {"wb.agent.step": step}
    for key, value in (("wb.agent", agent), (MODEL, model), (PROVIDER, provider), ("wb.session", session)):
        if value is not None:
            attrs[key] = value
    return tracer.span("wb.agent.step", attrs)


def traced(runtime: RuntimeServices, name: str, attributes: Mapping[str, Any], items: Iterator[Any],
           outcome: Any = None) -> Iterator[Any]:
    """``items`` inside a span that ends when the iteration does (fabric maps). ``outcome``,
    if given, is called per item and returns ``False`` for a failed one (counted)."""
    tracer = getattr(runtime, "tracer", None)
    if tracer is None:
        return items
    return spanning(tracer.start(name, attributes), items, outcome)


def _each_within(tracer: Tracer, s: Span, items: Iterator[Any]) -> Iterator[Any]:
    while True:
        with tracer.current(s):
            try:
                item = next(items)
            except StopIteration:
                return
        yield item


def spanning(s: Span, items: Iterator[Any], outcome: Any = None, *, tally: Any = None,
             current: Tracer | None = None) -> Iterator[Any]:
    """``items`` with the already started span ``s`` ended when the iteration ends. ``tally``,
    for items that each stand for several inputs (a fabric chunk), returns ``(inputs, failed)``.
    With ``current`` (the tracer that started ``s``), each item is produced with ``s`` current
    (:meth:`Tracer.current`): work the producer starts on threads in a copy of its context nests
    under ``s``."""
    n = failed = 0
    result = "error"
    try:
        for item in items if current is None else _each_within(current, s, items):
            if tally is not None:
                k, bad = tally(item)
                n += k
                failed += bad
            else:
                n += 1
                if outcome is not None and not outcome(item):
                    failed += 1
            yield item
        result = "ok" if not failed else "partial"
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()  # an engine's batch ends now (its workers stop), not when it is collected
        s.set("wb.items", n)
        s.set("wb.failed", failed)
        s.end(result)
