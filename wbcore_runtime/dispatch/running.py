"""Calls running now, and cutting them off when the grant they run with is revoked.

Revocation is checked on every broker call (``wbcore_runtime.dispatch.dock``), but a guest that is
computing, or blocked in a long broker call, makes no next call. So every registered
command a caller runs (``wbcore_runtime.dispatch.dispatcher.call_command``: every surface and every
nested exec / commands / parallel call) is entered here with a :class:`CallCancel`, the
event every tier already polls at its deadline tick (the wasmtime epoch guard, the
os_process watchdog, the container and microvm waits). One watcher thread per runtime,
alive only while calls run, reads the home's change counter (``wbcore_runtime.store.generation``,
a memory read) every :data:`POLL_S`; when it moved — ``wbx toolkit revoke`` (consent),
a persisted Dock revocation — or when this process's Dock revokes a principal, each
running call is checked again through the one resolution (``dispatch.resolve``: effective
caps from ``consent.effective_caps``) and the Dock's revocations; a call whose grant
shrank or whose principal is revoked is cancelled, and ``call_command`` raises
capability-denied (reason ``revoked``) naming why. The bound is :data:`POLL_S` plus the
tier's own cancel latency (an epoch tick, the watchdog's 20 ms).
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.errors import CapabilityDenied, WbError
from wbcore_runtime.dispatch import resolve as resolution

if TYPE_CHECKING:
    from wbcore_runtime.contract.calls import Principal
    from wbcore_runtime.dispatch.resolve import Resolved
    from wbcore_runtime.contract.host import RuntimeServices

#: How often the watcher reads the change counter while calls run (seconds).
POLL_S = 0.1
#: The watcher thread ends after this long without a running call.
IDLE_S = 5.0


#: How often a wait on a call's cancel event also looks at the caller's own event.
PARENT_POLL_S = 0.02


class CallCancel(threading.Event):
    """A call's cancel event: set by a revocation, and set whenever the caller's own event
    (``parent``) is — tiers only ask ``is_set()``."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__()
        self.parent = parent

    def is_set(self) -> bool:
        return super().is_set() or (self.parent is not None and self.parent.is_set())

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for either event. The caller's own event cannot wake this one, so a guest
        sleeping on it (``poll_oneoff``) looks at the caller's every :data:`PARENT_POLL_S`."""
        if self.parent is None:
            return super().wait(timeout)
        import time

        end = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = PARENT_POLL_S if end is None else min(PARENT_POLL_S, end - time.monotonic())
            if left <= 0:
                return False
            super().wait(left)
        return True


class Running:
    """One call running now: what it was resolved as, who runs it, how to stop it (as
    ``@dataclass(eq=False)`` did, written by hand: ``wbcore_runtime.contract.frozen``)."""

    kind: str
    name: str
    caps: frozenset[str]
    principal: str
    cancel: CallCancel
    #: Why it was cut off (``None`` while it may run).
    cut: str | None
    #: Its principal was already revoked when it started: the Dock refuses its broker calls
    #: with a status the guest handles; only a change after its start cuts it off.
    revoked_at_start: bool
    __match_args__ = ("kind", "name", "caps", "principal", "cancel", "cut", "revoked_at_start")

    def __init__(self, kind: str, name: str, caps: frozenset[str], principal: str, cancel: CallCancel,
                 cut: str | None = None, revoked_at_start: bool = False) -> None:
        self.kind, self.name, self.caps, self.principal, self.cancel = kind, name, caps, principal, cancel
        self.cut, self.revoked_at_start = cut, revoked_at_start

    def __repr__(self) -> str:
        shown = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.__match_args__)
        return f"{self.__class__.__qualname__}({shown})"


class RunningCalls:
    """The table of running calls of one runtime and its revocation watcher."""

    def __init__(self, runtime: RuntimeServices) -> None:
        self.runtime = runtime
        self._lock = threading.Lock()
        self._calls: dict[int, Running] = {}
        self._ids = itertools.count()
        self._watcher: threading.Thread | None = None
        self._wake = threading.Event()
        self._seen: int | None = None

    def enter(self, resolved: Resolved, principal: Principal, cancel: Any = None) -> tuple[int, Running]:
        call = Running(resolved.kind, resolved.name, resolved.caps, principal.key, CallCancel(cancel))
        call.revoked_at_start = self._revoked(call) is not None
        with self._lock:
            n = next(self._ids)
            self._calls[n] = call
            if self._watcher is None or not self._watcher.is_alive():
                self._seen = self.runtime.registry.generation.value()
                self._watcher = threading.Thread(target=self._watch, name="wb-revocation-watch", daemon=True)
                self._watcher.start()
        return n, call

    def leave(self, n: int) -> None:
        with self._lock:
            self._calls.pop(n, None)

    def running(self) -> list[Running]:
        with self._lock:
            return list(self._calls.values())

    def sweep(self) -> None:
        """Check every running call now (the Dock calls this when it revokes)."""
        self._wake.set()

    def refusal(self, call: Running) -> CapabilityDenied:
        exc = CapabilityDenied(f"{call.name}: stopped while running: {call.cut}")
        exc.reason = "revoked"  # type: ignore[attr-defined]
        return exc

    # --- the watcher ---------------------------------------------------------------

    def _watch(self) -> None:
        idle = 0.0
        gen = self.runtime.registry.generation
        while True:
            woke = self._wake.wait(POLL_S)
            self._wake.clear()
            calls = self.running()
            if not calls:
                idle += POLL_S
                if idle >= IDLE_S:
                    with self._lock:
                        if not self._calls:
                            self._watcher = None
                            return
                continue
            idle = 0.0
            now = gen.value()
            if not woke and now == self._seen:
                continue
            self._seen = now
            for call in calls:
                if call.cut is None:
                    why = self._why(call)
                    if why:
                        call.cut = why
                        call.cancel.set()

    def _revoked(self, call: Running) -> str | None:
        revoked = self.runtime.revocations.revoked
        for cap in ("*", *sorted(call.caps)):
            if revoked(call.principal, cap):
                return f"{call.principal} was revoked" + ("" if cap == "*" else f" for {cap!r}")
        return None

    def _why(self, call: Running) -> str | None:
        if not call.revoked_at_start:
            why = self._revoked(call)
            if why:
                return why
        try:
            now = resolution.resolve(self.runtime, call.kind, call.name)
        except WbError:
            # not a revocation (an edited or rebuilt toolkit, say): its next call decides
            return None
        lost = call.caps - now.caps
        if lost:
            return f"the grant of {', '.join(sorted(lost))} was withdrawn"
        return None
