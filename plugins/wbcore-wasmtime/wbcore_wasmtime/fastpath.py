"""The hot-loop call paths, behind one small interface (``Lean`` and ``Public``).

wasmtime-py's high-level API pays for generality on every call: ``Func.__call__``
looks up the function type and converts each value (~19 µs for a no-op);
``Memory.write``/``read`` rebuild ctypes views (6–10 µs); ``instance.exports()``
walks every export. ``Lean`` goes through the lower-level ctypes bindings instead:
one ``wasmtime_func_call_unchecked`` with a preallocated argument cell, a cached
memoryview over linear memory (refreshed only when the memory grows), and a lookup
of exactly the export asked for.

Because ``Lean`` leans on wasmtime-py internals (``wasmtime._bindings``, the
``_instance``/``_func``/``_context`` attributes), the plugin pins ``wasmtime==50.0.1``
and ``tests/test_fastpath.py`` checks that ``Lean`` and ``Public`` give identical
results. ``WB_WASM_PATH=public`` selects the public path everywhere (for comparison).

Both paths raise wasmtime's own exceptions (``ExitTrap``, ``Trap``,
``WasmtimeError``); callers map those to wbcore errors.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Protocol

import wasmtime
from wasmtime import _bindings as B
from wasmtime import _ffi as ffi
from wasmtime._error import WasmtimeError
from wasmtime._trap import Trap

PINNED = "50.0.1"

_export_get = B._wasmtime_instance_export_get
_func_call = B._wasmtime_func_call
_mem_size = B._wasmtime_memory_data_size
_mem_data = B._wasmtime_memory_data
_byref = ctypes.byref


def _raw(name: str, restype: Any) -> Any:
    """``name`` from the wasmtime C library as a bare function pointer: no argtypes, so
    ctypes skips per-argument conversion (~1 µs a call); the hot loops pass ready-made
    ``c_void_p``/``c_size_t`` objects. The GIL is released during the call (CFUNCTYPE)."""
    addr = ctypes.cast(getattr(ffi.dll, name), ctypes.c_void_p).value
    if not addr:
        raise RuntimeError(f"wasmtime's C library exports {name} as a null pointer")
    fn = ctypes.CFUNCTYPE(restype)(addr)
    # None (not a sequence) turns ctypes' argument checks off; typeshed only allows a sequence.
    fn.argtypes = None  # type: ignore[assignment]
    return fn


_raw_call_unchecked = _raw("wasmtime_func_call_unchecked", ctypes.c_void_p)
_raw_mem_size = _raw("wasmtime_memory_data_size", ctypes.c_size_t)


def _vp(obj: Any) -> ctypes.c_void_p:
    return ctypes.c_void_p(ctypes.addressof(obj))


class OutOfRange(Exception):
    """The guest returned an ``out_len`` that would read past the end of its memory."""

    def __init__(self, out_len: int, size: int) -> None:
        super().__init__(out_len, size)
        self.out_len, self.size = out_len, size


class KernelCall(Protocol):
    """A bound ``entry(in_len) -> out_len`` plus its linear memory."""

    def roundtrip(self, data: bytes | bytearray | memoryview, in_off: int, out_off: int) -> bytes: ...
    def call(self, in_len: int) -> int: ...
    def memory_size(self) -> int: ...
    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None: ...
    def read(self, offset: int, length: int) -> bytes: ...


class CallPath(Protocol):
    name: str

    def run_start(self, store: wasmtime.Store, instance: wasmtime.Instance) -> None: ...
    def memory_size(self, store: wasmtime.Store, instance: wasmtime.Instance) -> int: ...
    def kernel(self, store: wasmtime.Store, instance: wasmtime.Instance, entry: str) -> KernelCall: ...
    def wasi_stdin(self, wasi: wasmtime.WasiConfig, data: bytes) -> None: ...


def _raise(error: Any, trap: Any) -> None:
    """Turn an error/trap pointer pair into wasmtime's exception, as ``enter_wasm`` does."""
    from wasmtime._func import maybe_raise_last_exn

    if trap:
        obj = Trap._from_ptr(trap)
        maybe_raise_last_exn()
        raise obj
    if error:
        err = WasmtimeError._from_ptr(error)
        maybe_raise_last_exn()
        raise err


def _export(store: wasmtime.Store, instance: wasmtime.Instance, name: str) -> Any:
    item = ffi.wasmtime_extern_t()
    raw = name.encode()
    if not _export_get(store._context(), _byref(instance._instance), raw, len(raw), _byref(item)):
        return None
    return item


