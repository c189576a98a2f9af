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
import os
import shutil
import tempfile
import threading
import time
from typing import TYPE_CHECKING

from wb_wasmtime import engine as _engine
from wb_wasmtime import fastpath
from wbcore.calls import CallResult, CommandRequest, GuestTrap, LimitExceeded, Usage
from wbcore.errors import InvalidArgs, Timeout

if TYPE_CHECKING:
    from wbcore.runtime import Runtime

PAGE = 65536
DEFAULT_FUEL = 10_000_000_000


# --- output capture ----------------------------------------------------------------------
#
# stdout/stderr go to two files per thread in a private tmpfs folder (0700): measured,
# a file sink costs ~25 µs per call where wasmtime-py's custom-output callback costs
# ~90 µs (a tokio task plus a GIL hop per write). The cap is enforced while the guest
# runs by the store's epoch-deadline callback (every tick, see below), so a flood is
# stopped within one tick; after the call at most cap + 1 bytes are read back.


def _private_dir() -> str:
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    path = tempfile.mkdtemp(prefix=f"wb-io-{os.getpid()}-", dir=base)
    atexit.register(shutil.rmtree, path, True)
    return path


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


def near_memory_cap(peak: int, cap: int) -> bool:
    """Whether a guest that failed was plausibly refused memory: store limits make
    ``memory.grow`` return -1 without telling the host, so "within 1/16 of the cap (at
    least one page)" is the signal."""
    return peak + max(PAGE, cap // 16) > cap


class CommandRunner:
    """``ExecShape("command").runner(runtime)``: runs :class:`CommandRequest` s."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        _engine.get()
        self.path = fastpath.select()

    # Read per call, not kept: a forked child gets its own engine (see engine._after_fork_in_child).
    @property
    def engine(self) -> _engine.Engine:
        return _engine.get()

    @property
    def modules(self) -> _engine.Modules:
        return _engine.modules()

    def call(self, req: CommandRequest) -> CallResult:
        import wasmtime

        eng = self.engine
        loaded = self.modules.load(self.runtime.artifacts, req.sha256)

        argv = [req.name, *req.argv]
        stdin = req.stdin
        if req.arg_mode == "stdin1" and req.argv:
            # seed 000: the first stdin line is the argument (jq, grep)
            stdin = " ".join(req.argv).encode() + b"\n" + stdin
            argv = [req.name]

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
        if req.preopen:  # #+PREOPEN: the toolkit's own folder, read-only (wbcore.preopen)
            wasi.preopen_dir(req.preopen[0], req.preopen[1], fs_mutable=False)
        store.set_wasi(wasi)

        exit_code = 0
        failure: BaseException | None = None
        t0 = time.perf_counter()
        guard = _engine.Guard(t0 + req.timeout_s, out_path, err_path, prof.stdout_bytes, prof.stderr_bytes,
                              cancel=req.cancel)
        gid = _engine.attach_guard(store, guard)
        instance = None
        _local.depth = depth + 1
        try:
            with eng.ticker.ticking():
                try:
                    instance = loaded.instantiate(store, name=req.name, runtime=self.runtime, caps=req.caps,
                                                  principal=req.principal, timeout=req.timeout_s, toolkit=req.toolkit)
                    self.path.run_start(store, instance)
                except wasmtime.ExitTrap as exc:
                    exit_code = exc.code
                except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
                    failure = exc
                except KeyError:
                    raise InvalidArgs(f"{req.name}: artifact {req.sha256[:12]}… exports no _start (is it a WASI command?)") from None
        finally:
            _local.depth = depth
            _engine.detach_guard(gid)
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
        at_memory_cap = near_memory_cap(peak, prof.memory_bytes)
        over = guard.reason if guard.reason in ("stdout", "stderr") else (
            "stdout" if out_size > prof.stdout_bytes else "stderr" if err_size > prof.stderr_bytes else "")
        stdout = stderr = b""
        if not over and guard.reason == "" and failure is None:
            stdout = _read_capped(out_path, out_size, prof.stdout_bytes)
            stderr = _read_capped(err_path, err_size, prof.stderr_bytes)
        # nothing of this call lingers in tmpfs (RAM) or for the next call to see
        for path, size in ((out_path, out_size), (err_path, err_size)):
            if size:
                os.truncate(path, 0)

        if guard.reason == "timeout":
            raise Timeout(f"{req.name}: stopped after {wall:.3f} s: over its {req.timeout_s:g} s deadline")
        if guard.reason == "cancelled":
            raise Timeout(f"{req.name}: cancelled by the caller after {wall:.3f} s; the guest was stopped")
        if over:
            cap = prof.stdout_bytes if over == "stdout" else prof.stderr_bytes
            raise LimitExceeded(
                f"{req.name}: {over} passed the {cap}-byte cap of profile {prof.name}; output stopped",
                limit=over)
        if failure is not None:
            code = getattr(failure, "trap_code", None)
            if code == wasmtime.TrapCode.INTERRUPT:
                raise Timeout(f"{req.name}: stopped after {wall:.3f} s: over its {req.timeout_s:g} s deadline")
            if code == wasmtime.TrapCode.OUT_OF_FUEL:
                raise LimitExceeded(f"{req.name}: ran out of fuel ({req.fuel or DEFAULT_FUEL} units)", limit="fuel")
            if at_memory_cap:
                raise LimitExceeded(
                    f"{req.name}: hit the {prof.memory_bytes >> 20} MiB memory limit of profile {prof.name} "
                    f"(it had {peak / (1 << 20):.1f} MiB; {describe_trap(failure)})", limit="memory")
            raise GuestTrap(f"{req.name}: guest trapped: {describe_trap(failure)}")
        if exit_code != 0 and at_memory_cap:
            raise LimitExceeded(
                f"{req.name}: exited {exit_code} at the {prof.memory_bytes >> 20} MiB memory limit of profile {prof.name}",
                limit="memory")
        usage = Usage(wall_s=wall, fuel=fuel_used, peak_memory=peak, bytes_out=len(stdout) + len(stderr))
        return CallResult(stdout, stderr, exit_code, usage)



def runner(runtime: Runtime) -> CommandRunner:
    return CommandRunner(runtime)
