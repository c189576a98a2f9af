"""The terminal agent: serves PTY sessions over frames inside a sandbox (seed 003's PTY; the
protocol is ``wbcore_runtime.contract.terminal``'s).

A shell tier ships this file into its sandbox next to ``frames.py`` (``Terminal.agent_file``;
the container tier binds both in as ``/wb/lib/pty_agent.py`` and ``/wb/lib/frames.py``), so it
is standard library only and imports ``frames`` by name when loaded by path there. The host's
end (``handshake``, ``attach``) is :mod:`wbcore_terminal.attach`, never copied in; a guest agent
written in another language speaks the same frames (the microvm's ``wb_agent.c``).
Every host → agent frame carries the secret and is refused without it; at most
:data:`MAX_SESSIONS` sessions run at once per agent; only programs on the agent's
allowlist are started; the child drops to an unprivileged uid when the agent runs as root.
Interactive sessions keep RLIMIT_NOFILE and RLIMIT_NPROC but not RLIMIT_FSIZE (seed 003).
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import signal
import struct
import termios
from collections.abc import Iterable
from typing import Any

try:
    from wbcore_runtime.wire import frames
except ImportError:  # loaded by path inside a sandbox, next to frames.py
    import frames  # type: ignore[no-redef]

#: Concurrent sessions one agent (one sandbox) serves; the next PtyOpen is refused.
MAX_SESSIONS = 4
#: Read size on a pty master or the host's stdin (one PtyData frame at most this big).
CHUNK = 1 << 16
#: Keystrokes buffered for children that are not reading (agent) or frames for an agent that
#: is not reading (host): past it the side stops reading its input until the other drains,
#: so the pipes push back instead of either side blocking in a write (no deadlock).
PENDING_CAP = 1 << 20
#: The uid a session's child drops to when the agent runs as root (seed 003: uid 1000).
CHILD_UID = 1000
#: Environment names a PtyOpen may set (anything else, e.g. LD_PRELOAD, is dropped).
ENV_NAMES = frozenset({"TERM", "LANG", "LC_ALL", "COLUMNS", "LINES", "PS1", "HOME", "USER", "PATH", "SHELL"})
MAX_ARGS = 256
MAX_ARG_BYTES = 64 << 10


class _Session:
    __slots__ = ("fd", "id", "pending", "pid")

    def __init__(self, sid: int, pid: int, fd: int) -> None:
        self.id, self.pid, self.fd = sid, pid, fd
        self.pending = bytearray()  # keystrokes the child has not taken yet


class Agent:
    """Serves PTY sessions on ``chan`` for the host that holds ``secret``.

    ``allow`` is the command allowlist (absolute paths); ``nofile``/``nproc`` the rlimits
    each child gets. One thread, one ``select`` over the channel and the pty masters.
    """

    def __init__(self, chan: frames.Channel, secret: bytes, allow: Iterable[str], *, nofile: int = 256,
                 nproc: int = 64) -> None:
        self.chan, self.secret = chan, secret
        self.allow = frozenset(allow)
        self.nofile, self.nproc = nofile, nproc
        self.sessions: dict[int, _Session] = {}
        self.by_fd: dict[int, _Session] = {}

    def handshake(self) -> None:
        kind, payload = self.chan.recv()
        if kind != frames.PING:
            raise frames.FrameError("unexpected", f"the first frame must be Ping, got {frames.name(kind)}")
        frames.check_ping(payload, self.secret)
        self.chan.send_frame(frames.pong())

    def serve(self) -> None:
        """Until Shutdown or the host hangs up; a refused frame is answered and skipped."""
        try:
            while True:
                backlog = sum(len(s.pending) for s in self.sessions.values())
                fds = ([self.chan.read_fd] if backlog < PENDING_CAP else []) + list(self.by_fd)
                wfds = [s.fd for s in self.sessions.values() if s.pending and s.fd in self.by_fd]
                ready, writable, _ = select.select(fds, wfds, [], 0.2)
                for fd in writable:
                    self.to_pty(self.by_fd[fd])
                for fd in ready:
                    if fd == self.chan.read_fd:
                        if not self.from_host():
                            return
                    elif fd in self.by_fd:
                        self.from_pty(self.by_fd[fd])
                self.reap()
        finally:
            self.hang_up()

    def from_host(self) -> bool:
        kind, payload = self.chan.recv()  # a stream that is not frames ends the agent (FrameError)
        try:
            if kind == frames.SHUTDOWN:
                frames.check_shutdown(payload, self.secret)
                return False
            if kind == frames.PING:
                frames.check_ping(payload, self.secret)
                self.chan.send_frame(frames.pong())
            elif kind == frames.PTY_DATA:
                sid, data = frames.open_pty_data(payload, self.secret)
                session = self.sessions.get(sid)
                if session is not None and session.fd in self.by_fd:
                    session.pending += data
                    self.to_pty(session)
            elif kind in (frames.PTY_OPEN, frames.PTY_RESIZE, frames.PTY_CLOSE):
                obj, _ = frames.open_sealed(kind, payload, self.secret)
                sid = frames.field(obj, "session", int)
                if kind == frames.PTY_OPEN:
                    self.open(sid, obj)
                elif kind == frames.PTY_RESIZE:
                    session = self.sessions.get(sid)
                    if session is not None:
                        _set_size(session.fd, _size(obj))
                elif sid in self.sessions:
                    _signal_group(self.sessions[sid].pid, signal.SIGHUP)
            else:
                raise frames.FrameError("unexpected", f"{frames.name(kind)} is not a terminal-session frame")
        except frames.FrameError as exc:
            self.chan.send_frame(frames.refused(exc.reason, exc.message))
        return True

    def open(self, sid: int, obj: dict[str, Any]) -> None:
        def no(why: str) -> None:
            self.chan.send_frame(frames.encode(frames.PTY_OPENED, frames.pack({"session": sid, "ok": False,
                                                                               "error": why})))

        program = frames.field(obj, "program", str)
        args = frames.field(obj, "args", list, [])
        env = frames.field(obj, "env", dict, {})
        if (not all(isinstance(a, str) for a in args) or len(args) > MAX_ARGS
                or sum(map(len, args)) > MAX_ARG_BYTES):
            raise frames.FrameError("malformed", f"args must be at most {MAX_ARGS} strings")
        if sid in self.sessions or not 0 < sid < 1 << 32:
            return no(f"session {sid} is already open or not a valid id")
        if len(self.sessions) >= MAX_SESSIONS:
            return no(f"this sandbox already serves {MAX_SESSIONS} terminal sessions (the most at once); "
                      "close one first")
        if program not in self.allow:
            return no(f"{program!r} is not on this sandbox's command allowlist "
                      f"({', '.join(sorted(self.allow))})")
        rows, cols = _size(obj)
        child_env = {"TERM": "xterm-256color", "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp",
                     "LANG": "C.UTF-8"}
        child_env.update({k: v for k, v in env.items()
                          if k in ENV_NAMES and isinstance(v, str) and "\0" not in v})
        pid, fd = _fork_pty(program, args, child_env, (rows, cols), self.nofile, self.nproc)
        session = _Session(sid, pid, fd)
        self.sessions[sid] = session
        self.by_fd[fd] = session
        self.chan.send_frame(frames.encode(frames.PTY_OPENED, frames.pack({"session": sid, "ok": True})))

    def to_pty(self, session: _Session) -> None:
        """As much of the session's pending input as its pty takes now (never blocks)."""
        try:
            n = os.write(session.fd, session.pending[:CHUNK])
        except BlockingIOError:
            return
        except OSError:  # the child is gone: its input goes nowhere
            n = len(session.pending)
        del session.pending[:n]

    def from_pty(self, session: _Session) -> None:
        try:
            data = os.read(session.fd, CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno != errno.EIO:  # EIO: every slave fd closed (the child and its heirs are gone)
                raise
            data = b""
        if data:
            self.chan.send_frame(frames.pty_data(session.id, data))
            return
        self.by_fd.pop(session.fd, None)  # output is over; reap() reports the exit

    def reap(self) -> None:
        """Close the sessions whose child has exited, never waiting for one that has not: a
        program that closed its pty and runs on (output over, no exit yet) must not stall the
        loop, or no other session, PtyClose or Shutdown would be served meanwhile."""
        for session in list(self.sessions.values()):
            pid, status = os.waitpid(session.pid, os.WNOHANG)
            if pid == 0:
                continue
            if session.fd in self.by_fd:
                # Output still flows; a child that exited while a background process holds
                # the pty ends the session too (what it wrote so far is relayed first).
                self.drain(session)
                _signal_group(session.pid, signal.SIGHUP)
                self.by_fd.pop(session.fd, None)
            self.close(session, _exit_code(status))

    def drain(self, session: _Session) -> None:
        for _ in range(64):
            try:
                data = os.read(session.fd, CHUNK)
            except OSError:
                return
            if not data:
                return
            self.chan.send_frame(frames.pty_data(session.id, data))

    def close(self, session: _Session, code: int) -> None:
        os.close(session.fd)
        del self.sessions[session.id]
        self.chan.send_frame(frames.encode(frames.PTY_CLOSED,
                                           frames.pack({"session": session.id, "exit_code": code})))

    def hang_up(self) -> None:
        for session in list(self.sessions.values()):
            _signal_group(session.pid, signal.SIGHUP)
            _signal_group(session.pid, signal.SIGKILL)
            try:
                os.waitpid(session.pid, 0)
            except ChildProcessError:
                pass
            try:
                os.close(session.fd)
            except OSError:
                pass
        self.sessions.clear()
        self.by_fd.clear()


#: Signals a session's program gets back at their default action (see :func:`_fork_pty`).
CHILD_DEFAULT_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGPIPE,
                         signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCHLD)


