"""Sessions (seed 004 "Sessions"): an agent run in the background, observable and steerable.

``runtime.agents.sessions`` is the API an engine service serves over HTTP (docs/agents.md):

- ``start(agent, task, **run_options) -> Session`` — the run starts on a worker thread,
  ``max_steps`` 40 unless given;
- ``get(id)`` / ``list()``; ``Session.status()`` — a JSON-ready dict;
- ``Session.events(after=0, timeout=None)`` — an iterator of event dicts
  ``{"seq", "type", "data"}`` (types ``started``, ``text`` (model text deltas),
  ``step`` (one ``_steps.jsonl`` record), ``review``, ``end``), from ``after`` on, blocking
  for new ones, ending after ``end``; ``Session.poll(after, timeout)`` returns the
  waiting ones as a list — what an SSE endpoint writes as ``id: seq`` / ``data: json``;
- ``Session.put_review(item)`` / ``take_review()`` — the review queue, JSONL in the
  run's workdir (the agent's ``file_issue`` tool puts into the same queue);
- ``Session.cancel()`` — the run stops before its next step, the running tool's guest
  at its next epoch tick; ``Session.wait(timeout)`` — the ``RunRecord`` once it ended.

Events are kept in memory (the last ``MAX_EVENTS``; earlier ones are in
``_steps.jsonl``). A session whose host restarted is found again by its run id through
the state in its VFS (``status`` only; ``resume`` it with ``start(..., resume=id)``).

Memory is bounded however long the host serves: a session that ended is kept (its events
readable) for ``KEEP_ENDED_S`` seconds, and at most ``KEEP_ENDED`` ended sessions are
kept, the oldest dropped first (``Sessions.bound_ended`` sets both; the engine service
sets them from its limits). A running session is never dropped. ``get`` on a dropped one
raises ``NotFound`` saying it ended, how, and where its steps and saved state are on disk
(the last ``MAX_DROPPED_NOTES`` dropped sessions are remembered that far).
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wbcore_agent.loop import (RUNNING, SESSION_MAX_STEPS, STATE_PATH, STATE_VOLUME, STEPS_FILE, RunRecord,
                               check_run_id, find_agent, run_agent, state_context)
from wbcore_agent.review import ReviewQueue
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, WbError

MAX_EVENTS = 10_000
MAX_TEXT_EVENTS_PER_STEP = 2000
#: Ended sessions kept in memory (the oldest dropped first), and for how long (seconds).
KEEP_ENDED = 100
KEEP_ENDED_S = 3600.0
#: Dropped sessions remembered (a few hundred bytes each) so ``get`` can say what became of them.
MAX_DROPPED_NOTES = 1000


class Session:
    def __init__(self, sessions: Sessions, run_id: str, agent_id: str, workdir: Path,
                 tenant: str = "dev") -> None:
        self.id = run_id
        self.agent = agent_id
        self.workdir = workdir
        self.tenant = tenant
        #: ``time.monotonic()`` when the run ended and its ``end`` event was sent.
        self.ended_at: float | None = None
        self.review = ReviewQueue(workdir / "_review.jsonl")
        self.cancel_event = threading.Event()
        self.record: RunRecord | None = None
        self.error: str | None = None
        self.started = time.time()
        self._events: list[dict[str, Any]] = []
        self._seq = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._step = 0
        self._texts = 0

    # --- events ---------------------------------------------------------------------

    def emit(self, type_: str, data: Any) -> None:
        with self._cond:
            self._seq += 1
            self._events.append({"seq": self._seq, "type": type_, "data": data, "t": time.time()})
            if len(self._events) > MAX_EVENTS:
                del self._events[: len(self._events) - MAX_EVENTS]
            self._cond.notify_all()

    def _on_step(self, record: dict[str, Any]) -> None:
        self._step = int(record.get("step", self._step))
        self._texts = 0
        self.emit("step", record)

    def _on_text(self, delta: str) -> None:
        if self._texts < MAX_TEXT_EVENTS_PER_STEP:  # a chatty model cannot flood the buffer
            self._texts += 1
            self.emit("text", delta)

    @property
    def ended(self) -> bool:
        return self.record is not None or self.error is not None

    def poll(self, after: int = 0, timeout: float = 0.0) -> list[dict[str, Any]]:
        """Events with ``seq > after``; waits up to ``timeout`` s when there are none yet."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            while True:
                out = [e for e in self._events if e["seq"] > after]
                left = deadline - time.monotonic()
                if out or self.ended or left <= 0:
                    return out
                self._cond.wait(left)

    def events(self, after: int = 0, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Every event from ``after`` on, live, ending after ``end`` (or at ``timeout`` s)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if wait <= 0:
                return
            for ev in self.poll(after, wait):
                after = ev["seq"]
                yield ev
                if ev["type"] == "end":
                    return

    # --- status, review, cancel -------------------------------------------------------

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "agent": self.agent, "step": self._step, "started": self.started,
            "workdir": str(self.workdir), "review_pending": len(self.review.pending()),
        }
        if self.record is not None:
            out.update(self.record.as_dict())
            out["id"] = self.id
        elif self.error is not None:
            out.update({"status": "error", "error": self.error})
        else:
            out["status"] = "cancelling" if self.cancel_event.is_set() else RUNNING
        return out

    def put_review(self, item: dict[str, Any]) -> int:
        if not isinstance(item, dict):
            raise InvalidArgs("a review item is a JSON object")
        n = self.review.put(item)
        self.emit("review", {"position": n, "item": item})
        return n

    def take_review(self) -> dict[str, Any] | None:
        return self.review.take()

    def review_items(self) -> list[dict[str, Any]]:
        """Every item of the queue with its position and decision (``None`` while undecided)."""
        decided = self.review.decisions()
        return [
            {"position": i, "item": item, "decision": decided.get(i)}
            for i, item in enumerate(self.review.items())
        ]

    def decide_review(self, position: int, decision: str, note: str = "") -> dict[str, Any]:
        """A person's decision on one item: recorded, announced as a ``review-decision`` event,
        and read by the agent's ``review_decisions`` tool."""
        d = self.review.decide(position, decision, note)
        self.emit("review-decision", d)
        return d

    def cancel(self) -> None:
        self.cancel_event.set()

    def wait(self, timeout: float | None = None) -> RunRecord | None:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.record


