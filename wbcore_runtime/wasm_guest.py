"""Run one WASI module in wasmtime, bounded in time, memory and output: the one guest runner
of the lanes whose compiler is itself a wasm guest (c-wasm: TinyCC; js/ts/svelte: QuickJS).

A guest sees only the directories it is handed (``preopens``), runs under a wall-clock
deadline enforced by epoch interruption (and, given a ``cancel`` event, stops at the next
tick once it is set) and a linear-memory cap, and its stdout/stderr are captured up to a
cap. Nothing here executes native code from the source being compiled.

The core never imports wasmtime (engines live in plugins): a lane hands its own (pinned)
``wasmtime`` module to :func:`engine` once, and every later call uses that module.
"""

from __future__ import annotations

import atexit
import errno
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

#: Epoch tick: the deadline is enforced to within one tick.
TICK_S = 0.05


@dataclass(frozen=True, slots=True)
class GuestLimits:
    timeout_s: float = 60.0
    memory_bytes: int = 512 << 20
    output_bytes: int = 1 << 20  # per stream; more is dropped and reported


@dataclass(frozen=True, slots=True)
class Preopen:
    host: Path
    guest: str
    writable: bool = False


@dataclass(frozen=True, slots=True)
class GuestResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    trap: str = ""
    truncated: bool = False
    cancelled: bool = False


class _Ticker:
    """One daemon thread per engine that advances the epoch while any guest runs.

    A per-run timer would bump the shared epoch and cut short every other guest on the
    engine; a steady tick with per-store deadlines counted in ticks does not.
    """

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._active = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Ticker:
        with self._cond:
            self._active += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="wb-epoch", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._active -= 1

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._active == 0:
                    self._cond.wait()
            self._engine.increment_epoch()
            threading.Event().wait(TICK_S)


class _Capture:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False

    def __call__(self, data: bytes) -> int:
        room = self.cap - self.size
        if room <= 0:
            self.truncated = True
            return -errno.EFBIG
        if len(data) > room:
            self.truncated = True
            data = data[:room]
        self.chunks.append(data)
        self.size += len(data)
        return len(data)

    def value(self) -> bytes:
        return b"".join(self.chunks)


_ENGINE: Any = None
_TICKER: _Ticker | None = None
_WASMTIME: ModuleType | None = None
_LOCK = threading.Lock()


def engine(wasmtime: ModuleType) -> Any:
    """The shared engine, made on the first call with the ``wasmtime`` module the lane hands
    in: epoch interruption on; wasm exceptions on (tcc's setjmp/longjmp)."""
    global _ENGINE, _TICKER, _WASMTIME
    with _LOCK:
        if _ENGINE is None:
            _WASMTIME = wasmtime
            cfg = wasmtime.Config()
            cfg.epoch_interruption = True
            cfg.wasm_exceptions = True
            _ENGINE = wasmtime.Engine(cfg)
            _TICKER = _Ticker(_ENGINE)
        return _ENGINE


_LINKERS: dict[int, Any] = {}
# Drop the linkers before interpreter teardown unloads wasmtime's bindings.
atexit.register(_LINKERS.clear)


def _wasi_linker(eng: Any) -> Any:
    """A linker with WASI only, made once per engine: its definitions read each store's
    own WASI context, so one linker serves every call (and saves ~0.1 ms per call)."""
    with _LOCK:
        linker = _LINKERS.get(id(eng))
        if linker is None:
            assert _WASMTIME is not None
            linker = _WASMTIME.Linker(eng)
            linker.define_wasi()
            _LINKERS[id(eng)] = linker
        return linker


_cancels: dict[int, tuple[Any, float, list[str]]] = {}
_cancel_ids = iter(range(1, 1 << 62))
_callback: Any = None


def _watch_cancel(store: Any, cancel: Any, deadline: float) -> int:
    """Check ``cancel`` (a ``threading.Event``) and the deadline at every epoch tick, through
    wasmtime's epoch-deadline callback (the C API; wasmtime-py pins its bindings): a set
    event stops this guest alone at the next tick. Returns an id for ``_cancels.pop``."""
    global _callback
    import ctypes
    import time

    assert _WASMTIME is not None
    B = _WASMTIME._bindings

    if _callback is None:
        cb_type = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.POINTER(B.wasmtime_context_t), ctypes.c_void_p,
                                   ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(B.wasmtime_update_deadline_kind_t))

        @cb_type
        def on_tick(_ctx: Any, data: Any, delta: Any, kind: Any) -> int:
            entry = _cancels.get(data or 0)
            if entry is not None:
                event, until, why = entry
                reason = "cancelled" if event.is_set() else ("timeout" if time.monotonic() >= until else "")
                if reason:
                    why.append(reason)
                    err = B._wasmtime_error_new(f"wb: {reason}".encode())
                    return ctypes.cast(err, ctypes.c_void_p).value or 0
            delta[0] = 1
            kind[0] = 0  # continue
            return 0

        _callback = (on_tick, ctypes.cast(ctypes.c_void_p(), ctypes.CFUNCTYPE(None, ctypes.c_void_p)))
    cid = next(_cancel_ids)
    _cancels[cid] = (cancel, deadline, [])
    B._wasmtime_store_epoch_deadline_callback(store.ptr(), _callback[0], cid, _callback[1])
    store.set_epoch_deadline(1)
    return cid


