"""The ``os_process`` tier (rung 1): a command runs in a warm, sandboxed worker process.

The worker (``_tier_worker.py``, lent by :mod:`wbcore_process.pool`) is a Python inside the
build sandbox — its own namespaces, no network (not even loopback), no host files but the
Python runtime and wasmtime, read-only; uid 1000, no capabilities, seccomp, rlimits — on
top of wasm's own linear-memory isolation. One call, in frames (:mod:`wbcore_runtime.wire.frames`):

1. ``Exec``: the module's sha256 (and its bytes, the first time this worker sees it),
   argv, stdin, the profile's memory limit and output caps, the time left;
2. when the module imports anything but WASI, ``Link``: the worker names its imports and
   the host answers which ``wb.<cap>`` to link — the Dock's own link-time decision
   (an ungranted cap is ``CapabilityDenied`` naming it, as at tier instance);
3. each ``wb.<cap>`` call of the guest is a ``BrokerCall``; the host answers it with
   ``Dock.call_raw`` under a context made from the request (principal, caps, the call's
   deadline, allowed hosts, toolkit) — the full cadence, audited, in this process — on a
   broker thread, while the caller keeps the deadline. Steps 2 and 3 are the core's one
   caps bridge (:mod:`wbcore_runtime.wire.capbridge`: ``HostBridge`` here, ``GuestCaps`` in the worker,
   the file wbcore-wasmtime serves: ``contract.guest.sandbox_caps``),
   the container tier's too;
4. ``ExecResult``: exit code, output, and how the guest ended; the host maps it to the
   same result or error the instance tier gives (Timeout, LimitExceeded, GuestTrap).

The worker holds no credential and opens no connection; everything it sends is checked
here like untrusted input (sizes, types, the caps it may call). The watchdog SIGKILLs a
worker past the deadline + ``GRACE_S``: the call ends in ``Timeout``; a worker that dies
otherwise ends the call in ``Internal`` ("worker died"), and the pool replaces it.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from wbcore_process.pool import GRACE_S, Pool, Worker, _wasmtime_dir, shared
from wbcore_runtime.contract import errors
from wbcore_runtime.wire import frames
from wbcore_runtime.contract.calls import CallResult, CommandRequest, Usage, check_guest_end
from wbcore_runtime.contract import guest
from wbcore_runtime.wire.capbridge import HostBridge
from wbcore_runtime.contract.errors import Internal, InvalidArgs, Timeout, WbError
from wbcore_runtime.contract.drivers import Availability

if TYPE_CHECKING:
    from wbcore_runtime.runtime import Runtime

_ids = itertools.count(1)


def available() -> Availability:
    from wbcore_process.sandbox import probe

    if _wasmtime_dir() is None:
        return Availability.no("wasmtime is not importable (pip install wasmtime)")
    ok, reason, _ = probe()
    return (Availability.yes(f"sandbox: {reason}") if ok
            else Availability.no(f"the build sandbox is unavailable: {reason}"))


class OsProcessTier:
    """The tier driver: ``call(CommandRequest) -> CallResult`` through a pooled worker."""

    def __init__(self, runtime: Runtime, pool: Pool | None = None) -> None:
        self.runtime = runtime
        self._pool = pool

    @property
    def pool(self) -> Pool:
        if self._pool is None:
            self._pool = shared(self.runtime.env, guest.sandbox_caps(self.runtime, "os_process"))
        return self._pool

    def call(self, request: Any) -> CallResult:
        if not isinstance(request, CommandRequest):
            raise InvalidArgs(f"tier os_process cannot run a {type(request).__name__} yet (commands only)")
        if _wasmtime_dir() is None:
            raise InvalidArgs("tier os_process needs wasmtime importable (pip install wasmtime)")
        start = time.monotonic()
        deadline = start + request.timeout_s
        self.runtime.artifacts.verify(request.sha256)  # a tampered artifact never leaves this host
        pool = self.pool
        worker = pool.acquire(deadline)
        call = _Call(self.runtime, worker, request, start, deadline)
        try:
            pool.watchdog.arm(worker, deadline + GRACE_S, "timeout", request.cancel)
            try:
                return call.run()
            finally:
                pool.watchdog.disarm(worker)
                if call.in_flight:
                    worker.kill()  # left mid-conversation: it can never serve another call
        finally:
            pool.release(worker)


class _Call:
    """One command call's conversation with one worker."""

    def __init__(self, runtime: Runtime, worker: Worker, req: CommandRequest, start: float,
                 deadline: float) -> None:
        self.runtime, self.worker, self.req = runtime, worker, req
        self.start, self.deadline = start, deadline
        self.id = next(_ids)
        # The caps of this call: the core's one bridge decides (Link, BrokerCall), its Dock
        # calls run on a broker thread while this one keeps the deadline.
        self.bridge = HostBridge(runtime, req, worker.secret, self.id, max(0.0, deadline - time.monotonic()),
                                 run=self.on_broker_thread)
        self.in_flight = False  # an Exec was sent and its ExecResult has not arrived

    # --- the conversation ---------------------------------------------------------------

    def run(self) -> CallResult:
        w, F = self.worker, frames
        try:
            self.send_exec(with_module=not w.has_module(self.req.sha256))
            while True:
                kind, payload = w.chan.recv()
                if kind == F.EXEC_RESULT:
                    obj, blobs = F.unpack(payload)
                    self.check_id(obj)
                    if obj.get("missing") is True:  # the worker dropped it from its cache
                        self.send_exec(with_module=True)
                        continue
                    self.in_flight = False
                    w.calls += 1
                    cpu = obj.get("cpu")
                    if isinstance(cpu, (int, float)) and not isinstance(cpu, bool):
                        w.cpu = float(cpu)
                    return self.finish(obj, blobs)
                if kind in (F.LINK, F.BROKER_CALL):
                    w.chan.send_frame(self.bridge.answer(kind, payload))
                elif kind == F.REFUSED:
                    obj, _ = F.unpack(payload)
                    raise F.FrameError("unexpected",
                                       f"the worker refused the call: {obj.get('reason')}: "
                                       f"{obj.get('message')}")
                else:
                    raise F.FrameError("unexpected", f"the worker sent {F.name(kind)} during a call")
        except (F.FrameError, OSError) as exc:
            raise self.lost(exc) from None

    def send_exec(self, *, with_module: bool) -> None:
        req, prof = self.req, self.req.profile
        argv, stdin = req.guest_input()
        obj = {"id": self.id, "sha256": req.sha256, "argv": argv, "memory": prof.memory_bytes,
               "timeout_s": max(0.0, self.deadline - time.monotonic()),
               "stdout_cap": prof.stdout_bytes, "stderr_cap": prof.stderr_bytes}
        blobs = [stdin]
        if with_module:
            blobs.append(self.runtime.artifacts.read_verified(req.sha256))
        if sum(len(b) for b in blobs) > frames.MAX_FRAME - 4096:
            raise InvalidArgs(f"{req.name}: stdin and module together exceed the {frames.MAX_FRAME >> 20} "
                              "MiB frame cap of tier os_process")
        self.in_flight = True
        self.worker.chan.send_frame(frames.seal(frames.EXEC, self.worker.secret, obj, *blobs))
        if with_module:
            self.worker.sent_module(req.sha256)

    def check_id(self, obj: dict[str, Any]) -> None:
        if obj.get("id") != self.id:
            raise frames.FrameError("unexpected",
                                    f"the worker answered call {obj.get('id')!r}, not {self.id}")

    def lost(self, exc: Exception) -> WbError:
        """The error for a call whose worker stopped speaking the protocol or died."""
        w, req = self.worker, self.req
        if not w.killed:
            w.box.wait(timeout=1.0)  # a worker that died on its own: let its sandbox report how
        w.kill()
        if w.killed == "timeout":
            return Timeout(f"{req.name}: stopped after {time.monotonic() - self.start:.3f} s: over its "
                           f"{req.timeout_s:g} s deadline (its os_process worker was killed)")
        if w.killed == "cancelled":
            return Timeout(f"{req.name}: cancelled by the caller after {time.monotonic() - self.start:.3f} "
                           "s; its os_process worker was killed")
        why = exc.message if isinstance(exc, frames.FrameError) else f"{type(exc).__name__}: {exc}"
        return Internal(f"{req.name}: the os_process worker died ({why}); it {w.death()}. "
                        "The pool starts a new one; run the call again")

    def on_broker_thread(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on a broker thread while this one keeps the deadline: a broker
        that blocks cannot hold the caller past deadline + grace (the result that comes
        later is dropped), and a cancelled or killed call stops waiting at once."""
        from concurrent.futures import wait

        fut = _brokers().submit(fn, *args)
        w = self.worker
        while True:
            done, _ = wait([fut], timeout=0.05)
            if done:
                return fut.result()
            if w.killed:
                raise frames.FrameError("eof", "the worker was killed while its broker call ran")
            if time.monotonic() > self.deadline + GRACE_S:
                w.kill("timeout")
                raise frames.FrameError("eof", "the broker call outlived the deadline")

    # --- the outcome: the same results and errors as the instance tier ---------------------

    def finish(self, obj: dict[str, Any], blobs: list[bytes]) -> CallResult:
        req, prof, F = self.req, self.req.profile, frames
        name = req.name
        if obj.get("refused") is True:
            if self.bridge.refusal is None:
                raise F.FrameError("unexpected", "the worker reported a refusal the host did not make")
            raise self.bridge.refusal
        err = obj.get("error")
        if isinstance(err, dict):
            raise errors.of_kind(str(err.get("kind")), f"{name}: {str(err.get('message', ''))[:2000]}")
        stdout, stderr = F.blobs_of(blobs, 2, F.EXEC_RESULT)
        exit_code = F.field(obj, "exit", int)
        reason = F.field(obj, "reason", str)
        trap = F.field(obj, "trap", (str, type(None)))
        trap_code = F.field(obj, "trap_code", str)
        peak = F.field(obj, "peak", int)
        wall = float(F.field(obj, "wall", (int, float)))
        out_size, err_size = F.field(obj, "out_size", int), F.field(obj, "err_size", int)
        over = reason if reason in ("stdout", "stderr") else (
            "stdout" if out_size > prof.stdout_bytes or len(stdout) > prof.stdout_bytes else
            "stderr" if err_size > prof.stderr_bytes or len(stderr) > prof.stderr_bytes else "")
        if obj.get("no_start") is True and not over and reason != "timeout":
            raise InvalidArgs(f"{name}: artifact {req.sha256[:12]}… exports no _start (is it a WASI "
                              "command?)")
        check_guest_end(req, wall=wall, stopped="timeout" if reason == "timeout" else "", over=over,
                        trap=trap, trap_code=trap_code, exit_code=exit_code, peak=peak)
        usage = Usage(wall_s=time.monotonic() - self.start, peak_memory=peak,
                      bytes_out=len(stdout) + len(stderr))
        return CallResult(stdout, stderr, exit_code, usage)


# --- the threads that run bridged Dock calls ----------------------------------------------


_broker_lock = threading.Lock()
_broker_pool: ThreadPoolExecutor | None = None


def _brokers() -> ThreadPoolExecutor:
    """The threads that run bridged broker calls (a nested command runs on one of them)."""
    global _broker_pool
    with _broker_lock:
        if _broker_pool is None:
            _broker_pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="wb-os-process-broker")
        return _broker_pool


def _forget_brokers_after_fork() -> None:
    global _broker_pool, _broker_lock
    _broker_pool, _broker_lock = None, threading.Lock()  # the parent's threads are not here


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_brokers_after_fork)


def factory(runtime: Runtime) -> OsProcessTier:
    return OsProcessTier(runtime)
