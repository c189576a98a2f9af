"""The ``kernel`` shape (seed 004 "Kernel ABI"): instantiate once, call many times.

The module exports ``memory`` and ``entry`` (default ``process``) of type
``(i32) -> i32``. Per call the host writes the input at ``in_off``, calls
``entry(in_len)``, and reads ``out_len`` bytes at ``out_off``: one function call and
two memory copies, no fresh store, no WASI stdio.

The arena is checked on both sides: an input that does not fit between ``in_off``
and ``out_off`` (or the end of memory) is ``InvalidArgs``; an ``out_len`` that would
read past the end of memory is ``KernelABIError`` — the host never reads outside
the guest's memory. Every call has the kernel's deadline (epoch interruption); a
request's ``cancel`` event stops a running call too; a
trap or timeout poisons the instance (its memory may be half-written), so the next
call instantiates afresh.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from wbcore_wasmtime import engine as _engine
from wbcore_wasmtime import fastpath
from wbcore_runtime.contract.calls import GuestTrap, KernelABIError, LimitExceeded
from wbcore_runtime.contract.kernel_calls import KernelRequest
from wbcore_runtime.contract.errors import InvalidArgs, Timeout

if TYPE_CHECKING:
    from wbcore_runtime.runtime import Runtime


_clock = time.perf_counter


class KernelInstance:
    """One live kernel: a store, an instance and a bound entry. Not thread-safe by
    design (one arena); use one instance per thread — :meth:`KernelRunner.open` is cheap."""

    def __init__(self, runner: KernelRunner, req: KernelRequest) -> None:
        self.runner = runner
        self.req = req
        self.spec = req.spec
        self.calls = 0
        self._timeout = req.spec.timeout_s
        self._gid = 0
        self._k: fastpath.KernelCall | None = None
        self._store: Any = None
        self._closed = False
        self._ticking = False
        self._max_in = 0
        self._instantiate()

    def _instantiate(self) -> None:
        import wasmtime

        req, eng = self.req, self.runner.engine
        loaded = self.runner.modules.load(self.runner.runtime.artifacts, req.sha256)
        store = wasmtime.Store(eng.wasm)
        store.set_limits(memory_size=req.profile.memory_bytes, instances=4, tables=8, memories=2)
        self._guard = _engine.Guard(float("inf"), cancel=req.cancel)
        self._gid = _engine.attach_guard(store, self._guard)
        if eng.fuel:
            store.set_fuel(2**62)
        store.set_wasi(wasmtime.WasiConfig())  # no argv, env, files or stdio
        try:
            try:
                instance = loaded.instantiate(
                    store, name=req.name, runtime=self.runner.runtime, caps=req.caps, principal=req.principal,
                    toolkit=req.toolkit, allowed_hosts=getattr(req, "allowed_hosts", ()),
                )
                k = self.runner.path.kernel(store, instance, self.spec.entry)
            except KeyError as exc:
                raise KernelABIError(
                    f"kernel {req.name}: module exports no {exc.args[0]!r} (needs memory and "
                    f"{self.spec.entry})"
                ) from None
            except TypeError as exc:
                raise KernelABIError(f"kernel {req.name}: {exc}") from None
            except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
                raise GuestTrap(f"kernel {req.name}: failed to instantiate: {_first(exc)}") from None
            size = k.memory_size()
            if not (0 <= self.spec.in_off < size and 0 <= self.spec.out_off < size):
                raise KernelABIError(
                    f"kernel {req.name}: in_off {self.spec.in_off} / out_off {self.spec.out_off} lie outside "
                    f"its {size}-byte memory")
        except BaseException:
            _engine.detach_guard(self._gid)
            raise
        self._store, self._k = store, k
        self._max_in = self.max_input
        if not self._ticking:
            eng.ticker.enter()
            self._ticking = True

    @property
    def max_input(self) -> int:
        k = self._live()
        in_off, out_off = self.spec.in_off, self.spec.out_off
        end = out_off if out_off > in_off else k.memory_size()
        return end - in_off

    def _live(self) -> fastpath.KernelCall:
        if self._k is None:
            if self._closed:
                raise InvalidArgs(f"kernel {self.req.name} is closed")
            self._instantiate()
        assert self._k is not None
        return self._k

    def call(self, data: bytes | bytearray | memoryview) -> bytes:
        """One transform: ``data`` in, the kernel's output out."""
        k = self._k if self._k is not None else self._live()
        n = len(data)
        if n > self._max_in:
            self._max_in = self.max_input
            if n > self._max_in:
                raise InvalidArgs(
                    f"kernel {self.req.name}: input of {n} bytes is over its {self._max_in}-byte "
                    f"input arena (in_off {self.spec.in_off})"
                )
        self._guard.deadline = _clock() + self._timeout
        try:
            out = k.roundtrip(data, self.spec.in_off, self.spec.out_off)
        except fastpath.OutOfRange as exc:
            self._poison()
            raise KernelABIError(
                f"kernel {self.req.name}: returned out_len {exc.out_len} at out_off {self.spec.out_off}, "
                f"past the end of its {exc.size}-byte memory; refused (the host reads only inside guest "
                "memory)"
            ) from None
        except Exception as exc:
            self._fault(exc)
            raise
        self.calls += 1
        return out

    def _fault(self, exc: BaseException) -> None:
        import wasmtime

        if not isinstance(exc, (wasmtime.Trap, wasmtime.WasmtimeError)):
            return
        from wbcore_runtime.contract.calls import near_memory_cap

        size = self._k.memory_size() if self._k is not None else 0
        self._poison()
        code = getattr(exc, "trap_code", None)
        if self._guard.reason == "cancelled":
            raise Timeout(f"kernel {self.req.name}: cancelled by the caller; the guest was stopped") from None
        if self._guard.reason == "timeout" or code == wasmtime.TrapCode.INTERRUPT:
            raise Timeout(f"kernel {self.req.name}: over its {self.spec.timeout_s:g} s deadline") from None
        if code == wasmtime.TrapCode.OUT_OF_FUEL:
            raise LimitExceeded(f"kernel {self.req.name}: ran out of fuel", limit="fuel") from None
        cap = self.req.profile.memory_bytes
        if near_memory_cap(size, cap):
            raise LimitExceeded(
                f"kernel {self.req.name}: hit the {cap >> 20} MiB memory limit of profile "
                f"{self.req.profile.name} "
                f"({_first(exc)})",
                limit="memory",
            ) from None
        raise GuestTrap(f"kernel {self.req.name}: guest trapped: {_first(exc)}") from None

    def _poison(self) -> None:
        _engine.detach_guard(self._gid)
        self._k = None
        self._store = None
        self._max_in = 0

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _engine.detach_guard(self._gid)
            self._k = None
            self._store = None
            if self._ticking:
                self.runner.engine.ticker.leave()
                self._ticking = False

    def __enter__(self) -> KernelInstance:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - at interpreter shutdown there is nothing to tell
            pass


def _first(exc: BaseException) -> str:
    from wbcore_wasmtime.command import describe_trap

    return describe_trap(exc)


class KernelRunner(_engine.EngineRunner):
    """``ExecShape("kernel").runner(runtime)``: opens :class:`KernelInstance` s."""

    def __init__(self, runtime: Runtime) -> None:
        super().__init__(runtime)
        self._lock = threading.Lock()

    def open(self, req: KernelRequest) -> KernelInstance:
        return KernelInstance(self, req)

    def call(self, req: KernelRequest, data: bytes = b"") -> bytes:
        """One-shot: open, call once, close (``Runtime.kernel_call`` keeps instances)."""
        with self.open(req) as inst:
            return inst.call(data)


def runner(runtime: Runtime) -> KernelRunner:
    return KernelRunner(runtime)
