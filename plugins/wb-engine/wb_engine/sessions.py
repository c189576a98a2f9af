"""The protocol the engine's session endpoints speak to, and where it comes from.

The agent loop (issue 15 items 2-3) owns sessions; the engine only serves them. A
*session host* is any object with these five operations; the engine takes it from the
runtime (``runtime.sessions``, or ``runtime.agent.sessions`` when the agent loop provides
``Runtime.agent``) or from its embedder (``wb_engine.app.build(runtime, sessions=...)``).
With none, every session endpoint answers ``501`` with :data:`NOT_AVAILABLE`.

Every call is bounded: :meth:`SessionHost.events` waits at most ``timeout`` seconds and
returns what it has (possibly nothing), so the SSE loop can send heartbeats, notice a
client that left, and stop at the stream's own deadline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

#: The statuses after which a session's event stream ends.
TERMINAL = frozenset({"done", "failed", "cancelled", "error", "finished"})

NOT_AVAILABLE = ("agent sessions are not available in this engine: no session host is installed "
                 "(the agent loop provides Runtime.agent / runtime.sessions; issue 15 items 2-3). "
                 "Toolkits, push, calls and the audit trail work without it.")


@runtime_checkable
class SessionHost(Protocol):
    """What the engine needs from the agent loop's sessions."""

    def create(self, *, agent: str, task: str, options: Mapping[str, Any]) -> str:
        """Start a run in the background; return its session id (``[A-Za-z0-9._-]+``)."""

    def status(self, session: str) -> Mapping[str, Any]:
        """``{"id", "status", ...}``; ``status`` in :data:`TERMINAL` once it ended.
        Raises ``wbcore.errors.NotFound`` for an unknown id."""

    def events(self, session: str, *, after: int, timeout: float) -> Sequence[Mapping[str, Any]]:
        """The events with ``seq > after`` (each a JSON-shaped mapping with an int ``seq``),
        waiting at most ``timeout`` seconds for the first one."""

    def put_review(self, session: str, item: Mapping[str, Any]) -> Mapping[str, Any]:
        """Add an item to the session's review queue; return it as stored."""

    def take_review(self, session: str, *, limit: int) -> Sequence[Mapping[str, Any]]:
        """Remove and return up to ``limit`` items of the review queue, oldest first."""

    def cancel(self, session: str) -> Mapping[str, Any]:
        """Stop the run; return its status."""


def host_for(runtime: Any) -> SessionHost | None:
    """The runtime's session host, if the agent loop is installed and provides one:
    ``runtime.sessions`` or ``runtime.agent.sessions`` (an object, or a method returning it)."""
    for holder in (runtime, getattr(runtime, "agent", None)):
        if holder is None:
            continue
        candidate = getattr(holder, "sessions", None)
        if callable(candidate) and not isinstance(candidate, SessionHost):
            candidate = candidate()
        if isinstance(candidate, SessionHost):
            return candidate
    return None
