"""Caps across a sandbox boundary: a guest's ``wb.<cap>`` calls answered by the host's Dock.

A sandbox tier that runs wasm away from this process (the os_process tier's warm worker,
the container tier's runner) links the guest's ``wb.*`` imports to functions that forward
each call over the framed protocol (:mod:`wbcore_runtime.wire.frames`) and wait for the host's answer;
the sandbox holds no credential and opens no socket, and every decision stays the Dock's.
This is the one bridge: every tier that bridges wasm caps uses this host side and its guest side, so the
link check, the grant and revocation checks, the nesting depth and the framing of a
bridged cap are one code path:

    guest side (:class:`GuestCaps`)                  host side (:class:`HostBridge`)
    Link{id, imports}                        →        Dock.linkable: which caps link, or the refusal
                                             ←        LinkAnswer{id, caps | refused, secret} + wb.info body
    BrokerCall{id, cap} + CBOR request       →        Dock.call_raw (or Dock.deny: not linked,
                                                      outside guest memory, over the frame cap)
                                             ←        BrokerAnswer{id, status, secret} + CBOR body

Host frames carry the session secret (refused without it, :func:`frames.open_sealed`) and
the call's id; a valid ``Shutdown`` (the secret) while the guest waits ends the sandbox
(``Ended``). The guest side drives the engine (it links ``wb.*`` imports with the sandbox's
wasmtime), so it is no core code: the WASI guest runner's plugin serves it as a file
(``GuestRunnerService.sandbox_caps``, ``wbcore-wasmtime``: ``wbcore_wasmtime/sandbox_caps.py``),
which a tier takes with :func:`wbcore_runtime.contract.guest.sandbox_caps` and binds next to
``frames.py``. The ABI is the instance tier's: ``wb.<cap>(req_ptr, req_len, resp_ptr, resp_cap)
-> i64`` (length, or minus a status), ``wb.fetch`` / ``wb.info`` ``(ptr, cap) -> i64``.
"""

from __future__ import annotations

import contextvars
import threading
import time
from typing import Any

from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, WbError
from wbcore_runtime.wire import frames

WASI = "wasi_snapshot_preview1"
CAPS = "wb"