class LeanKernel:
    def __init__(self, store: wasmtime.Store, instance: wasmtime.Instance, entry: str) -> None:
        item = _export(store, instance, entry)
        if item is None or item.kind != ffi.WASMTIME_EXTERN_FUNC.value:
            raise KeyError(entry)
        _check_entry_type(store, wasmtime.Func._from_raw(item.of.func), entry)
        mem = _export(store, instance, "memory")
        if mem is None or mem.kind != ffi.WASMTIME_EXTERN_MEMORY.value:
            raise KeyError("memory")
        self._store = store  # keeps the store (and the context pointer) alive
        self._ctx = store._context()
        # Own copies: the extern structs are views into temporaries.
        self._func = ffi.wasmtime_func_t.from_buffer_copy(item.of.func)
        self._mem = ffi.wasmtime_memory_t.from_buffer_copy(mem.of.memory)
        self._memref = _byref(self._mem)
        self._cell = (ffi.wasmtime_val_raw_t * 1)()
        self._new_trap()
        self._size = -1
        self._view: memoryview = memoryview(b"")
        self._refresh()

    def _new_trap(self) -> None:
        self._trap = ctypes.POINTER(ffi.wasm_trap_t)()
        self._args = (self._ctx, _byref(self._func), self._cell, 1, _byref(self._trap))
        ctx = ctypes.c_void_p(ctypes.cast(self._ctx, ctypes.c_void_p).value)
        self._raw_args = (ctx, _vp(self._func), _vp(self._cell), ctypes.c_size_t(1), _vp(self._trap))
        self._raw_size_args = (ctx, _vp(self._mem))

    def _refresh(self) -> None:
        size = _mem_size(self._ctx, self._memref)
        if size != self._size:
            ptr = _mem_data(self._ctx, self._memref)
            if size:
                buf = (ctypes.c_ubyte * size).from_address(ctypes.addressof(ptr.contents))
                self._view = memoryview(buf).cast("B")
            else:
                self._view = memoryview(bytearray())
            self._size = size

    def roundtrip(self, data: bytes | bytearray | memoryview, in_off: int, out_off: int) -> bytes:
        """Write ``data`` at ``in_off``, call the entry, return ``out_len`` bytes at ``out_off``.

        One ctypes call into the guest and one for the memory size; the copies go through
        the cached memoryview (memory only grows, so a smaller cached size is safe)."""
        n = len(data)
        end = in_off + n
        if end > self._size:
            self._refresh()
            if end > self._size:
                raise IndexError(f"write of {n} bytes at {in_off} is outside memory ({self._size} bytes)")
        self._view[in_off:end] = data
        cell = self._cell[0]
        cell.i32 = n
        err = _raw_call_unchecked(*self._raw_args)
        if err or self._trap:
            trap = self._trap
            self._new_trap()
            _raise(ctypes.cast(err, ctypes.POINTER(ffi.wasmtime_error_t)) if err else None, trap)
        out_len = cell.i32 & 0xFFFFFFFF
        size = _raw_mem_size(*self._raw_size_args)
        if size != self._size:
            self._refresh()
        if out_off + out_len > size:
            raise OutOfRange(out_len, size)
        return self._view[out_off:out_off + out_len].tobytes()

    def call(self, in_len: int) -> int:
        cell = self._cell[0]
        cell.i32 = in_len
        err = _raw_call_unchecked(*self._raw_args)
        if err or self._trap:
            trap = self._trap
            self._new_trap()
            _raise(ctypes.cast(err, ctypes.POINTER(ffi.wasmtime_error_t)) if err else None, trap)
        return cell.i32 & 0xFFFFFFFF

    def memory_size(self) -> int:
        self._refresh()
        return self._size

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        end = offset + len(data)
        if offset < 0 or end > self._size:
            self._refresh()
            if offset < 0 or end > self._size:
                raise IndexError(
                    f"write of {len(data)} bytes at {offset} is outside memory ({self._size} bytes)"
                )
        self._view[offset:end] = data

    def read(self, offset: int, length: int) -> bytes:
        self._refresh()
        if offset < 0 or length < 0 or offset + length > self._size:
            raise IndexError(f"read of {length} bytes at {offset} is outside memory ({self._size} bytes)")
        return self._view[offset:offset + length].tobytes()


