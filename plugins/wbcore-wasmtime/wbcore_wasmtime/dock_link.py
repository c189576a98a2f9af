"""The Dock's guest ABI on wasmtime: ``wb.<cap>`` host imports in front of ``Dock.call_raw``.

The core Dock (``wbcore_runtime.dispatch.dock``) takes bytes and gives bytes; this module is where they
come from and go to in a wasmtime guest (the ABI is in ``docs/dock.md``):

- ``wb.<cap>(req_ptr, req_len, resp_ptr, resp_cap) -> i64``: the request is read from
  guest memory (a range outside it, or a length over ``MAX_REQUEST``, is ``invalid-args``,
  audited, and nothing is copied), handed to
  ``Dock.call_raw``, and the response (or error map) written at ``resp_ptr`` only when it
  fits; the result is its length or ``-status``;
- ``wb.fetch(ptr, cap) -> i64``: the instance's pending response (the two-call protocol);
- ``wb.info(ptr, cap) -> i64``: ``Dock.info``, always linked, grants nothing.

Which imports may be linked at all is the core's decision (``Dock.linkable`` on the
module's import names); this module adds the signature check and the linking.

**The deadline holds in a host call.** Epoch interruption fires only while wasm runs. A
broker call that returns after the context's deadline gets its result discarded by the
core (audited as timeout), and the host function then traps the guest with the timeout
(the store's guard, ``engine.guard_for``, records why) instead of letting it run on.
Runs whose guest may block in a broker are driven from a worker thread by the command
runner, so its caller gets ``Timeout`` at the deadline even while the broker still
blocks (``wbcore_wasmtime.command``).

Two link paths with identical behaviour: wasmtime's unchecked C callbacks
(``wbcore_wasmtime.dock_fast``, the default: ~16x cheaper per crossing) and the public
``Linker.define_func`` (``WB_DOCK_LINK=public``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wbcore_runtime.dispatch.dock import (
    ALWAYS_LINKED,
    IMPORT_MODULE,
    MAX_REQUEST,
    STATUS,
    DockContext,
    request_too_large,
)
from wbcore_runtime.contract.errors import ErrorKind, InvalidArgs

if TYPE_CHECKING:
    import wasmtime

    from wbcore_runtime.dispatch.dock import Dock

CALL_SIGNATURE = "(i32 req_ptr, i32 req_len, i32 resp_ptr, i32 resp_cap) -> i64"
SLOT_SIGNATURE = "(i32 ptr, i32 cap) -> i64"

#: ``handler(request) -> (status, body)``: the request's bytes, None when its range lies outside
#: guest memory, or its length alone when that is over ``MAX_REQUEST`` (then never copied).
Handler = Callable[[bytes | int | None], tuple[int, bytes]]


class Pending:
    """The last response of one instance, kept for ``wb.fetch`` (the two-call protocol)."""

    __slots__ = ("body",)

    def __init__(self) -> None:
        self.body = b""


class DeadlinePassed(Exception):
    """Raised by a handler when its call ended past the deadline: the host function traps."""


def imports_of(module: wasmtime.Module) -> list[str]:
    """The ``wb.*`` import names of a compiled module."""
    return [imp.name or "" for imp in module.imports if imp.module == IMPORT_MODULE]


def check_signatures(module: wasmtime.Module) -> None:
    """Every ``wb.*`` import must have the ABI's signature (``invalid-args`` naming it)."""
    import wasmtime

    i32, i64 = str(wasmtime.ValType.i32()), str(wasmtime.ValType.i64())
    for imp in module.imports:
        if imp.module != IMPORT_MODULE:
            continue
        slot = imp.name in ALWAYS_LINKED
        want = ([i32] * (2 if slot else 4), [i64])
        got = imp.type
        if (
            not isinstance(got, wasmtime.FuncType)
            or ([str(p) for p in got.params], [str(r) for r in got.results]) != want
        ):
            raise InvalidArgs(f"import {IMPORT_MODULE}.{imp.name} has the wrong signature; the Dock ABI is "
                              + (SLOT_SIGNATURE if slot else CALL_SIGNATURE))


