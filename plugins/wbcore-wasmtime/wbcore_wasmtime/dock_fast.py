"""The Dock's host imports on wasmtime's unchecked C callbacks (the fast link path).

wasmtime-py's ``Linker.define_func`` converts every parameter and result through typed
``Val`` objects and wraps a ``Caller`` per call; for a broker call that is most of the
cost of crossing into the host. This module defines the same ``wb.*`` functions with
``wasmtime_linker_define_func_unchecked``: one module-level C callback reads the four
i32 arguments from the raw value array, reaches guest memory through
``wasmtime_caller_export_get`` + ``wasmtime_memory_data``, and writes the i64 result
back. Semantics are exactly those of the public path in :mod:`wbcore_wasmtime.dock_link`
(bounds checks and the deadline trap included); :func:`available` says whether the
bindings match (wasmtime is pinned by wbcore-wasmtime) and ``WB_DOCK_LINK=public`` forces
the public path.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import Any

from wbcore_runtime.dispatch.dock import MAX_REQUEST
from wbcore_wasmtime.dock_link import DeadlinePassed, Handler, timeout_trap

_lock = threading.Lock()
_slots: dict[int, tuple[str, Any, Any]] = {}  # env id -> (kind, handler, pending)
_next = [1]
_ffi: Any = None
_callback: Any = None
_finalizer: Any = None
INTERNAL = 5


def _bindings() -> Any:
    global _ffi, _callback, _finalizer
    if _ffi is not None:
        return _ffi
    from wasmtime import _bindings as ffi

    from wbcore_wasmtime.fastpath import _raw  # deferred with wasmtime: the one bare-pointer binder

    mem_kind = 3  # WASMTIME_EXTERN_MEMORY
    # The C functions as bare pointers without argtypes (ctypes then converts nothing;
    # every argument below is a ready ctypes object): ~0.3 µs a call instead of ~1.5.
    export_get = _raw("wasmtime_caller_export_get", ctypes.c_bool)
    caller_context = _raw("wasmtime_caller_context", ctypes.c_void_p)
    memory_data = _raw("wasmtime_memory_data", ctypes.c_void_p)
    memory_data_size = _raw("wasmtime_memory_data_size", ctypes.c_size_t)
    name, name_len = ctypes.c_char_p(b"memory"), ctypes.c_size_t(6)
    unpack, string_at, memmove, byref = struct.unpack_from, ctypes.string_at, ctypes.memmove, ctypes.byref
    i64_at = ctypes.c_int64.from_address
    void_p, cast, addressof = ctypes.c_void_p, ctypes.cast, ctypes.addressof
    # the argument cells seen in place (no copy); ``addressof(raw.contents)`` is a third of
    # ``cast(raw, c_void_p).value``'s cost
    four_args, two_args = (ctypes.c_char * 52).from_address, (ctypes.c_char * 20).from_address

    found: dict[int, tuple[int, Any, Any, Any]] = {}  # env id -> (store context, mem ref, ctx arg, extern)

    def memory(env: int, caller: Any) -> tuple[Any, Any]:
        """The caller's ``memory`` export and its store context (both as ctypes arguments),
        looked up once per instance: an export and its store do not change under a call."""
        ctx_value = caller_context(caller)
        hit = found.get(env)
        if hit is not None and hit[0] == ctx_value:
            return hit[1], hit[2]
        item = ffi.wasmtime_extern_t()
        if not export_get(caller, name, name_len, byref(item)) or item.kind != mem_kind:
            raise LookupError("the guest exports no memory")
        mem, ctx = byref(item.of.memory), void_p(ctx_value)
        found[env] = (ctx_value, mem, ctx, item)  # the extern is kept alive with its reference
        return mem, ctx

    def deliver(ctx: Any, mem: Any, body: bytes, ptr: int, cap: int) -> None:
        if 0 < len(body) <= cap and ptr + len(body) <= memory_data_size(ctx, mem):
            memmove(memory_data(ctx, mem) + ptr, body, len(body))

    interrupt = ffi.wasmtime_trap_code_enum.WASMTIME_TRAP_CODE_INTERRUPT.value

    def deadline_trap(caller: Any) -> int:
        # an interrupt trap: to the runner exactly what an epoch deadline gives
        timeout_trap(caller_context(caller) or 0)
        return cast(ffi.wasmtime_trap_new_code(interrupt), void_p).value or 0

    @ffi.wasmtime_func_unchecked_callback_t
    def callback(env: Any, caller: Any, raw: Any, _n: int) -> int:
        try:
            kind, handler, pending = _slots[env or 0]
            args = addressof(raw.contents)
            mem, ctx = memory(env or 0, caller)
            if kind == "call":
                # four i32 in 16-byte wasmtime_val_raw_t cells, read as the unsigned offsets they are
                a0, a1, a2, a3 = unpack("<I12xI12xI12xI", four_args(args))
                # base and size read once: the handler runs host code that cannot touch this
                # instance's memory (a nested guest runs in a store of its own)
                size, base = memory_data_size(ctx, mem), memory_data(ctx, mem)
                request = (None if a0 + a1 > size else a1 if a1 > MAX_REQUEST  # over the cap: not copied
                           else string_at(base + a0, a1) if a1 else b"")
                status, body = handler(request)
                pending.body = body
                n = len(body)
                if 0 < n <= a3 and a2 + n <= size:
                    memmove(base + a2, body, n)
                i64_at(args).value = -status if status else len(body)
            else:  # fetch / info: (ptr, cap)
                a0, a1 = unpack("<I12xI", two_args(args))
                if kind == "info":
                    pending.body = handler(None)[1]
                deliver(ctx, mem, pending.body, a0, a1)
                i64_at(args).value = len(pending.body)
        except DeadlinePassed:
            return deadline_trap(caller)
        except Exception:  # noqa: BLE001 - never trap the guest for a host-side failure
            try:
                i64_at(cast(raw, void_p).value or 0).value = -INTERNAL
            except Exception:  # noqa: BLE001
                pass
        return 0

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    def finalizer(env: Any) -> None:
        with _lock:
            _slots.pop(env or 0, None)
            found.pop(env or 0, None)

    _ffi, _callback, _finalizer = ffi, callback, finalizer
    return ffi


def available() -> bool:
    try:
        ffi = _bindings()
        return all(
            hasattr(ffi, n)
            for n in (
                "wasmtime_linker_define_func_unchecked", "wasmtime_caller_export_get", "wasmtime_memory_data",
                "wasmtime_memory_data_size",
            )
        )
    except Exception:  # noqa: BLE001 - a different wasmtime: use the public path
        return False


def define(linker: Any, name: str, ty: Any, kind: str, handler: Handler | None, pending: Any) -> None:
    """Define ``wb.<name>`` on ``linker``: ``kind`` is "call" (4 args), "fetch" or "info" (2 args)."""
    ffi = _bindings()
    with _lock:
        env = _next[0]
        _next[0] += 1
        _slots[env] = (kind, handler, pending)
    module, item = b"wb", name.encode()
    err = ffi.wasmtime_linker_define_func_unchecked(
        linker.ptr(), module, len(module), item, len(item), ty.ptr(), _callback, env, _finalizer
    )
    if err:
        from wasmtime import WasmtimeError

        with _lock:
            _slots.pop(env, None)
        raise WasmtimeError._from_ptr(err)