class PublicKernel:
    def __init__(self, store: wasmtime.Store, instance: wasmtime.Instance, entry: str) -> None:
        exports = instance.exports(store)
        func = exports.get(entry) if hasattr(exports, "get") else None
        if not isinstance(func, wasmtime.Func):
            raise KeyError(entry)
        _check_entry_type(store, func, entry)
        mem = exports.get("memory")
        if not isinstance(mem, wasmtime.Memory):
            raise KeyError("memory")
        self._store, self._func, self._mem = store, func, mem

    def roundtrip(self, data: bytes | bytearray | memoryview, in_off: int, out_off: int) -> bytes:
        self.write(in_off, data)
        out_len = self.call(len(data))
        size = self.memory_size()
        if out_off + out_len > size:
            raise OutOfRange(out_len, size)
        return self.read(out_off, out_len)

    def call(self, in_len: int) -> int:
        return int(self._func(self._store, in_len)) & 0xFFFFFFFF

    def memory_size(self) -> int:
        return self._mem.data_len(self._store)

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        size = self.memory_size()
        if offset < 0 or offset + len(data) > size:
            raise IndexError(f"write of {len(data)} bytes at {offset} is outside memory ({size} bytes)")
        if len(data):
            self._mem.write(self._store, bytes(data), offset)

    def read(self, offset: int, length: int) -> bytes:
        size = self.memory_size()
        if offset < 0 or length < 0 or offset + length > size:
            raise IndexError(f"read of {length} bytes at {offset} is outside memory ({size} bytes)")
        return bytes(self._mem.read(self._store, offset, offset + length))


def _check_entry_type(store: wasmtime.Store, func: wasmtime.Func, entry: str) -> None:
    ty = func.type(store)
    i32 = wasmtime.ValType.i32()
    if [str(p) for p in ty.params] != [str(i32)] or [str(r) for r in ty.results] != [str(i32)]:
        raise TypeError(f"kernel entry {entry!r} must be (i32) -> i32, found {ty.params} -> {ty.results}")


class Lean:
    name = "lean"

    def run_start(self, store: wasmtime.Store, instance: wasmtime.Instance) -> None:
        item = _export(store, instance, "_start")
        if item is None or item.kind != ffi.WASMTIME_EXTERN_FUNC.value:
            raise KeyError("_start")
        trap = ctypes.POINTER(ffi.wasm_trap_t)()
        err = _func_call(store._context(), _byref(item.of.func), None, 0, None, 0, _byref(trap))
        if err or trap:
            _raise(err, trap)

    def memory_size(self, store: wasmtime.Store, instance: wasmtime.Instance) -> int:
        item = _export(store, instance, "memory")
        if item is None or item.kind != ffi.WASMTIME_EXTERN_MEMORY.value:
            return 0
        return int(_mem_size(store._context(), _byref(item.of.memory)))

    def kernel(self, store: wasmtime.Store, instance: wasmtime.Instance, entry: str) -> KernelCall:
        return LeanKernel(store, instance, entry)

    def wasi_stdin(self, wasi: wasmtime.WasiConfig, data: bytes) -> None:
        vec = ffi.wasm_byte_vec_t()
        n = len(data)
        buf = (ctypes.c_ubyte * n).from_buffer_copy(data) if n else None
        ffi.wasm_byte_vec_new(_byref(vec), n, buf)
        # wasi_config_set_stdin_bytes takes ownership of the vector.
        ffi.wasi_config_set_stdin_bytes(wasi.ptr(), _byref(vec))


class Public:
    name = "public"

    def run_start(self, store: wasmtime.Store, instance: wasmtime.Instance) -> None:
        start = instance.exports(store).get("_start")
        if not isinstance(start, wasmtime.Func):
            raise KeyError("_start")
        start(store)

    def memory_size(self, store: wasmtime.Store, instance: wasmtime.Instance) -> int:
        mem = instance.exports(store).get("memory")
        return mem.data_len(store) if isinstance(mem, wasmtime.Memory) else 0

    def kernel(self, store: wasmtime.Store, instance: wasmtime.Instance, entry: str) -> KernelCall:
        return PublicKernel(store, instance, entry)

    def wasi_stdin(self, wasi: wasmtime.WasiConfig, data: bytes) -> None:
        import tempfile

        # The public API takes stdin only as a file: write one and hand it over; the
        # config opens it at once, so the name can go when the block ends.
        with tempfile.NamedTemporaryFile(prefix="wb-stdin-") as fh:
            fh.write(data)
            fh.flush()
            wasi.stdin_file = fh.name


def select(name: str | None = None) -> CallPath:
    """The call path to use: ``Lean`` unless ``WB_WASM_PATH=public`` (or ``name``)."""
    name = name or os.environ.get("WB_WASM_PATH", "lean")
    return Public() if name == "public" else Lean()


def check_pin() -> str | None:
    """``None`` when the installed wasmtime is the pinned one, else why not."""
    from importlib.metadata import version

    have = version("wasmtime")
    return None if have == PINNED else f"wasmtime {have} is installed; the lean paths are pinned to {PINNED}"