def link(dock: Dock, linker: wasmtime.Linker, module: wasmtime.Module, ctx: DockContext) -> list[str]:
    """Define the ``wb.*`` imports ``module`` uses, for caps ``ctx`` grants only.

    Call once per instance, before instantiation, on a linker no other context shares.
    Raises ``CapabilityDenied`` (naming the cap) when the module imports a cap ``ctx``
    does not grant, ``InvalidArgs`` for a wrong signature. Returns the linked caps.
    """
    import wasmtime

    from wbcore_wasmtime import dock_fast

    names = imports_of(module)
    caps = dock.linkable(names, ctx)
    check_signatures(module)
    i32, i64 = wasmtime.ValType.i32(), wasmtime.ValType.i64()
    call_ty = wasmtime.FuncType([i32, i32, i32, i32], [i64])
    slot_ty = wasmtime.FuncType([i32, i32], [i64])
    pending = Pending()
    fast = dock.runtime.env.get("WB_DOCK_LINK", "fast") != "public" and dock_fast.available()
    for cap in caps:
        handler = call_handler(dock, cap, ctx)
        if fast:
            dock_fast.define(linker, cap, call_ty, "call", handler, pending)
        else:
            linker.define_func(IMPORT_MODULE, cap, call_ty, _call_func(handler, pending), access_caller=True)
    for name in ("fetch", "info"):
        if name not in names:
            continue
        slot: Handler | None = None
        if name == "info":
            def slot(_req: bytes | int | None) -> tuple[int, bytes]:
                return 0, dock.info(ctx)
        if fast:
            dock_fast.define(linker, name, slot_ty, name, slot, pending)
        else:
            linker.define_func(IMPORT_MODULE, name, slot_ty, _slot_func(slot, pending), access_caller=True)
    return caps


def call_handler(dock: Dock, cap: str, ctx: DockContext) -> Handler:
    """``wb.<cap>``'s host side on bytes: bounds refusal, ``Dock.call_raw``, the deadline."""
    call_raw, deadline = dock.call_raw, ctx.deadline
    monotonic = time.monotonic

    def handler(request: bytes | int | None) -> tuple[int, bytes]:
        if request is None:
            return dock.deny(ctx, cap, InvalidArgs(f"{cap}: the request lies outside guest memory"))
        if isinstance(request, int):
            return dock.deny(ctx, cap, request_too_large(cap, request), nreq=request)
        result = call_raw(ctx, cap, request)
        if deadline is not None and monotonic() >= deadline:
            raise DeadlinePassed(cap)
        return result

    return handler


def timeout_trap(context_address: int) -> None:
    """Tell the store's guard (if any) that its guest stops for its deadline."""
    from wbcore_wasmtime import engine

    guard = engine.guard_for(context_address)
    if guard is not None and not guard.reason:
        guard.reason = "timeout"


def interrupt_trap() -> wasmtime.Trap:
    """A trap with wasmtime's interrupt code: to the runner, what an epoch deadline gives."""
    from wasmtime import Trap
    from wasmtime import _bindings as ffi

    return Trap._from_ptr(
        ffi.wasmtime_trap_new_code(ffi.wasmtime_trap_code_enum.WASMTIME_TRAP_CODE_INTERRUPT.value)
    )


def _context_address(caller: Any) -> int:
    import ctypes

    return ctypes.cast(caller._context(), ctypes.c_void_p).value or 0


def _deliver(caller: Any, mem: Any, size: int, body: bytes, ptr: int, cap: int, status: int) -> int:
    ptr &= 0xFFFFFFFF
    cap &= 0xFFFFFFFF
    if len(body) <= cap and ptr + len(body) <= size:
        mem.write(caller, body, ptr)
    return -status if status else len(body)


def _call_func(handler: Handler, pending: Pending) -> Callable[..., int]:
    def host(caller: Any, req_ptr: int, req_len: int, resp_ptr: int, resp_cap: int) -> int:
        req_ptr &= 0xFFFFFFFF
        req_len &= 0xFFFFFFFF
        try:
            mem = caller["memory"]
            size = mem.data_len(caller)
            status, body = handler(
                None if req_ptr + req_len > size
                else req_len if req_len > MAX_REQUEST else mem.read(caller, req_ptr, req_ptr + req_len)
            )
            pending.body = body
            # the broker may have run another guest meanwhile: re-read the memory size
            return _deliver(caller, mem, mem.data_len(caller), body, resp_ptr, resp_cap, status)
        except DeadlinePassed:
            timeout_trap(_context_address(caller))
            raise interrupt_trap() from None
        except Exception:  # noqa: BLE001 - a trap would kill the guest; report internal
            return -STATUS[ErrorKind.INTERNAL]

    return host


def _slot_func(handler: Handler | None, pending: Pending) -> Callable[..., int]:
    def slot(caller: Any, ptr: int, cap: int) -> int:
        if handler is not None:  # info; fetch re-delivers the pending response
            pending.body = handler(None)[1]
        mem = caller["memory"]
        return _deliver(caller, mem, mem.data_len(caller), pending.body, ptr, cap, 0)

    return slot
