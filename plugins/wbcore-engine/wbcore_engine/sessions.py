"""The protocol the engine's session endpoints speak to, and where it comes from.

The agent loop (issue 15 items 2-3) owns sessions; the engine only serves them. A
*session host* is any object with these six operations; the engine takes it from the
runtime — the agent loop's ``runtime.agents.sessions`` (``start``/``get`` and ``Session``
objects, adapted by :class:`LoopSessions`), or an object that already speaks this protocol
at ``runtime.sessions`` — or from its embedder (``wbcore_engine.app.build(runtime,
sessions=...)``). With none, every session endpoint answers ``501`` with
:data:`NOT_AVAILABLE`.

Every call is bounded: :meth:`SessionHost.events` waits at most ``timeout`` seconds and
returns what it has (possibly nothing), so the SSE loop can send heartbeats, notice a
client that left, and stop at the stream's own deadline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

#: The statuses after which a session's event stream ends.
TERMINAL = frozenset({"done", "failed", "cancelled", "error", "finished", "max-steps", "timeout"})
#: What an HTTP client may set for a run (``options``); grants (``exec``, ``build``), the
#: workdir and the tenant are the deployer's, on the engine's host, never a request's.
RUN_OPTIONS: dict[str, type | tuple[type, ...]] = {
    "model": str, "max_steps": int, "tool_timeout": (int, float), "max_calls": int,
    "run_timeout": (int, float),
}
#: The documented range of each numeric option (inclusive; docs/engine.md), and the longest model name.
#: Each lies within what the agent loop runs (``max_calls`` ≤ ``wbcore_agent.loop.MAX_CALLS_LIMIT``):
#: a value taken here is a run, never a session that fails (tests/integration/test_agent_loop.py).
RUN_RANGES: dict[str, tuple[float, float]] = {"max_steps": (1, 200), "tool_timeout": (0.1, 600.0),
                                               "max_calls": (1, 256), "run_timeout": (1.0, 86400.0)}
MAX_MODEL_CHARS = 200


def check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` as a run may take them, or ``InvalidArgs`` naming the option, what was
    wrong and the allowed range: checked before a session starts, so a bad value is a 400,
    never a session that fails later."""
    import math

    from wbcore_runtime.contract.errors import InvalidArgs

    out: dict[str, Any] = {}
    for key, value in options.items():
        typ = RUN_OPTIONS.get(key)
        if typ is None:
            raise InvalidArgs(
                f"option {key!r} cannot be set over HTTP; allowed: {', '.join(sorted(RUN_OPTIONS))} "
                "(grants and the workdir are set on the engine's host)"
            )
        if not isinstance(value, typ) or isinstance(value, bool):
            raise InvalidArgs(f"option {key!r} has the wrong type ({type(value).__name__})")
        # every ranged option is a number (RUN_OPTIONS)
        if key in RUN_RANGES and isinstance(value, (int, float)):
            low, high = RUN_RANGES[key]
            if not (math.isfinite(value) and low <= value <= high):
                raise InvalidArgs(f"option {key!r} = {value!r} is outside {low:g}..{high:g}")
        if key == "model" and isinstance(value, str) and not 0 < len(value) <= MAX_MODEL_CHARS:
            raise InvalidArgs(f"option 'model' must be 1..{MAX_MODEL_CHARS} characters")
        out[key] = value
    return out

NOT_AVAILABLE = ("agent sessions are not available in this engine: no session host is installed "
                 "(the agent loop provides Runtime.agent / runtime.sessions; issue 15 items 2-3). "
                 "Toolkits, push, calls and the audit trail work without it.")


@runtime_checkable
class SessionHost(Protocol):
    """What the engine needs from the agent loop's sessions."""

    def create(self, *, agent: Any, task: str, options: Mapping[str, Any]) -> str:
        """Start a run in the background; return its session id (``[A-Za-z0-9._-]+``).
        ``agent`` is an agent id, or the definition the client sent as Org (``runtime.agents.parse``)."""

    def status(self, session: str) -> Mapping[str, Any]:
        """``{"id", "status", ...}``; ``status`` in :data:`TERMINAL` once it ended.
        Raises ``wbcore_runtime.contract.errors.NotFound`` for an unknown id."""

    def events(self, session: str, *, after: int, timeout: float) -> Sequence[Mapping[str, Any]]:
        """The events with ``seq > after`` (each a JSON-shaped mapping with an int ``seq``),
        waiting at most ``timeout`` seconds for the first one."""

    def put_review(self, session: str, item: Mapping[str, Any]) -> Mapping[str, Any]:
        """Add an item to the session's review queue; return it as stored."""

    def take_review(self, session: str, *, limit: int) -> Sequence[Mapping[str, Any]]:
        """Remove and return up to ``limit`` items of the review queue, oldest first."""

    def cancel(self, session: str) -> Mapping[str, Any]:
        """Stop the run; return its status."""