class _SessionReview(ReviewQueue):
    """The run's ``file_issue`` puts into the session's queue and announces it as an event."""

    def __init__(self, session: Session) -> None:
        super().__init__(session.review.path)
        self._session = session

    def put(self, item: dict[str, Any]) -> int:
        n = super().put(item)
        self._session.emit("review", {"position": n, "item": item})
        return n


@dataclass(frozen=True, slots=True)
class _Dropped:
    """What is remembered of a session dropped from memory (for ``Sessions.get``'s answer)."""

    agent: str
    status: str
    tenant: str
    workdir: Path
    error: str
    ran: bool


class Sessions:
    def __init__(self, runtime: Any, keep_ended: int = KEEP_ENDED,
                 keep_ended_s: float = KEEP_ENDED_S) -> None:
        self.runtime = runtime
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._dropped: OrderedDict[str, _Dropped] = OrderedDict()
        self.keep_ended, self.keep_ended_s = keep_ended, keep_ended_s
        self.bound_ended(keep_ended, keep_ended_s)  # checks them

    def bound_ended(self, count: int, seconds: float) -> None:
        """Keep at most ``count`` ended sessions in memory, each for at most ``seconds``."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidArgs(f"ended sessions kept: {count!r} must be a whole number ≥ 0")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < math.inf:
            raise InvalidArgs(f"ended sessions kept for {seconds!r} s: give a finite number of seconds ≥ 0")
        with self._lock:
            self.keep_ended, self.keep_ended_s = count, float(seconds)
            self._prune()

    def _prune(self) -> None:
        """Drop ended sessions past their time, then the oldest past the count (the lock held)."""
        ended = sorted((s for s in self._sessions.values() if s.ended_at is not None),
                       key=lambda s: s.ended_at or 0.0)
        expired = time.monotonic() - self.keep_ended_s
        over = len(ended) - self.keep_ended
        for n, s in enumerate(ended):
            if n < over or (s.ended_at or 0.0) <= expired:
                del self._sessions[s.id]
                rec = s.record
                self._dropped[s.id] = _Dropped(
                    s.agent, rec.status if rec is not None else "error", s.tenant, s.workdir,
                    (rec.error if rec is not None else s.error) or "", ran=rec is not None,
                )
                self._dropped.move_to_end(s.id)
        while len(self._dropped) > MAX_DROPPED_NOTES:
            self._dropped.popitem(last=False)

    def start(self, agent: Any, task: str | None, **kw: Any) -> Session:
        """Start a run in the background; returns at once with its session."""
        agent_def = find_agent(self.runtime, agent)
        resume = kw.pop("resume", None)
        resuming = resume is not None
        run_id = check_run_id(
            resume or kw.pop("run_id", None) or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8]
        )  # before its folder is made
        workdir = Path(kw.pop("workdir", None) or Path(self.runtime.home) / "agents" / "runs" / run_id)
        workdir.mkdir(parents=True, exist_ok=True)
        kw.setdefault("max_steps", SESSION_MAX_STEPS)
        session = Session(self, run_id, agent_def.id, workdir, str(kw.get("tenant", "dev")))
        with self._lock:
            self._prune()
            old = self._sessions.get(run_id)
            if old is not None and not old.ended:
                raise InvalidArgs(f"session {run_id} is still running")
            self._sessions[run_id] = session
            self._dropped.pop(run_id, None)

        def work() -> None:
            session.emit("started", {"id": run_id, "agent": agent_def.id, "task": task})
            try:
                opts = dict(
                    kw, on_step=session._on_step, on_text=session._on_text, cancel=session.cancel_event,
                    review=_SessionReview(session), workdir=workdir,
                )
                if resuming:
                    session.record = run_agent(self.runtime, agent_def, None, resume=run_id, **opts)
                else:
                    session.record = run_agent(self.runtime, agent_def, task, run_id=run_id, **opts)
                session.emit("end", session.record.as_dict())
            except WbError as exc:
                session.error = f"{exc.name}: {exc.message}"
                session.emit("end", {"status": "error", "error": session.error})
            except Exception as exc:  # noqa: BLE001 - a bug ends this session, never the host
                session.error = f"internal: {type(exc).__name__}: {exc}"
                session.emit("end", {"status": "error", "error": session.error})
            finally:
                with self._lock:
                    session.ended_at = time.monotonic()
                    self._prune()

        session._thread = threading.Thread(target=work, name=f"agent-session-{run_id}", daemon=True)
        session._thread.start()
        return session

    def resume(self, run_id: str, agent: Any, **kw: Any) -> Session:
        """Continue a run whose host stopped, from the state in its VFS."""
        return self.start(agent, None, resume=run_id, **kw)

    def get(self, session_id: str) -> Session:
        with self._lock:
            self._prune()
            found = self._sessions.get(session_id)
            dropped = self._dropped.get(session_id)
            known = ", ".join(self._sessions) or "(none)"
        if found is not None:
            return found
        if dropped is not None:
            raise NotFound(self._dropped_note(session_id, dropped))
        raise NotFound(f"no session {session_id!r} in this process; known: {known}")

    def _dropped_note(self, run_id: str, d: _Dropped) -> str:
        """What became of a dropped session, and what of it is still on disk (looked at now)."""
        where = []
        if (d.workdir / STEPS_FILE).is_file():
            where.append(f"its steps are in {d.workdir / STEPS_FILE}")
        if d.ran:  # its VFS exists (a run that never started has none: looking would make one)
            ctx = state_context(self.runtime, run_id, d.tenant, d.agent)
            try:
                self.runtime.dock.call(ctx, "vfs", "stat", {"path": STATE_PATH, "volume": STATE_VOLUME})
                where.append(
                    f"its saved state is in its VFS (instance agent-{run_id}, {STATE_VOLUME}:{STATE_PATH})"
                )
            except WbError:
                pass
        on_disk = "; ".join(where) if where else "nothing of it is left on disk"
        why = f": {d.error[:200]}" if d.error else ""
        return (
            f"session {run_id} ended ({d.status}{why}) and was dropped from this process's memory (it keeps "
            f"the last {self.keep_ended} ended sessions, each for {self.keep_ended_s:g} s); {on_disk}"
        )

    def list(self) -> list[Session]:
        with self._lock:
            self._prune()
            return list(self._sessions.values())
