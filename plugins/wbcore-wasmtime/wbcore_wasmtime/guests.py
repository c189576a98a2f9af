"""The WASI guest runner this plugin serves (``wbcore_guest_runners``): lanes whose compiler is
itself a wasm guest (c-wasm: TinyCC; js/ts/svelte: QuickJS) run it here, bounded in time,
memory and output (``wbcore_runtime.contract.guest``).

Everything engine-side is this plugin's one copy: the process engine (:func:`engine.get`),
its epoch ticker, and the per-tick :class:`engine.Guard` that stops a guest at its
wall-clock deadline or once its cancel event is set. Compiled modules are kept per process
and on disk through the core's one compiled-cache home (``store.artifacts.compiled_file``),
under a name carrying the engine's cache key (wasmtime version, config, CPU).

A guest sees only the directories it is handed (``preopens``), its stdout/stderr are
captured up to a cap, and nothing here executes native code from the source being compiled.
"""

from __future__ import annotations

import atexit
import errno
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from wbcore_runtime.contract.guest import GuestLimits, GuestModule, GuestResult, Preopen
from wbcore_runtime.store.artifacts import compiled_file
from wbcore_runtime.store.digest import sha256

from wbcore_wasmtime import engine as _engine
from wbcore_wasmtime.command import describe_trap

#: Fuel given to a guest when the engine meters fuel (``WB_WASM_FUEL=1``): a compiler guest is
#: bounded by its deadline, not by fuel, but a metered store with none traps at once.
GUEST_FUEL = (1 << 63) - 1


class _Capture:
    """A WASI output stream kept in memory up to ``cap`` bytes; more is refused (EFBIG)."""

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


class WasiGuests:
    """The guest runner: compiled modules by (code digest, engine key), one WASI linker per
    engine (its definitions read each store's own WASI context, so one serves every call)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._modules: _engine.Memo[str, GuestModule] = _engine.Memo(_engine.MAX_CACHED_MODULES)
        self._linker: tuple[Any, Any] | None = None  # (engine, linker)

    def module(self, wasm: bytes, *, cache_dir: Path | None = None, name: str = "guest") -> GuestModule:
        import wasmtime

        eng = _engine.get()
        digest = sha256(wasm).hexdigest()
        key = sha256(f"{digest}\0{eng.cache_key}".encode()).hexdigest()[:24]

        def make() -> GuestModule:
            if cache_dir is None:
                handle = wasmtime.Module(eng.wasm, wasm)
            else:
                handle, _built = compiled_file(
                    cache_dir / f"{name}-{key}.cwasm", lambda: wasm,
                    compile=lambda w: bytes(wasmtime.Module(eng.wasm, w).serialize()),
                    load=lambda p: wasmtime.Module.deserialize_file(eng.wasm, str(p)),
                    loads=lambda b: wasmtime.Module.deserialize(eng.wasm, b))
            return GuestModule(self, handle, digest, tuple(e.name for e in handle.exports))

        return self._modules.get(key, make)

    def _wasi_linker(self, eng: Any) -> Any:
        import wasmtime

        with self._lock:
            if self._linker is None or self._linker[0] is not eng:
                linker = wasmtime.Linker(eng)
                linker.define_wasi()
                self._linker = (eng, linker)
            return self._linker[1]

    def clear(self) -> None:
        """Drop the compiled modules and the linker (a forked child, interpreter exit)."""
        self._modules.drain()
        with self._lock:
            self._linker = None

    def run(
        self,
        module: GuestModule,
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
        import wasmtime

        if module.runner is not self:
            raise ValueError("a guest module runs on the runner that compiled it (GuestModule.runner)")
        eng = _engine.get()
        store = wasmtime.Store(eng.wasm)
        store.set_limits(memory_size=limits.memory_bytes)
        if eng.fuel:
            store.set_fuel(GUEST_FUEL)
        # The engine's one guard: checked at every epoch tick, it stops this guest alone at the
        # deadline or once ``cancel`` is set.
        guard = _engine.Guard(time.perf_counter() + limits.timeout_s, cancel=cancel)
        gid = _engine.attach_guard(store, guard)
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
            linker = wasmtime.Linker(eng.wasm)
            linker.define_wasi()
            extra_imports(linker, store)
        else:
            linker = self._wasi_linker(eng.wasm)
        code, timed_out, trap = 0, False, ""
        try:
            with eng.ticker.ticking():
                try:
                    instance = linker.instantiate(store, module.handle)
                    if start is None:
                        entry: Any = instance.exports(store)["_start"]
                        entry(store)
                    else:
                        code = start(store, instance)
                except wasmtime.ExitTrap as exc:
                    code = exc.code
                    exc.__traceback__ = None  # see below
                except wasmtime.Trap as exc:
                    if exc.trap_code == wasmtime.TrapCode.INTERRUPT:
                        timed_out, code, trap = True, 124, f"deadline of {limits.timeout_s:g}s reached"
                    else:
                        code, trap = 134, describe_trap(exc)
                    # The trap's traceback holds wasmtime-py's frames, which hold the trap: a cycle
                    # that keeps this store (and its WASI output tasks) alive until interpreter exit,
                    # where dropping it panics a runtime thread. Cut it so the store dies here.
                    exc.__traceback__ = None
                except wasmtime.WasmtimeError as exc:
                    code, trap = 134, describe_trap(exc)
                    exc.__traceback__ = None
        finally:
            _engine.detach_guard(gid)
        finish = getattr(sink, "finish", None)
        if finish is not None:
            finish()
        cancelled = guard.reason == "cancelled"
        if guard.reason in ("timeout", "cancelled"):
            timed_out = guard.reason == "timeout"
            code, trap = (
                124,
                (f"deadline of {limits.timeout_s:g}s reached" if timed_out else "cancelled by the caller"),
            )
        result = GuestResult(
            code, out.value(), err.value(), timed_out, trap, out.truncated or err.truncated, cancelled
        )
        # Free the store now, while the interpreter is whole: a store that outlives the call
        # would be dropped at interpreter exit, when its WASI output stream calls back into a
        # finalizing Python and panics a runtime thread.
        store.close()
        return result


_runner = WasiGuests()
# Drop compiled modules before interpreter teardown unloads wasmtime's bindings.
atexit.register(_runner.clear)
if hasattr(os, "register_at_fork"):
    # a forked child gets its own engine (engine._after_fork_in_child): modules of the old one
    # cannot instantiate in its stores
    os.register_at_fork(after_in_child=_runner.clear)


def runner(runtime: Any = None) -> WasiGuests:
    """The process's guest runner (``wbcore_guest_runners``' factory)."""
    return _runner
