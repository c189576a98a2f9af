"""The host's end of a terminal session (``wbx shell``): :func:`attach` relays the user's terminal
to a sandbox's agent over the PTY frames (:mod:`wbcore_terminal.agent`, not this module, is what
sandboxes get a copy of). :func:`service` is what ``wbcore_terminals`` serves: the
``wbcore_runtime.contract.terminal.Terminal`` a caller takes with ``contract.terminal.service``."""

from __future__ import annotations

import os
import select
import signal
import termios
import time
import tty
from pathlib import Path
from typing import Any

from wbcore_runtime.contract.terminal import FrameChannel, PtyError, ShellRequest, Terminal
from wbcore_runtime.wire import frames

from wbcore_terminal import agent
from wbcore_terminal.agent import CHUNK, PENDING_CAP


class Pty:
    """The terminal engine this plugin serves (``contract.terminal.Terminal``)."""

    agent_file = Path(agent.__file__)

    def handshake(self, chan: FrameChannel, secret: bytes) -> None:
        handshake(chan, secret)

    def attach(self, chan: FrameChannel, secret: bytes, request: ShellRequest, *, stdin_fd: int = 0,
               stdout_fd: int = 1, session: int = 1, deadline: float | None = None) -> int:
        return attach(chan, secret, request, stdin_fd=stdin_fd, stdout_fd=stdout_fd, session=session,
                      deadline=deadline)


def service(_runtime: Any) -> Terminal:
    """``TerminalService.factory`` (typed as the Protocol, so mypy checks the class against it)."""
    return Pty()


def handshake(chan: FrameChannel, secret: bytes) -> None:
    """Ping the agent with the secret; its Pong names the same protocol version."""
    chan.send_frame(frames.ping(secret))
    kind, payload = chan.recv()
    if kind != frames.PONG:
        raise PtyError(f"the sandbox's agent answered Ping with {frames.name(kind)}")
    frames.check_pong(payload)


def terminal_size(fd: int) -> tuple[int, int]:
    """``(rows, cols)`` of the terminal on ``fd``, 24x80 when it is not one."""
    try:
        size = os.get_terminal_size(fd)
        return size.lines, size.columns
    except OSError:
        return 24, 80


def attach(chan: FrameChannel, secret: bytes, request: ShellRequest, *, stdin_fd: int = 0, stdout_fd: int = 1,
           session: int = 1, deadline: float | None = None) -> int:
    """Open terminal session ``session`` and relay it until its child exits; its exit code.

    The host's terminal is in raw mode meanwhile (restored on every way out); SIGWINCH
    becomes PtyResize; a stdin that is not a terminal ends with one EOT (Ctrl-D) sent.
    Past ``deadline`` (monotonic) the session is closed and :class:`PtyError` raised.
    """
    rows, cols = terminal_size(stdout_fd)
    env = {"TERM": os.environ.get("TERM", "xterm-256color"), **dict(request.env)}
    chan.send_frame(frames.seal(frames.PTY_OPEN, secret, {"session": session, "program": request.program,
                                                          "args": list(request.args), "rows": rows,
                                                          "cols": cols, "env": env, "interactive": True}))
    try:
        kind, payload = chan.recv()
        obj, _ = frames.unpack(payload) if kind in (frames.REFUSED, frames.PTY_OPENED) else ({}, [])
    except frames.FrameError as exc:
        raise _unreadable(exc) from None
    if kind == frames.REFUSED:
        raise PtyError(f"the sandbox refused PtyOpen: {obj.get('message')}")
    if kind != frames.PTY_OPENED:
        raise PtyError(f"the sandbox answered PtyOpen with {frames.name(kind)}")
    if obj.get("ok") is not True:
        raise PtyError(f"the sandbox could not open a terminal: {obj.get('error')}")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    old_handler = None
    saved = None
    if os.isatty(stdin_fd):
        saved = termios.tcgetattr(stdin_fd)
        tty.setraw(stdin_fd)
    try:
        try:
            old_handler = signal.signal(signal.SIGWINCH, lambda *_: _poke(wake_w))
        except ValueError:  # not the main thread: no resize relay
            old_handler = None
        return _relay(chan, secret, session, stdin_fd, stdout_fd, wake_r, deadline)
    finally:
        os.set_blocking(chan.write_fd, True)
        if saved is not None:
            termios.tcsetattr(stdin_fd, termios.TCSADRAIN, saved)
        if old_handler is not None:
            signal.signal(signal.SIGWINCH, old_handler)
        os.close(wake_r)
        os.close(wake_w)


def _poke(fd: int) -> None:
    try:
        os.write(fd, b"w")
    except OSError:
        pass