def describe(exc: BaseException) -> str:
    """The trap's cause ("wasm trap: call stack exhausted"), not its backtrace."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("wasm trap:"):
            return ln
    return lines[-1] if lines else type(exc).__name__


def run(
    module: Any,
    argv: Sequence[str],
    *,
    preopens: Sequence[Preopen] = (),
    stdin: Path | None = None,
    env: Sequence[tuple[str, str]] = (),
    limits: GuestLimits = GuestLimits(),
    extra_imports: Callable[[Any, Any], None] | None = None,
    start: Callable[[Any, Any], int] | None = None,
    cancel: Any = None,
    stdout_wrap: Callable[[Callable[[bytes], int]], Any] | None = None,
) -> GuestResult:
    """Instantiate ``module`` (compiled on :func:`engine`) and run it: ``start(store,
    instance)`` returns the exit code (default: call the WASI ``_start``)."""
    wasmtime, eng = _WASMTIME, _ENGINE
    if wasmtime is None or eng is None or _TICKER is None:
        raise RuntimeError("wasm_guest.run before wasm_guest.engine(wasmtime): compile the module on that engine first")
    store = wasmtime.Store(eng)
    store.set_limits(memory_size=limits.memory_bytes)
    store.set_epoch_deadline(max(1, math.ceil(limits.timeout_s / TICK_S)))
    watch = None
    if cancel is not None:
        import time

        watch = _watch_cancel(store, cancel, time.monotonic() + limits.timeout_s)
    wasi = wasmtime.WasiConfig()
    wasi.argv = list(argv)
    wasi.env = list(env)
    out, err = _Capture(limits.output_bytes), _Capture(limits.output_bytes)
    sink = stdout_wrap(out) if stdout_wrap is not None else out
    wasi.stdout_custom = sink
    wasi.stderr_custom = err
    if stdin is not None:
        wasi.stdin_file = str(stdin)
    for p in preopens:
        wasi.preopen_dir(str(p.host), p.guest, p.writable)
    store.set_wasi(wasi)
    if extra_imports is not None:
        linker = wasmtime.Linker(eng)
        linker.define_wasi()
        extra_imports(linker, store)
    else:
        linker = _wasi_linker(eng)
    code, timed_out, trap = 0, False, ""
    with _TICKER:
        try:
            instance = linker.instantiate(store, module)
            if start is None:
                instance.exports(store)["_start"](store)
            else:
                code = start(store, instance)
        except wasmtime.ExitTrap as exc:
            code = exc.code
            exc.__traceback__ = None  # see below
        except wasmtime.Trap as exc:
            if exc.trap_code == wasmtime.TrapCode.INTERRUPT:
                timed_out, code, trap = True, 124, f"deadline of {limits.timeout_s:g}s reached"
            else:
                code, trap = 134, describe(exc)
            # The trap's traceback holds wasmtime-py's frames, which hold the trap: a cycle that
            # keeps this store (and its WASI output tasks) alive until interpreter exit, where
            # dropping it panics a runtime thread. Cut it so the store dies here, with the call.
            exc.__traceback__ = None
        except wasmtime.WasmtimeError as exc:
            code, trap = 134, describe(exc)
            exc.__traceback__ = None
    finish = getattr(sink, "finish", None)
    if finish is not None:
        finish()
    cancelled = False
    if watch is not None:
        why = _cancels.pop(watch)[2]
        if why:
            cancelled, timed_out = why[0] == "cancelled", why[0] == "timeout"
            code, trap = 124, (f"deadline of {limits.timeout_s:g}s reached" if timed_out else "cancelled by the caller")
    result = GuestResult(code, out.value(), err.value(), timed_out, trap, out.truncated or err.truncated, cancelled)
    # Free the store now, while the interpreter is whole: a store that outlives the call
    # (kept by a cycle through a trap's frames) would be dropped at interpreter exit, when
    # its WASI output stream calls back into a finalizing Python and panics a runtime thread.
    store.close()
    return result
