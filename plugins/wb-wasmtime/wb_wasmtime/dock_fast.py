"""The Dock's host imports on wasmtime's unchecked C callbacks (the fast link path).

wasmtime-py's ``Linker.define_func`` converts every parameter and result through typed
``Val`` objects and wraps a ``Caller`` per call; for a broker call that is most of the
cost of crossing into the host. This module defines the same ``wb.*`` functions with
``wasmtime_linker_define_func_unchecked``: one module-level C callback reads the four
i32 arguments from the raw value array, reaches guest memory through
``wasmtime_caller_export_get`` + ``wasmtime_memory_data``, and writes the i64 result
back. Semantics are exactly those of the public path in :mod:`wb_wasmtime.dock_link`
(bounds checks and the deadline trap included); :func:`available` says whether the
bindings match (wasmtime is pinned by wb-wasmtime) and ``WB_DOCK_LINK=public`` forces
the public path.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

from wb_wasmtime.dock_link import DeadlinePassed, timeout_trap

#: ``handler(request bytes or None) -> (status, body)``, and the pending-response holder.
Handler = Callable[[bytes | None], tuple[int, bytes]]

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

    mem_kind = 3  # WASMTIME_EXTERN_MEMORY

    def memory(caller: Any) -> tuple[Any, int, int]:
        item = ffi.wasmtime_extern_t()
        if not ffi.wasmtime_caller_export_get(caller, b"memory", 6, ctypes.byref(item)) or item.kind != mem_kind:
            raise LookupError("the guest exports no memory")
        ctx = ffi.wasmtime_caller_context(caller)
        mem = ctypes.byref(item.of.memory)
        base = ctypes.addressof(ffi.wasmtime_memory_data(ctx, mem).contents)
        return item, base, int(ffi.wasmtime_memory_data_size(ctx, mem))

    def deliver(base: int, size: int, body: bytes, ptr: int, cap: int) -> None:
        if len(body) <= cap and ptr + len(body) <= size:
            ctypes.memmove(base + ptr, body, len(body))

    interrupt = ffi.wasmtime_trap_code_enum.WASMTIME_TRAP_CODE_INTERRUPT.value

    def deadline_trap(caller: Any) -> int:
        # an interrupt trap: to the runner exactly what an epoch deadline gives
        timeout_trap(ctypes.cast(ffi.wasmtime_caller_context(caller), ctypes.c_void_p).value or 0)
        return ctypes.cast(ffi.wasmtime_trap_new_code(interrupt), ctypes.c_void_p).value or 0

    @ffi.wasmtime_func_unchecked_callback_t
    def callback(env: Any, caller: Any, raw: Any, _n: int) -> int:
        try:
            kind, handler, pending = _slots[env or 0]
            a0, a1 = raw[0].i32 & 0xFFFFFFFF, raw[1].i32 & 0xFFFFFFFF
            _item, base, size = memory(caller)
            if kind == "call":
                a2, a3 = raw[2].i32 & 0xFFFFFFFF, raw[3].i32 & 0xFFFFFFFF
                status, body = handler(ctypes.string_at(base + a0, a1) if a0 + a1 <= size else None)
                pending.body = body
                # the broker may have run another guest meanwhile: re-read the memory base
                _item, base, size = memory(caller)
                deliver(base, size, body, a2, a3)
                raw[0].i64 = -status if status else len(body)
            else:  # fetch / info: (ptr, cap)
                body = handler(None)[1] if kind == "info" else pending.body
                if kind == "info":
                    pending.body = body
                deliver(base, size, body, a0, a1)
                raw[0].i64 = len(body)
        except DeadlinePassed:
            return deadline_trap(caller)
        except Exception:  # noqa: BLE001 - never trap the guest for a host-side failure
            raw[0].i64 = -INTERNAL
        return 0

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    def finalizer(env: Any) -> None:
        with _lock:
            _slots.pop(env or 0, None)

    _ffi, _callback, _finalizer = ffi, callback, finalizer
    return ffi


def available() -> bool:
    try:
        ffi = _bindings()
        return all(hasattr(ffi, n) for n in ("wasmtime_linker_define_func_unchecked", "wasmtime_caller_export_get",
                                                "wasmtime_memory_data", "wasmtime_memory_data_size"))
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
    err = ffi.wasmtime_linker_define_func_unchecked(linker.ptr(), module, len(module), item, len(item), ty.ptr(),
                                                    _callback, env, _finalizer)
    if err:
        from wasmtime import WasmtimeError

        with _lock:
            _slots.pop(env, None)
        raise WasmtimeError._from_ptr(err)