#: At the deadline, how long the relay offers the agent its queued frames and the PtyClose:
#: an agent that reads nothing (its pipe full) cannot hold the host's terminal past it.
CLOSE_GRACE_S = 1.0


class _PastDeadline(Exception):
    """The session's deadline passed (also while waiting for the rest of an agent's frame)."""


def _relay(chan: FrameChannel, secret: bytes, sid: int, stdin_fd: int, stdout_fd: int, wake_r: int,
           deadline: float | None) -> int:
    out = bytearray()  # frames for the agent not written yet (the pipe is non-blocking)
    os.set_blocking(chan.write_fd, False)
    try:
        return _relay_until(chan, secret, sid, stdin_fd, stdout_fd, wake_r, deadline, out)
    except _PastDeadline:
        out += frames.seal(frames.PTY_CLOSE, secret, {"session": sid})
        _flush(chan.write_fd, out, time.monotonic() + CLOSE_GRACE_S)
        raise PtyError("the shell reached its deadline; its session was closed") from None
    except frames.FrameError as exc:
        raise _unreadable(exc) from None


def _unreadable(exc: frames.FrameError) -> PtyError:
    """What the sandbox's agent sends is the sandbox's: a frame it cannot have meant ends the session."""
    if exc.reason == "eof":
        return PtyError(f"the sandbox went away ({exc.message})")
    return PtyError(f"the host could not read the sandbox's answer ({exc.message}); the session is over")


def _flush(fd: int, out: bytearray, until: float) -> None:
    """Best effort: write ``out`` to the non-blocking ``fd`` until done or ``until`` (monotonic)."""
    while out and time.monotonic() < until:
        if select.select([], [fd], [], max(0.0, until - time.monotonic()))[1]:
            try:
                del out[:os.write(fd, out[:CHUNK * 4])]
            except BlockingIOError:
                pass
            except OSError:
                return


def _relay_until(chan: FrameChannel, secret: bytes, sid: int, stdin_fd: int, stdout_fd: int, wake_r: int,
                 deadline: float | None, out: bytearray) -> int:
    reading_stdin = True

    def queue(frame: bytes) -> None:
        out.extend(frame)

    while True:
        if deadline is not None and time.monotonic() >= deadline:
            raise _PastDeadline
        fds = [chan.read_fd, wake_r] + ([stdin_fd] if reading_stdin and len(out) < PENDING_CAP else [])
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, writable, _ = select.select(fds, [chan.write_fd] if out else [], [], wait)
        if writable:
            try:
                del out[:os.write(chan.write_fd, out[:CHUNK * 4])]
            except BlockingIOError:
                pass
            except BrokenPipeError:
                raise PtyError("the sandbox went away") from None
        if wake_r in ready:
            os.read(wake_r, 64)
            rows, cols = terminal_size(stdout_fd)
            queue(frames.seal(frames.PTY_RESIZE, secret, {"session": sid, "rows": rows, "cols": cols}))
        if stdin_fd in ready and reading_stdin:
            data = os.read(stdin_fd, CHUNK)
            if data:
                queue(frames.pty_data(sid, data, secret))
            else:
                reading_stdin = False
                if not os.isatty(stdin_fd):
                    queue(frames.pty_data(sid, b"\x04", secret))
        if chan.read_fd in ready:
            try:
                kind, payload = _recv(chan, deadline)
            except frames.FrameError as exc:
                raise PtyError(f"the sandbox went away ({exc.message})") from None
            if kind == frames.PTY_DATA:
                got, data = frames.open_pty_data(payload)
                if got == sid:
                    write_all(stdout_fd, data)
            elif kind == frames.PTY_CLOSED:
                obj, _ = frames.unpack(payload)
                if obj.get("session") == sid:
                    code = frames.field(obj, "exit_code", int)
                    return code if 0 <= code <= 255 else 255
            elif kind == frames.REFUSED:
                obj, _ = frames.unpack(payload)
                raise PtyError(f"the sandbox refused a frame: {obj.get('message')}")


def _recv(chan: FrameChannel, deadline: float | None) -> tuple[int, bytes]:
    """The next frame, waiting out a read that would block (one socket both ways, a VM's
    channel, is non-blocking while the relay writes to it) but never past ``deadline``: a
    header whose payload never arrives cannot hold the host's terminal."""

    def read(n: int) -> bytes:
        while True:
            wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if wait <= 0:
                raise _PastDeadline
            if not select.select([chan.read_fd], [], [], wait)[0]:
                continue
            try:
                return os.read(chan.read_fd, n)
            except BlockingIOError:
                continue

    return frames.read_frame(read)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
