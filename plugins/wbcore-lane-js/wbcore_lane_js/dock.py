"""The Dock bridge for js guests: ``globalThis.__wb_dock(cap, request) -> [status, body]``.

The QuickJS reactor imports nothing but WASI, so the bridge rides on what WASI gives:

- **request**: the entry shim writes a frame to stdout — ``\\0WBDOCK:<token>\\n<cap>\\0<n>\\n``
  then ``n`` bytes of CBOR — and flushes. The host's stdout sink (:class:`DockSink`) sees
  the write synchronously (inside the guest's ``fd_write``), strips the frame from the
  program's output, and runs ``runtime.dock.call_raw(ctx, cap, request)``: the same
  default-deny, revocation, rate-limit, size-cap and audit cadence as a ``wb.<cap>``
  import, with the call's granted caps only.
- **response**: the host writes ``<status byte><CBOR body>`` to file ``<seq>`` of a
  private folder the guest sees **read-only** at ``/wb-dock``; when ``fd_write``
  returns, the shim reads it. The folder also holds ``token`` (a per-call secret, so a
  program's ordinary output can never be taken for a frame).

Only calls with granted caps get the folder; without it ``__wb_dock`` is undefined and
``wbcore_runtime/sdk/wb_dock.js`` says the runner provides no bridge.

wasmtime calls the stdout sink from one of its own runtime threads, not the thread that
runs the call, and a thread starts with an empty ``contextvars`` context. So the sink
answers each frame inside ``context``: a copy of the calling thread's context, taken
when the call starts. Whatever the call set there (the current ``wb.call`` span, so
each broker span is its child in the call's trace) holds for its Dock calls too, as it
does for a ``wb.<cap>`` import, which runs on the calling thread.
"""

from __future__ import annotations

import contextvars
import os
import secrets
from collections.abc import Callable
from pathlib import Path

MAX_HEADER = 256
MAX_REQUEST = 16 << 20


class DockSink:
    """A stdout callback: program bytes go to ``out``; Dock frames go to ``handle``."""

    def __init__(self, out: Callable[[bytes], int], handle: Callable[[str, bytes], tuple[int, bytes]],
                 folder: Path, token: str, context: contextvars.Context | None = None) -> None:
        self.out = out
        self.handle = handle
        #: The calling thread's context (see the module's doc); default: the one it is built in.
        self.context = context if context is not None else contextvars.copy_context()
        self.folder = folder
        self.magic = b"\0WBDOCK:" + token.encode() + b"\n"
        self.buf = b""
        self.state = "text"
        self.cap = ""
        self.need = 0
        self.seq = 0
        self.calls = 0

    def _emit(self, data: bytes) -> int:
        return self.out(data) if data else 0

    def _keep(self) -> int:
        """How many trailing bytes of ``buf`` could start a frame marker."""
        for k in range(min(len(self.magic) - 1, len(self.buf)), 0, -1):
            if self.magic.startswith(self.buf[-k:]):
                return k
        return 0

    def __call__(self, data: bytes) -> int:
        self.buf += data
        while True:
            if self.state == "text":
                i = self.buf.find(self.magic)
                if i < 0:
                    keep = self._keep()
                    cut = len(self.buf) - keep
                    rc = self._emit(self.buf[:cut])
                    self.buf = self.buf[cut:]
                    return len(data) if rc >= 0 else rc
                rc = self._emit(self.buf[:i])
                if rc < 0:
                    return rc
                self.buf = self.buf[i + len(self.magic):]
                self.state = "header"
            if self.state == "header":
                j = self.buf.find(b"\n")
                if j < 0:
                    if len(self.buf) > MAX_HEADER:
                        return -1
                    return len(data)
                try:
                    cap_raw, n_raw = self.buf[:j].split(b"\0", 1)
                    self.cap, self.need = cap_raw.decode("ascii"), int(n_raw)
                except (ValueError, UnicodeDecodeError):
                    return -1
                if not 0 <= self.need <= MAX_REQUEST:
                    return -1
                self.buf = self.buf[j + 1:]
                self.state = "body"
            if self.state == "body":
                if len(self.buf) < self.need:
                    return len(data)
                request, self.buf = self.buf[:self.need], self.buf[self.need:]
                self.state = "text"
                self._answer(self.cap, request)

    def _answer(self, cap: str, request: bytes) -> None:
        previous = self.folder / str(self.seq)
        self.seq += 1
        self.calls += 1
        # one frame at a time (the guest waits for each answer), so the context is never entered twice
        status, body = self.context.run(self.handle, cap, request)
        tmp = self.folder / f".{self.seq}.tmp"
        tmp.write_bytes(bytes([status & 0xFF]) + body)
        os.replace(tmp, self.folder / str(self.seq))
        try:  # the guest has read the previous answer before it sent this request
            previous.unlink()
        except OSError:
            pass

    def finish(self) -> int:
        """Flush text held back at the end of the run (a partial marker that never completed)."""
        rest, self.buf = (self.buf, b"") if self.state == "text" else (b"", b"")
        return self._emit(rest)


def make_folder(base: Path) -> tuple[Path, str]:
    token = secrets.token_hex(16)
    base.mkdir(parents=True, exist_ok=True)
    (base / "token").write_text(token)
    return base, token