def _fork_pty(program: str, args: list[str], env: dict[str, str], size: tuple[int, int], nofile: int,
              nproc: int) -> tuple[int, int]:
    """forkpty: the child is a session leader on a new pty, with its rlimits, unprivileged."""
    import pty
    import resource

    # The close signal (SIGHUP) must not be lost in the window after fork: a child of an agent
    # that ignores SIGHUP (nohup) inherits SIG_IGN until it resets it below, and a PtyClose
    # arriving then was discarded, so the shell outlived it. Blocked around the fork, the signal
    # stays pending in the child (Linux never discards a blocked signal) and is delivered when
    # the child unblocks, after its dispositions are back to default.
    before = signal.pthread_sigmask(signal.SIG_BLOCK, CHILD_DEFAULT_SIGNALS)
    try:
        pid, fd = pty.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        raise
    if pid == 0:  # the child: only async-signal-safe-ish work, then exec or _exit
        try:
            _set_size(0, size)
            for which, value in ((resource.RLIMIT_NOFILE, nofile), (resource.RLIMIT_NPROC, nproc)):
                hard = resource.getrlimit(which)[1]
                value = value if hard == resource.RLIM_INFINITY else min(value, hard)
                resource.setrlimit(which, (value, value))
            if os.getuid() == 0:
                os.setgroups([])
                os.setgid(CHILD_UID)
                os.setuid(CHILD_UID)
            os.closerange(3, 65536)
            # An ignored signal stays ignored across exec: started under `nohup` (or by a parent
            # that ignores SIGHUP), the shell would outlive every PtyClose. The session's
            # program starts with the default dispositions and an empty signal mask.
            for sig in CHILD_DEFAULT_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            os.execve(program, [program, *args], env)
        except BaseException as exc:  # noqa: BLE001 - the child must never return into the agent
            os.write(2, f"wbcore-agent: cannot start {program}: {exc}\r\n".encode())
        os._exit(127)
    signal.pthread_sigmask(signal.SIG_SETMASK, before)  # the parent (this agent) as it was
    fcntl.fcntl(fd, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
    os.set_blocking(fd, False)
    return pid, fd


def _size(obj: dict[str, Any]) -> tuple[int, int]:
    rows, cols = frames.field(obj, "rows", int, 24), frames.field(obj, "cols", int, 80)
    if not (1 <= rows <= 1000 and 1 <= cols <= 1000):
        raise frames.FrameError("malformed", f"terminal size {cols}x{rows} is out of range (1..1000)")
    return rows, cols


def _set_size(fd: int, size: tuple[int, int]) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        # A child forked a moment ago may not have made its session (setsid) yet, so there is
        # no group of that id: signal the child itself, or a close right after an open is lost.
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    except PermissionError:
        pass


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)