class LoopSessions:
    """:class:`SessionHost` over the agent loop's sessions (``runtime.agents.sessions``:
    ``start(agent, task, **options) -> Session``, ``get(id)``; a ``Session`` has ``id``,
    ``status()``, ``poll(after, timeout)``, ``put_review(item) -> position``,
    ``take_review() -> item | None`` and ``cancel()``). Duck-typed: plugins never import
    each other."""

    def __init__(self, sessions: Any) -> None:
        self.sessions = sessions

    def create(self, *, agent: Any, task: str, options: Mapping[str, Any]) -> str:
        return str(self.sessions.start(agent, task, **check_options(options)).id)

    def status(self, session: str) -> Mapping[str, Any]:
        return dict(self.sessions.get(session).status())

    def events(self, session: str, *, after: int, timeout: float) -> Sequence[Mapping[str, Any]]:
        return list(self.sessions.get(session).poll(after, timeout))

    def put_review(self, session: str, item: Mapping[str, Any]) -> Mapping[str, Any]:
        position = self.sessions.get(session).put_review(dict(item))
        return {"position": position, "item": dict(item)}

    def take_review(self, session: str, *, limit: int) -> Sequence[Mapping[str, Any]]:
        s = self.sessions.get(session)
        out: list[Mapping[str, Any]] = []
        while len(out) < limit:
            item = s.take_review()
            if item is None:
                break
            out.append(item)
        return out

    def cancel(self, session: str) -> Mapping[str, Any]:
        s = self.sessions.get(session)
        s.cancel()
        return dict(s.status())

    # Optional operations: the engine's memory bound, and the console's review page (a host
    # without them keeps its own bounds, and has no decisions).

    def bound_ended(self, count: int, seconds: float) -> None:
        """Keep at most ``count`` ended sessions, each for at most ``seconds`` (the engine's
        ``EngineLimits.ended_sessions`` / ``ended_session_s``); a loop without the operation
        keeps its own bounds."""
        bound = getattr(self.sessions, "bound_ended", None)
        if callable(bound):
            bound(count, seconds)

    def review_items(self, session: str) -> Sequence[Mapping[str, Any]] | None:
        """Every review item with its position and decision, or ``None`` when the loop keeps none."""
        items = getattr(self.sessions.get(session), "review_items", None)
        return list(items()) if callable(items) else None

    def decide_review(self, session: str, position: int, decision: str, note: str) -> Mapping[str, Any]:
        """A person's decision on one item (approved / rejected, with a note); the agent reads it."""
        decide = getattr(self.sessions.get(session), "decide_review", None)
        if not callable(decide):
            from wbcore_runtime.contract.errors import InvalidArgs

            raise InvalidArgs("this agent loop keeps no review decisions")
        return dict(decide(position, decision, note))


def host_for(runtime: Any) -> SessionHost | None:
    """The runtime's session host: the agent loop's ``runtime.agents.sessions`` (adapted),
    or an object speaking :class:`SessionHost` at ``runtime.sessions``; ``None`` without."""
    from wbcore_runtime.contract.errors import WbError

    direct = getattr(runtime, "sessions", None)
    if isinstance(direct, SessionHost):
        return direct
    try:
        agents = getattr(runtime, "agents", None)  # the loop driver; raises NotFound with no loop installed
    except WbError:
        return None
    sessions = getattr(agents, "sessions", None) if agents is not None else None
    if isinstance(sessions, SessionHost):
        return sessions
    if (
        sessions is not None
        and callable(getattr(sessions, "start", None))
        and callable(getattr(sessions, "get", None))
    ):
        return LoopSessions(sessions)
    return None
