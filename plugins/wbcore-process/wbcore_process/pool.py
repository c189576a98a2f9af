"""The warm pool of ``os_process`` workers: started, lent, watched, replaced, shut down.

A worker is ``_tier_worker.py`` run by ``Sandbox.spawn`` (new user, mount, pid, net, ipc,
uts and cgroup namespaces; a read-only root holding only the Python runtime, wasmtime and
the worker's three files; uid 1000 without capabilities; ``no_new_privs``; seccomp; rlimits)
— a fresh ``exec`` of Python, never a fork of a process that compiled wasm. It imports
wasmtime once and answers the handshake (``Ping`` with its 32-byte session secret →
``Pong`` with the protocol version); then it is ready, and serves calls one at a time.

- **Size**: ``WB_OS_PROCESS_WORKERS`` warm workers (default 2), started on the first call
  (the first synchronously, the rest in the background) and kept for later calls. While
  every worker is busy — a guest's ``commands`` call can run a nested command at this tier
  — up to :data:`MAX_EXTRA` more start; the surplus is ended when it comes back idle.
- **Watchdog**: one thread SIGKILLs a worker that holds a call past its deadline plus
  :data:`GRACE_S` (or whose caller cancelled), which ends everything in its pid namespace.
- **Replacement**: a worker that died, was killed, broke the protocol, served
  :data:`MAX_CALLS` calls or used half its CPU budget is not lent again; a new one starts
  in the background to keep the pool at its size.
- **Exit**: at interpreter exit idle workers get ``Shutdown`` and everything left is
  killed; a forked child forgets its parent's pool (the workers are the parent's).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any

from wbcore_runtime.contract.errors import Internal, InvalidArgs, Timeout

from wbcore_runtime.wire import frames

WORKER = Path(__file__).with_name("_tier_worker.py")
FRAMES = Path(frames.__file__)  # wbcore_runtime/wire/frames.py: standard library only, bound into the sandbox
DEFAULT_WORKERS = 2
MAX_WORKERS = 16
MAX_EXTRA = 8
#: How long past its deadline a call may hold its worker before the watchdog kills it.
GRACE_S = 0.5
START_TIMEOUT_S = 30.0
MAX_CALLS = 1000
#: RLIMIT_CPU of a worker (all its calls together); it retires at half of it.
CPU_LIMIT_S = 6 * 3600
#: The worker keeps this many compiled modules (its LRU; the pool mirrors it).
MAX_MODULES = 32
STDERR_TAIL = 4096


@lru_cache(maxsize=1)
def _wasmtime_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("wasmtime")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


def _python() -> Path:
    base = Path(sys.base_prefix).resolve()
    python = Path(sys.executable).resolve()
    if not python.is_relative_to(base):
        python = base / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    return python


class Worker:
    """The host's handle on one sandboxed worker process."""

    def __init__(self, box: Any, secret: bytes) -> None:
        self.box = box
        self.secret = secret
        self.chan = frames.Channel(box.stdout_fd, box.stdin_fd)
        self.modules: OrderedDict[str, None] = OrderedDict()
        self.calls = 0
        self.cpu = 0.0
        self.broken = False  # broke the protocol or died: never lent again
        self.killed = ""  # why the watchdog killed it ("timeout", "cancelled", "start")
        self._tail = bytearray()
        self._drain = threading.Thread(target=self._read_stderr, name="wb-worker-stderr", daemon=True)
        self._drain.start()

    @property
    def pid(self) -> int:
        return self.box.pid

    def _read_stderr(self) -> None:
        fd = self.box.stderr_fd
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            self._tail += chunk
            del self._tail[:-STDERR_TAIL]

    def stderr_tail(self) -> str:
        self._drain.join(timeout=0.5)
        return bytes(self._tail).decode("utf-8", "replace").strip()

    def has_module(self, sha: str) -> bool:
        if sha in self.modules:
            self.modules.move_to_end(sha)
            return True
        return False

    def sent_module(self, sha: str) -> None:
        self.modules[sha] = None
        while len(self.modules) > MAX_MODULES:
            self.modules.popitem(last=False)

    def kill(self, why: str = "") -> None:
        self.killed = self.killed or why
        self.broken = True
        self.box.kill()

    def death(self) -> str:
        """How the worker ended, for an error message (waits briefly for the reaper)."""
        code = self.box.wait(timeout=2.0)
        tail = self.stderr_tail()
        how = ("is still running" if code is None
               else (f"was killed by signal {-code}" if code < 0 else f"exited {code}"))
        return how + (f"; its stderr: {tail[-800:]}" if tail else "")

    def close(self) -> None:
        self.broken = True
        self.box.close()


