"""The guest side of the caps bridge, inside a sandbox: a guest's ``wb.*`` imports linked to
functions that ask the host's Dock over the framed protocol.

The host side is the core's (:class:`wbcore_runtime.wire.capbridge.HostBridge`, which holds the
protocol's description); this side drives the engine (``Linker.define_func`` with the wasmtime
handed in), so it lives with the engine: this plugin serves it as a file
(``GuestRunnerService.sandbox_caps``) that a sandbox tier (os_process's worker, the container's
runner) takes with :func:`wbcore_runtime.contract.guest.sandbox_caps` and binds next to
``frames.py``, and loads by path. Standard library only, with ``wasmtime`` handed in; it imports
nothing of this plugin.
"""

from __future__ import annotations

from typing import Any

if __package__:
    from wbcore_runtime.wire import frames
else:  # loaded by path inside a sandbox, next to frames.py (whatever else its sys.path holds)
    import frames  # type: ignore[no-redef]

WASI = "wasi_snapshot_preview1"
CAPS = "wb"
SLOTS = ("fetch", "info")  # (ptr, cap) -> i64: the pending answer, the host's wb.info body
MAX_REQUEST = 64 << 20
STATUS_INTERNAL = 5


class Refused(Exception):
    """The host refused to link the guest's imports (its reason stays on the host)."""


class Ended(Exception):
    """The host asked the sandbox to end (a valid ``Shutdown``) while the guest waited."""


class GuestCaps:
    """Links a module's ``wb.*`` imports to functions that ask the host over ``chan``.

    ``chan`` has ``send_frame(bytes)`` and ``recv() -> (kind, payload)``; ``wt`` is the
    wasmtime package. A host frame without the secret or for another call is answered
    ``Refused`` and skipped; a channel that fails ends the sandboxed process (its host is
    gone), and so does a valid ``Shutdown``. A warm sandbox that serves many calls keeps
    one ``GuestCaps`` (the functions ``define`` links read it) and calls ``begin`` per call.
    """

    def __init__(self, chan: Any, secret: bytes, call_id: int, wt: Any) -> None:
        self.chan, self.secret, self.wt = chan, secret, wt
        self.begin(call_id)

    def begin(self, call_id: int) -> None:
        """Serve call ``call_id`` next: nothing of the previous call's answers is left."""
        self.id = call_id
        self.pending = b""
        self.info = b""

    @staticmethod
    def needs_link(module: Any) -> bool:
        return any(i.module != WASI for i in module.imports)

    @staticmethod
    def bad_abi(module: Any, wt: Any) -> str:
        """Why a ``wb.*`` import has the wrong signature, or ``""``."""
        for imp in module.imports:
            if imp.module != CAPS:
                continue
            want = (["i32", "i32"] if imp.name in SLOTS else ["i32"] * 4, ["i64"])
            ty = imp.type
            if (
                not isinstance(ty, wt.FuncType)
                or ([str(p) for p in ty.params], [str(r) for r in ty.results]) != want
            ):
                return (f"import {CAPS}.{imp.name} has the wrong signature; the Dock ABI is "
                        + ("(i32 ptr, i32 cap) -> i64" if imp.name in SLOTS
                           else "(i32 req_ptr, i32 req_len, i32 resp_ptr, i32 resp_cap) -> i64"))
        return ""

    def link(self, module: Any) -> list[str]:
        """Ask the host which caps link (``Refused`` if it refuses the imports)."""
        imports = [[i.module, i.name or ""] for i in module.imports]
        self.chan.send_frame(frames.encode(frames.LINK, frames.pack({"id": self.id, "imports": imports})))
        answer, blobs = self.expect(frames.LINK_ANSWER)
        if answer.get("refused"):
            raise Refused()
        self.info = blobs[0] if blobs else b""
        return [c for c in frames.field(answer, "caps", list) if isinstance(c, str)]

    def define(self, linker: Any, module: Any, caps: list[str]) -> None:
        wt = self.wt
        i32, i64 = wt.ValType.i32(), wt.ValType.i64()
        wanted = {i.name for i in module.imports if i.module == CAPS}
        for cap in caps:
            if cap in wanted and cap not in SLOTS:
                linker.define_func(
                    CAPS, cap, wt.FuncType([i32] * 4, [i64]), self._cap(cap), access_caller=True
                )
        for slot in SLOTS:
            if slot in wanted:
                linker.define_func(CAPS, slot, wt.FuncType([i32, i32], [i64]), self._slot(slot == "info"),
                                   access_caller=True)

    def expect(self, want: int) -> tuple[dict[str, Any], list[bytes]]:
        while True:
            kind, payload = self.chan.recv()
            try:
                if kind == frames.SHUTDOWN:
                    frames.check_shutdown(payload, self.secret)
                    raise Ended()
                if kind != want:
                    raise frames.FrameError(
                        "unexpected", f"expected {frames.name(want)}, got {frames.name(kind)}"
                    )
                obj, blobs = frames.open_sealed(kind, payload, self.secret)
                if obj.get("id") != self.id:
                    raise frames.FrameError(
                        "unexpected", f"{frames.name(kind)} for call {obj.get('id')!r}, not {self.id}"
                    )
                return obj, blobs
            except frames.FrameError as exc:
                self.chan.send_frame(frames.refused(exc.reason, exc.message))

    def ask(self, cap: str, extra: dict[str, Any], request: bytes) -> tuple[int, bytes]:
        self.chan.send_frame(
            frames.encode(frames.BROKER_CALL, frames.pack({"id": self.id, "cap": cap, **extra}, request))
        )
        obj, blobs = self.expect(frames.BROKER_ANSWER)
        return frames.field(obj, "status", int), (blobs[0] if blobs else b"")

    def _cap(self, cap: str) -> Any:
        import os

        def host(caller: Any, req_ptr: int, req_len: int, resp_ptr: int, resp_cap: int) -> int:
            try:
                mem = caller["memory"]
                size = mem.data_len(caller)
                req_ptr &= 0xFFFFFFFF
                req_len &= 0xFFFFFFFF
                if req_ptr + req_len > size:
                    status, body = self.ask(cap, {"outside": [req_ptr, req_len]}, b"")
                elif req_len > MAX_REQUEST:
                    status, body = self.ask(cap, {"too_large": req_len}, b"")
                else:
                    status, body = self.ask(cap, {}, bytes(mem.read(caller, req_ptr, req_ptr + req_len)))
                self.pending = body
                return _deliver(caller, mem, body, resp_ptr, resp_cap, status)
            except Ended:
                os._exit(0)  # the host asked us to end: nothing left to answer
            except (OSError, frames.FrameError):
                os._exit(70)  # the host is gone: nothing left to answer
            except Exception:  # noqa: BLE001 - a trap would kill the guest; report internal
                return -STATUS_INTERNAL

        return host

    def _slot(self, info: bool) -> Any:
        def slot(caller: Any, ptr: int, cap: int) -> int:
            if info:
                self.pending = self.info
            return _deliver(caller, caller["memory"], self.pending, ptr, cap, 0)

        return slot


def _deliver(caller: Any, mem: Any, body: bytes, ptr: int, cap: int, status: int) -> int:
    ptr &= 0xFFFFFFFF
    cap &= 0xFFFFFFFF
    if len(body) <= cap and ptr + len(body) <= mem.data_len(caller):
        mem.write(caller, body, ptr)
    return -status if status else len(body)
