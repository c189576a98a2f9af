"""WASI ``poll_oneoff`` bounded by the call's deadline (shadowing wasmtime's own).

Epoch interruption fires only while wasm executes: a guest sleeping in WASI
``poll_oneoff`` (``sleep``, ``nanosleep``, ``poll`` with a timeout) sits in host code and
would outlive its deadline. wasmtime's WASI defines every preview-1 function; this
module shadows that one (``Linker.allow_shadowing``) with a host function that waits at
most until the store's deadline (the :class:`~wbcore_wasmtime.engine.Guard` of the store,
found by its context) or its cancel event, and then traps the guest with wasmtime's
interrupt code, exactly as an epoch deadline would (the runner turns it into
``Timeout``, exit 124).

What the guest sees otherwise follows WASI preview 1:

- clock subscriptions (realtime or monotonic, relative or ``abstime``; an absolute time
  is read against the host's clock of that kind): the call returns when the earliest is
  due, with an event for each one due by then; CPU-time clocks are ``EINVAL`` events;
- ``fd_read``/``fd_write`` on 0, 1, 2 are ready at once (stdin is a fixed byte buffer and
  stdout/stderr are files: neither ever blocks), ``nbytes`` 0; other descriptors get an
  ``EBADF`` event — a guest of the command shape has no other descriptors;
- no subscriptions is ``EINVAL``; a range outside guest memory is ``EFAULT``.

Other WASI calls cannot block: ``fd_read`` reads the fixed stdin buffer (an empty one is
EOF), ``fd_write`` writes a file, and the guest gets no sockets, no preopens, no stdin
from the host's terminal.
"""

from __future__ import annotations

import ctypes
import struct
import time
from typing import TYPE_CHECKING, Any

from wbcore_wasmtime import engine as _engine

if TYPE_CHECKING:
    import wasmtime

MODULE = "wasi_snapshot_preview1"
NAME = "poll_oneoff"
# bytes: userdata u64, tag u8 @8, clock {id u32 @16, timeout u64 @24, precision u64 @32, flags u16 @40}
SUBSCRIPTION = 48
EVENT = 32  # bytes: userdata u64, error u16 @8, type u8 @10, fd_readwrite {nbytes u64 @16, flags u16 @24}
CLOCK, FD_READ, FD_WRITE = 0, 1, 2
REALTIME, MONOTONIC = 0, 1
ABSTIME = 1
ESUCCESS, EBADF, EFAULT, EINVAL = 0, 8, 21, 28
MAX_SUBSCRIPTIONS = 4096
#: How long one unguarded wait may last (a store without a guard has no deadline to keep).
UNGUARDED_MAX_S = 60.0


def define(linker: wasmtime.Linker) -> None:
    """Shadow ``wasi_snapshot_preview1.poll_oneoff`` on ``linker`` (after ``define_wasi``)."""
    import wasmtime

    i32 = wasmtime.ValType.i32()
    linker.allow_shadowing = True
    linker.define_func(MODULE, NAME, wasmtime.FuncType([i32] * 4, [i32]), poll_oneoff, access_caller=True)
    linker.allow_shadowing = False


def _due(clock: int, timeout_ns: int, flags: int, now: float) -> float | None:
    """When a clock subscription is due, in ``time.monotonic()`` seconds (None: unsupported clock)."""
    if clock not in (REALTIME, MONOTONIC):
        return None
    if not flags & ABSTIME:
        return now + timeout_ns / 1e9
    if clock == REALTIME:
        return now + (timeout_ns / 1e9 - time.time())
    return timeout_ns / 1e9


def poll_oneoff(caller: Any, in_ptr: int, out_ptr: int, nsubs: int, nevents_ptr: int) -> int:
    in_ptr, out_ptr, nsubs, nevents_ptr = (v & 0xFFFFFFFF for v in (in_ptr, out_ptr, nsubs, nevents_ptr))
    if nsubs == 0 or nsubs > MAX_SUBSCRIPTIONS:
        return EINVAL
    mem = caller["memory"]
    size = mem.data_len(caller)
    if in_ptr + nsubs * SUBSCRIPTION > size or out_ptr + nsubs * EVENT > size or nevents_ptr + 4 > size:
        return EFAULT
    raw = mem.read(caller, in_ptr, in_ptr + nsubs * SUBSCRIPTION)
    now = time.monotonic()
    clocks: list[tuple[int, float]] = []  # (userdata, due)
    ready: list[bytes] = []
    for i in range(nsubs):
        userdata, tag = struct.unpack_from("<QB", raw, i * SUBSCRIPTION)
        if tag == CLOCK:
            clock, timeout_ns, _precision, flags = struct.unpack_from("<I4xQQH", raw, i * SUBSCRIPTION + 16)
            due = _due(clock, timeout_ns, flags, now)
            if due is None:
                ready.append(_event(userdata, EINVAL, CLOCK))
            else:
                clocks.append((userdata, due))
        elif tag in (FD_READ, FD_WRITE):
            (fd,) = struct.unpack_from("<I", raw, i * SUBSCRIPTION + 16)
            ready.append(_event(userdata, ESUCCESS if fd <= 2 else EBADF, tag))
        else:
            return EINVAL
    if not ready:
        _wait_until(caller, min(due for _, due in clocks))
        now = time.monotonic()
    ready += [_event(userdata, ESUCCESS, CLOCK) for userdata, due in clocks if due <= now]
    mem.write(caller, b"".join(ready), out_ptr)
    mem.write(caller, struct.pack("<I", len(ready)), nevents_ptr)
    return ESUCCESS


def _event(userdata: int, errno: int, kind: int) -> bytes:
    return struct.pack("<QHBxxxxxQHxxxxxx", userdata, errno, kind, 0, 0)


def _wait_until(caller: Any, due: float) -> None:
    """Sleep until ``due`` (monotonic), or trap at the store's deadline / cancel, whichever is first."""
    guard = _engine.guard_for(ctypes.cast(caller._context(), ctypes.c_void_p).value or 0)
    wait = due - time.monotonic()
    if guard is None:
        if wait > 0:
            time.sleep(min(wait, UNGUARDED_MAX_S))
        return
    left = guard.deadline - time.perf_counter()  # the guard keeps perf_counter time
    cancel = guard.cancel
    if cancel is not None:
        if cancel.wait(max(0.0, min(wait, left))):
            guard.reason = guard.reason or "cancelled"
            raise _interrupt()
    else:
        time.sleep(max(0.0, min(wait, left)))
    if wait >= left:
        guard.reason = guard.reason or "timeout"
        raise _interrupt()


def _interrupt() -> BaseException:
    from wbcore_wasmtime.dock_link import interrupt_trap

    return interrupt_trap()