class Watchdog:
    """SIGKILLs a worker held past its deadline (+ grace) or whose caller cancelled."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[Worker, tuple[float, str, Any]] = {}
        self._thread: threading.Thread | None = None
        self._wakes_at = 0.0  # when the thread looks next (it is woken only for earlier work)

    def arm(self, worker: Worker, kill_at: float, why: str = "timeout", cancel: Any = None) -> None:
        with self._cond:
            self._armed[worker] = (kill_at, why, cancel)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="wb-os-process-watchdog", daemon=True)
                self._thread.start()
            # Waking the thread costs two context switches per call: only when it would
            # otherwise look too late.
            if kill_at < self._wakes_at or (cancel is not None and self._wakes_at - time.monotonic() > 0.02):
                self._cond.notify()

    def disarm(self, worker: Worker) -> None:
        with self._cond:
            self._armed.pop(worker, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                wait = 1.0
                for worker, (kill_at, why, cancel) in list(self._armed.items()):
                    if now >= kill_at:
                        worker.kill(why)
                        del self._armed[worker]
                    elif cancel is not None and cancel.is_set():
                        worker.kill("cancelled")
                        del self._armed[worker]
                    else:
                        wait = min(wait, kill_at - now, 0.02 if cancel is not None else wait)
                wait = max(wait, 0.001)
                self._wakes_at = now + wait
                self._cond.wait(wait)


class Pool:
    """Warm sandboxed workers, lent one call at a time (see the module docstring)."""

    def __init__(self, size: int, caps_lib: Path) -> None:
        if not 1 <= size <= MAX_WORKERS:
            raise InvalidArgs(f"WB_OS_PROCESS_WORKERS must be 1..{MAX_WORKERS}, got {size}")
        self.size = size
        # the caps bridge's guest side (contract.guest.sandbox_caps), bound per worker
        self.caps_lib = caps_lib
        self.limit = size + MAX_EXTRA
        self.watchdog = Watchdog()
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wb-os-process-spawner")
        self._cond = threading.Condition()
        self._idle: list[Worker] = []
        self._live: set[Worker] = set()
        self._count = 0  # live + starting
        self._filling = False
        self._closed = False

    # --- lending ------------------------------------------------------------------------

    def acquire(self, deadline: float) -> Worker:
        """An idle worker, or a new one (within the limit), or ``Timeout`` at ``deadline``."""
        dead: list[Worker] = []
        try:
            with self._cond:
                while True:
                    if self._closed:
                        raise Internal("the os_process worker pool is shut down")
                    while self._idle:
                        worker = self._idle.pop()
                        if worker.box.alive() and not worker.broken:
                            return worker
                        self._forget(worker)
                        dead.append(worker)
                    if self._count < self.limit:
                        self._count += 1
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise Timeout(f"no os_process worker became free before the deadline ({self.limit} "
                                      "are busy)")
                    self._cond.wait(left)
        finally:
            for worker in dead:
                worker.close()
            if dead:
                self._fill()
        try:
            worker = self._start()
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise
        self._fill()
        return worker

    def release(self, worker: Worker) -> None:
        """Take ``worker`` back after a call: kept warm if healthy and needed, else ended."""
        retire = (worker.broken or not worker.box.alive() or worker.calls >= MAX_CALLS
                  or worker.cpu > CPU_LIMIT_S / 2)
        with self._cond:
            if not retire and not self._closed and len(self._idle) < self.size:
                self._idle.append(worker)
                self._cond.notify()
                return
            self._forget(worker)
        worker.close()
        self._fill()

    def _forget(self, worker: Worker) -> None:
        if worker in self._live:
            self._live.discard(worker)
            self._count -= 1
            self._cond.notify()

    def workers(self) -> list[Worker]:
        """Every live worker (idle or lent), for tests and diagnostics."""
        with self._cond:
            return list(self._live)

    # --- starting -----------------------------------------------------------------------

    def _fill(self) -> None:
        """Start workers in the background until ``size`` are live or starting."""
        with self._cond:
            if self._filling or self._closed or self._count >= self.size:
                return
            self._filling = True
        threading.Thread(target=self._fill_run, name="wb-os-process-fill", daemon=True).start()

    def _fill_run(self) -> None:
        try:
            while True:
                with self._cond:
                    if self._closed or self._count >= self.size:
                        return
                    self._count += 1
                try:
                    worker = self._start()
                except Exception:  # noqa: BLE001 - the next call starts one and reports why
                    with self._cond:
                        self._count -= 1
                    return
                with self._cond:
                    if self._closed:
                        self._forget(worker)
                        closing = worker
                    else:
                        self._idle.append(worker)
                        self._cond.notify()
                        closing = None
                if closing is not None:
                    closing.close()
                    return
        finally:
            with self._cond:
                self._filling = False

    def _start(self) -> Worker:
        """Spawn one sandboxed worker and complete the handshake (``count`` is held).

        The process is started on the pool's one long-lived spawner thread: the sandbox's
        init asks for SIGKILL when the *thread* that started it ends (PR_SET_PDEATHSIG),
        so a worker started on a caller's short-lived thread would die with that thread.
        """
        worker = self._spawner.submit(spawn_worker, self.caps_lib).result()
        self.watchdog.arm(worker, time.monotonic() + START_TIMEOUT_S, "start")
        try:
            worker.chan.send_frame(frames.ping(worker.secret))
            kind, payload = worker.chan.recv()
            if kind != frames.PONG:
                raise frames.FrameError("unexpected", f"the worker answered Ping with {frames.name(kind)}")
            frames.check_pong(payload)
        except (frames.FrameError, OSError) as exc:
            why = exc.message if isinstance(exc, frames.FrameError) else str(exc)
            worker.kill()
            raise Internal(f"an os_process worker did not start: {why}; it {worker.death()}") from None
        finally:
            self.watchdog.disarm(worker)
        with self._cond:
            self._live.add(worker)
        return worker

    # --- the end ------------------------------------------------------------------------

    def close(self) -> None:
        """``Shutdown`` to idle workers, then SIGKILL whatever is left; no more lending."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            live = list(self._live)
            self._live.clear()
            self._count = 0
            self._cond.notify_all()
        for worker in idle:
            try:
                worker.chan.send_frame(frames.shutdown(worker.secret))
            except OSError:
                pass
        end = time.monotonic() + 0.5
        for worker in idle:
            worker.box.wait(timeout=max(0.0, end - time.monotonic()))
        for worker in live:
            worker.close()
        self._spawner.shutdown(wait=False)