class HostBridge:
    """Answers one call's Link and BrokerCall frames through ``runtime.dock``.

    ``serve(recv, send)`` runs until the guest's end closes (the sandbox ended); a tier
    that reads the channel itself (its own frames interleave) hands each caps frame to
    ``answer``. The refusal made at link time is kept in ``refusal`` for the tier to raise,
    and a guest that broke the protocol leaves its reason in ``broken`` (the tier reports
    it). The Dock's context gets the time left of the ``timeout_s`` counted from here;
    ``run(fn, *args)`` runs each ``Dock.call_raw`` (default: on the serving thread; a tier
    may run it on a broker thread that keeps the call's deadline).
    """

    def __init__(self, runtime: Any, request: Any, secret: bytes, call_id: int, timeout_s: float,
                 *, run: Any = None) -> None:
        self.runtime, self.req, self.secret, self.id = runtime, request, secret, call_id
        self.deadline = time.monotonic() + timeout_s
        self.run = run if run is not None else (lambda fn, *args: fn(*args))
        # The calling thread's context (its current span, so each broker span is the wb.call
        # span's child): the bridge is served, and its Dock calls run, on threads of the tier's
        # own, which start with an empty one. Made on the calling thread, as every tier does.
        self.call_context = contextvars.copy_context()
        self.ctx: Any = None
        self.linked: frozenset[str] = frozenset()
        self.refusal: Exception | None = None
        self.broken = ""
        self.calls = 0

    def serve(self, recv: Any, send: Any) -> None:
        try:
            while True:
                send(self.answer(*recv()))
        except frames.FrameError as exc:
            if exc.reason != "eof":
                self.broken = exc.message
        except OSError as exc:
            self.broken = f"{type(exc).__name__}: {exc}"

    def answer(self, kind: int, payload: bytes) -> bytes:
        """The sealed answer to one ``Link`` or ``BrokerCall`` frame of this call
        (``FrameError`` for anything else, or a frame for another call)."""
        obj, blobs = frames.unpack(payload)
        if obj.get("id") != self.id:
            raise frames.FrameError("unexpected",
                                    f"{frames.name(kind)} for call {obj.get('id')!r}, not {self.id}")
        if kind == frames.LINK:
            return self.link(obj)
        if kind == frames.BROKER_CALL:
            return self.broker(obj, blobs)
        raise frames.FrameError("unexpected", f"the guest sent {frames.name(kind)} during a call")

    def link(self, obj: dict[str, Any]) -> bytes:
        if self.ctx is not None:
            raise frames.FrameError("unexpected", "the guest asked to link twice in one call")
        raw = frames.field(obj, "imports", list)
        imports = [(i[0], i[1]) for i in raw if isinstance(i, list) and len(i) == 2
                   and isinstance(i[0], str) and isinstance(i[1], str)]
        if len(imports) != len(raw):
            raise frames.FrameError("malformed", "Link imports must be [module, name] pairs of strings")
        req, dock = self.req, self.runtime.dock
        self.context()
        try:
            for module, item in imports:
                if module not in (WASI, CAPS):
                    raise CapabilityDenied(f"{req.name}: imports {module}.{item}; "
                                           f"a guest may import only {WASI} (stdio) and {CAPS}.<cap> "
                                           "(brokered caps)")
            caps = list(dock.linkable([item for module, item in imports if module == CAPS], self.ctx))
        except CapabilityDenied as exc:
            self.refusal = (exc if exc.message.startswith(f"{req.name}: ")
                            else CapabilityDenied(f"{req.name}: {exc.message}"))
        except WbError as exc:
            self.refusal = exc
        if self.refusal is not None:
            return frames.seal(frames.LINK_ANSWER, self.secret, {"id": self.id, "refused": True})
        self.linked = frozenset(caps)
        return frames.seal(frames.LINK_ANSWER, self.secret, {"id": self.id, "caps": caps},
                           dock.info(self.ctx))

    def context(self) -> Any:
        """The call's one Dock context (made on first use): the request's principal, caps,
        allowed hosts and toolkit, and the time left of the call."""
        if self.ctx is None:
            req = self.req
            self.ctx = self.runtime.dock.context(
                principal=req.principal, caps=req.caps, timeout=max(0.0, self.deadline - time.monotonic()),
                allowed_hosts=req.allowed_hosts, toolkit=req.toolkit)
        return self.ctx

    def answer_posix(self, payload: bytes, decode: Any, encode: Any) -> bytes:
        """The sealed answer to a posix guest's ``BrokerCall`` (the microvm's ``wb-cap``): no
        link step — the Dock's grant check decides at the call. ``decode(cap, body)`` turns
        the guest's body into the Dock's CBOR request (a ``WbError`` is denied through the
        Dock, audited), ``encode(answer)`` the Dock's answer back."""
        obj, blobs = frames.unpack(payload)
        if obj.get("id") != self.id:
            raise frames.FrameError("unexpected", f"BrokerCall for call {obj.get('id')!r}, not {self.id}")
        cap = frames.field(obj, "cap", str)
        body = frames.blobs_of(blobs, 1, frames.BROKER_CALL)[0]
        ctx, dock = self.context(), self.runtime.dock
        try:
            request = decode(cap, body)
        except WbError as exc:
            status, answer = dock.deny(ctx, cap, exc, nreq=len(body))
        else:
            status, answer = self.run(self.call_raw, ctx, cap, request)
        self.calls += 1
        return frames.seal(frames.BROKER_ANSWER, self.secret, {"id": self.id, "status": status},
                           encode(answer))

    def broker(self, obj: dict[str, Any], blobs: list[bytes]) -> bytes:
        ctx, dock = self.ctx, self.runtime.dock
        if ctx is None:
            raise frames.FrameError("unexpected", "the guest called a cap before linking any")
        cap = frames.field(obj, "cap", str)
        request = frames.blobs_of(blobs, 1, frames.BROKER_CALL)[0]
        if cap not in self.linked:
            status, body = dock.deny(ctx, cap,
                                     CapabilityDenied(f"cap {cap!r} was not linked for {ctx.principal}"))
        elif "outside" in obj:
            ptr, n = (frames.field(obj, "outside", list) + [0, 0])[:2]
            status, body = dock.deny(ctx, cap,
                                     InvalidArgs(f"{cap}: request [{ptr}, +{n}) lies outside guest memory"))
        elif "too_large" in obj:
            exc = InvalidArgs(f"{cap}: request of {frames.field(obj, 'too_large', int)} bytes exceeds the "
                              f"{frames.MAX_FRAME}-byte cap")
            exc.reason = "too-large"  # type: ignore[attr-defined]
            status, body = dock.deny(ctx, cap, exc)
        else:
            status, body = self.run(self.call_raw, ctx, cap, request)
        self.calls += 1
        return frames.seal(frames.BROKER_ANSWER, self.secret, {"id": self.id, "status": status}, body)

    def call_raw(self, ctx: Any, cap: str, request: bytes) -> tuple[int, bytes]:
        """``Dock.call_raw`` in a copy of the calling thread's context (one copy per call: a
        broker call a tier gave up waiting for may still run in its own)."""
        return self.call_context.copy().run(self.runtime.dock.call_raw, ctx, cap, request)

    def start(self, recv: Any, send: Any) -> threading.Thread:
        """``serve`` on a daemon thread (the tier's thread keeps the call's deadline)."""
        thread = threading.Thread(target=self.serve, args=(recv, send), name="wb-capbridge", daemon=True)
        thread.start()
        return thread
