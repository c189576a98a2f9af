"""The ``command`` shape: argv + stdin → stdout + stderr + exit code, one fresh store per call.

Every call gets a new ``Store`` (nothing survives between calls) instantiated from the
module's cached ``InstancePre``; WASI sees only argv and stdin — no environment, no
preopened files, no network, no inherited stdio. Limits come from the profile:

- memory: store limits (``memory.grow`` past the cap returns -1; a guest that then
  traps or fails while at the cap ends in ``LimitExceeded(limit="memory")``);
- time: the wall-clock deadline, checked every epoch tick by the engine's guard
  (``Timeout``, exit 124);
- output: stdout/stderr go to private tmpfs files checked against the profile's caps
  every tick while the guest runs (``LimitExceeded(limit="stdout"|"stderr")``);
- fuel: when the engine meters fuel, ``request.fuel`` bounds it (``LimitExceeded("fuel")``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wbcore_wasmtime import engine as _engine
from wbcore_wasmtime import fastpath
from wbcore_runtime.contract.calls import CallResult, CommandRequest, Usage, check_guest_end
from wbcore_runtime.contract.errors import InvalidArgs, Timeout

if TYPE_CHECKING:
    from wbcore_runtime.runtime import Runtime

DEFAULT_FUEL = 10_000_000_000


# --- output capture ----------------------------------------------------------------------
#
# stdout/stderr go to two files per thread in a private tmpfs folder (0700): measured,
# a file sink costs ~25 µs per call where wasmtime-py's custom-output callback costs
# ~90 µs (a tokio task plus a GIL hop per write). The cap is enforced while the guest
# runs by the store's epoch-deadline callback (every tick, see below), so a flood is
# stopped within one tick; after the call at most cap + 1 bytes are read back.


def _private_dir() -> str:
    """A fresh 0700 folder for this process's output files, removed at exit.

    Made with ``os.mkdir`` rather than ``tempfile.mkdtemp``: importing tempfile (and the
    shutil, bz2, lzma and random it imports) was a measurable part of a ``wbx run``."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        base = "/dev/shm"
    else:
        import tempfile

        base = tempfile.gettempdir()
    for _ in range(100):
        path = os.path.join(base, f"wb-io-{os.getpid()}-{os.urandom(6).hex()}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        atexit.register(_remove_private, path)
        return path
    raise FileExistsError(f"no free folder name under {base} for the output files")


def _remove_private(path: str) -> None:
    """Remove the output folder: flat, holding only this process's files."""
    try:
        for name in os.listdir(path):
            os.unlink(os.path.join(path, name))
        os.rmdir(path)
    except OSError:
        import shutil  # anything unexpected in it: the general removal

        shutil.rmtree(path, ignore_errors=True)


_io: dict[int, str] = {}  # pid → its private folder (a forked child makes its own)
_io_lock = threading.Lock()
_local = threading.local()


def _io_paths(depth: int) -> tuple[str, str]:
    """This thread's output files at nesting ``depth``: a host import may run a command
    from inside a running one (the ``commands`` cap), which must not reuse its files."""
    pid = os.getpid()
    if getattr(_local, "pid", None) != pid:
        with _io_lock:
            folder = _io.get(pid)
            if folder is None:
                folder = _io[pid] = _private_dir()
        _local.base = os.path.join(folder, str(threading.get_ident()))
        _local.pid = pid
    base = f"{_local.base}.{depth}"
    return base + ".out", base + ".err"


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _read_capped(path: str, size: int, cap: int) -> bytes:
    if size <= 0:
        return b""
    fd = os.open(path, os.O_RDONLY)
    try:
        want = min(size, cap)
        chunks, got = [], 0
        while got < want:
            chunk = os.read(fd, want - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


def describe_trap(exc: BaseException) -> str:
    """The cause line of a wasmtime trap ("wasm trap: integer divide by zero"), not its backtrace."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("wasm trap:"):
            return ln
    return lines[-1] if lines else type(exc).__name__


class CommandRunner(_engine.EngineRunner):
    """``ExecShape("command").runner(runtime)``: runs :class:`CommandRequest` s."""

    def call(self, req: CommandRequest) -> CallResult:
        import wasmtime

        eng = self.engine
        loaded = self.modules.load(self.runtime.artifacts, req.sha256)

        argv, stdin = req.guest_input()

        prof = req.profile
        depth = getattr(_local, "depth", 0)
        out_path, err_path = _io_paths(depth)
        store = wasmtime.Store(eng.wasm)
        store.set_limits(memory_size=prof.memory_bytes, instances=4, tables=8, memories=2)
        if eng.fuel:
            store.set_fuel(req.fuel or DEFAULT_FUEL)
        wasi = wasmtime.WasiConfig()
        wasi.argv = argv
        if stdin:
            self.path.wasi_stdin(wasi, stdin)
        wasi.stdout_file = out_path
        wasi.stderr_file = err_path
        folders = _GuestFolders(req) if req.preopens or req.scratch else None
        # #+PREOPEN (read-only, from the store) and #+SCRATCH (wbcore_runtime.guard.preopen)
        if folders is not None:
            folders.preopen(wasi)
        store.set_wasi(wasi)

        exit_code = 0
        failure: BaseException | None = None
        t0 = time.perf_counter()
        guard = _engine.Guard(t0 + req.timeout_s, out_path, err_path, prof.stdout_bytes, prof.stderr_bytes,
                              cancel=req.cancel, **(folders.guard() if folders is not None else {}))
        gid = _engine.attach_guard(store, guard)
        instance = None
        _local.depth = depth + 1
        detach = True
        try:
            with eng.ticker.ticking():
                try:
                    instance = loaded.instantiate(
                        store, name=req.name, runtime=self.runtime, caps=req.caps, principal=req.principal,
                        timeout=req.timeout_s, toolkit=req.toolkit, allowed_hosts=req.allowed_hosts,
                    )
                    if loaded.uses_caps:
                        job = _workers.start(functools.partial(_start, self.path, store, instance, eng),
                                             functools.partial(_abandoned_cleanup, gid, folders))
                        if not job.wait(guard, req.cancel):
                            # the guest is blocked in a host call past its deadline: this call
                            # ends now; the guest traps when the broker returns (its result is
                            # discarded and audited as timeout) and its worker then cleans up
                            detach = False
                            for path in (out_path, err_path):
                                with contextlib.suppress(OSError):
                                    os.unlink(path)  # the next call on this thread gets new files
                            why = guard.reason or "timeout"
                            wall = time.perf_counter() - t0
                            if why == "cancelled":
                                raise Timeout(
                                    f"{req.name}: cancelled by the caller after {wall:.3f} s; the guest was "
                                    "stopped"
                                )
                            raise Timeout(
                                f"{req.name}: stopped after {wall:.3f} s: over its {req.timeout_s:g} s "
                                "deadline (blocked in a broker call)"
                            )
                        exit_code, failure = job.result()
                    else:
                        exit_code, failure = _start(self.path, store, instance)
                except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:  # instantiation
                    failure = exc
                except KeyError:
                    raise InvalidArgs(
                        f"{req.name}: artifact {req.sha256[:12]}… exports no _start (is it a WASI command?)"
                    ) from None
        finally:
            _local.depth = depth
            if detach:
                _engine.detach_guard(gid)
            if folders is not None and detach:
                scratch_over = folders.over()  # its last writes, after the last tick
                folders.remove()
            else:  # the guest still runs on its worker: its folders go when it ends (_abandoned_cleanup)
                scratch_over = False
        wall = time.perf_counter() - t0

        peak = self.path.memory_size(store, instance) if instance is not None else 0
        fuel_used = None
        if eng.fuel:
            try:
                fuel_used = (req.fuel or DEFAULT_FUEL) - store.get_fuel()
            except wasmtime.WasmtimeError:
                fuel_used = None
        del store, wasi, instance  # closes the output files before they are read
        out_size, err_size = _size(out_path), _size(err_path)
        over = guard.reason if guard.reason in ("stdout", "stderr", "scratch") else (
            "stdout" if out_size > prof.stdout_bytes else "stderr" if err_size > prof.stderr_bytes else
            "scratch" if folders is not None and scratch_over else "")
        stdout = stderr = b""
        if not over and guard.reason == "" and failure is None:
            stdout = _read_capped(out_path, out_size, prof.stdout_bytes)
            stderr = _read_capped(err_path, err_size, prof.stderr_bytes)
        # nothing of this call lingers in tmpfs (RAM) or for the next call to see
        for path, size in ((out_path, out_size), (err_path, err_size)):
            if size:
                os.truncate(path, 0)

        code = getattr(failure, "trap_code", None)
        check_guest_end(
            req, wall=wall, stopped=guard.reason if guard.reason in ("timeout", "cancelled") else "",
            over=over, trap=describe_trap(failure) if failure is not None else None,
            trap_code=code.name if code is not None else "", exit_code=exit_code, peak=peak,
            fuel=req.fuel or DEFAULT_FUEL,
        )
        usage = Usage(wall_s=wall, fuel=fuel_used, peak_memory=peak, bytes_out=len(stdout) + len(stderr))
        return CallResult(stdout, stderr, exit_code, usage)



# --- the folders a guest sees: #+PREOPEN, #+SCRATCH and the per-call /dev ------------------------


class _GuestFolders:
    """One call's folders (:mod:`wbcore_runtime.guard.preopen`): the stored ``#+PREOPEN`` trees,
    read-only; an empty ``#+SCRATCH`` folder, writable and bounded by the call's guard; and,
    under a ``/`` preopen, a ``/dev`` of two regular files of fresh random bytes. The
    scratch folder and ``/dev`` live in a private 0700 folder made for the call and
    removed after it."""

    __slots__ = ("base", "dev", "req", "scratch")

    def __init__(self, req: CommandRequest) -> None:
        from wbcore_runtime.guard import preopen

        self.req = req
        self.base = self.dev = self.scratch = None
        wants_dev = preopen.needs_dev(req.preopens)
        if not (wants_dev or req.scratch):
            return
        import tempfile

        self.base = tempfile.mkdtemp(prefix=f"wb-call-{os.getpid()}-")  # 0700, this process's
        if wants_dev:
            self.dev = os.path.join(self.base, "dev")
            os.mkdir(self.dev, 0o700)
            for name in ("urandom", "random"):
                fd = os.open(os.path.join(self.dev, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
                try:
                    os.write(fd, os.urandom(preopen.RANDOM_BYTES))
                finally:
                    os.close(fd)
        if req.scratch:
            self.scratch = os.path.join(self.base, "scratch")
            os.mkdir(self.scratch, 0o700)

    def preopen(self, wasi: Any) -> None:
        for host, guest in self.req.preopens:
            wasi.preopen_dir(host, guest, fs_mutable=False)
        if self.dev is not None:
            wasi.preopen_dir(self.dev, "/dev", fs_mutable=False)
        if self.scratch is not None and self.req.scratch is not None:
            wasi.preopen_dir(self.scratch, self.req.scratch[0], fs_mutable=True)

    def guard(self) -> dict[str, Any]:
        from wbcore_runtime.guard.preopen import SCRATCH_FILES

        if self.scratch is None or self.req.scratch is None:
            return {}
        return {"scratch": self.scratch, "scratch_bytes": self.req.scratch[1], "scratch_files": SCRATCH_FILES}

    def over(self) -> bool:
        from wbcore_runtime.guard.preopen import SCRATCH_FILES

        if self.scratch is None or self.req.scratch is None:
            return False
        return _engine.scratch_over(self.scratch, self.req.scratch[1], SCRATCH_FILES)

    def remove(self) -> None:
        if self.base is not None:
            import shutil

            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None


def _abandoned_cleanup(gid: int, folders: _GuestFolders | None) -> None:
    """What an abandoned guest's worker does when the guest finally ends: unguard its store
    and remove its folders (it held them open until then)."""
    _engine.detach_guard(gid)
    if folders is not None:
        folders.remove()


def _start(path: fastpath.CallPath, store: Any, instance: Any,
           eng: _engine.Engine | None = None) -> tuple[int, BaseException | None]:
    """Run ``_start``: ``(exit code, failure)``; on a worker, the epoch ticks while it runs."""
    import wasmtime

    try:
        if eng is None:
            path.run_start(store, instance)
        else:
            with eng.ticker.ticking():
                path.run_start(store, instance)
    except wasmtime.ExitTrap as exc:
        return exc.code, None
    except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
        return 0, exc
    return 0, None


# --- guests that may block in a broker ----------------------------------------------------
#
# Epoch interruption stops a guest only while it executes wasm; a broker that blocks holds
# the guest's thread in host code. A guest that imports caps therefore runs on a worker
# thread, and its caller waits at most until the deadline (or cancel): past it, the call
# raises Timeout while the worker carries on until the broker returns, when the Dock
# discards the late result and the host import traps the guest (wbcore_wasmtime.dock_link).
# Guests without caps run on the caller's thread: every WASI call they can make returns
# promptly or is bounded by the deadline itself (wbcore_wasmtime.wasi_poll).

#: How long past the deadline the caller waits for a guest to stop by itself (two ticks:
#: a guest in wasm traps at the next epoch tick).
GRACE_S = 2 * _engine.TICK_S


class _Job:
    __slots__ = ("_error", "_result", "abandoned", "cleanup", "done", "fn", "lock")

    def __init__(self, fn: Callable[[], Any], cleanup: Callable[[], None]) -> None:
        self.fn, self.cleanup = fn, cleanup
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.abandoned = False
        self._result: Any = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            self._result = self.fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            self._error = exc
        with self.lock:
            self.done.set()
            abandoned = self.abandoned
        if abandoned:
            self.cleanup()
        self.fn = None  # type: ignore[assignment] # drops the store: its files close

    def wait(self, guard: _engine.Guard, cancel: threading.Event | None) -> bool:
        """Wait until the guest ends, its deadline (+ grace) passes, or ``cancel`` is set
        and it has not stopped a grace later; ``False`` means it was abandoned."""
        end = guard.deadline + GRACE_S
        while True:
            now = time.perf_counter()
            if now >= end:
                break
            if self.done.wait(end - now if cancel is None else min(end - now, 0.05)):
                return True
            if cancel is not None and cancel.is_set():
                if self.done.wait(GRACE_S):
                    return True
                guard.reason = guard.reason or "cancelled"
                break
        with self.lock:
            if self.done.is_set():
                return True
            guard.reason = guard.reason or "timeout"
            self.abandoned = True
            return False

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._result


class _Workers:
    """Daemon threads that run guests, kept (up to ``keep`` idle) for the next call."""

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def start(self, fn: Callable[[], Any], cleanup: Callable[[], None]) -> _Job:
        job = _Job(fn, cleanup)
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        (worker or _Worker(self)).give(job)
        return job

    def idle(self, worker: _Worker) -> bool:
        with self._lock:
            if len(self._idle) >= self.keep:
                return False
            self._idle.append(worker)
            return True


class _Worker:
    def __init__(self, pool: _Workers) -> None:
        self.pool = pool
        self.job: _Job | None = None
        self.go = threading.Lock()
        self.go.acquire()
        threading.Thread(target=self._loop, name="wb-guest", daemon=True).start()

    def give(self, job: _Job) -> None:
        self.job = job
        self.go.release()

    def _loop(self) -> None:
        while True:
            self.go.acquire()
            job, self.job = self.job, None
            if job is not None:
                job.run()
            if not self.pool.idle(self):
                return


_workers = _Workers()


def _workers_after_fork() -> None:
    global _workers
    _workers = _Workers()  # threads do not survive fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_workers_after_fork)


def runner(runtime: Runtime) -> CommandRunner:
    return CommandRunner(runtime)