def spawn_worker(caps_lib: Path) -> Worker:
    """Start one sandboxed worker process (before its handshake) with a new session secret;
    ``caps_lib`` is the caps bridge's guest side (served by the WASI guest runner's plugin,
    :func:`wbcore_runtime.contract.guest.sandbox_caps`), bound as ``capbridge.py`` next to ``frames.py``."""
    from wbcore_process.sandbox import Bind, SandboxLimits, Sandbox, system_binds

    site = _wasmtime_dir()
    if site is None:
        raise Internal("tier os_process needs wasmtime importable (pip install wasmtime)")
    base = Path(sys.base_prefix).resolve()
    binds = system_binds() + [
        Bind(base, str(base)),
        Bind(site, "/wb/site"),
        Bind(WORKER, "/wb/worker.py"),
        Bind(FRAMES, "/wb/lib/frames.py"),
        Bind(caps_lib, "/wb/lib/capbridge.py"),
    ]
    # wasmtime reserves address space (guard regions) per linear memory, so RLIMIT_AS is
    # loose; a guest's memory is capped by its store's limits. /tmp holds one call's
    # stdin, stdout and stderr files (each capped while the guest runs).
    limits = SandboxLimits(cpu_seconds=CPU_LIMIT_S, address_space=64 << 30, file_size=160 << 20,
                           open_files=256, processes=64, tmp_bytes=256 << 20, out_bytes=1 << 20, out_files=16)
    secret = frames.new_secret()
    box = Sandbox().spawn(
        [str(_python()), "-I", "-S", "/wb/worker.py", "/wb/site", "/wb/lib"],
        binds=binds, limits=limits, secret=secret, start_timeout=START_TIMEOUT_S,
    )
    return Worker(box, secret)


_lock = threading.Lock()
_pool: Pool | None = None


def shared(env: dict[str, str] | None, caps_lib: Path) -> Pool:
    """The process's pool (created on first use, sized by ``WB_OS_PROCESS_WORKERS``; its
    workers bind ``caps_lib``, as :func:`spawn_worker`)."""
    global _pool
    pool = _pool
    if pool is not None:
        return pool
    with _lock:
        if _pool is None:
            raw = (env if env is not None else os.environ).get("WB_OS_PROCESS_WORKERS", "")
            try:
                size = int(raw) if raw.strip() else DEFAULT_WORKERS
            except ValueError:
                raise InvalidArgs(f"WB_OS_PROCESS_WORKERS={raw!r}: expected a number of workers, "
                                  "e.g. 2") from None
            _sweep_dead_workers()
            _pool = Pool(size, caps_lib)
        return _pool


def _sweep_dead_workers() -> None:
    """Remove the scratch folders of workers whose process was killed (``wb-spawn-<owner>…``)."""
    from wbcore_runtime.store import leftovers

    from wbcore_process.sandbox import SPAWN_PREFIX

    leftovers.sweep(leftovers.system_tmp(), SPAWN_PREFIX)


def shutdown() -> None:
    """Close the process's pool (at exit; tests)."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()


def _forget_after_fork() -> None:
    global _pool, _lock
    _pool = None
    _lock = threading.Lock()


atexit.register(shutdown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
