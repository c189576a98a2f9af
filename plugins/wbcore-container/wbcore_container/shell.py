"""``wbx shell --tier container``: a throwaway container whose entry is the PTY agent.

The container is the same as a posix call's (``bwrap``: new namespaces, no network,
read-only Debian root, tmpfs /tmp, seccomp, no capabilities, ``prlimit`` rlimits, started
as the unprivileged :data:`bwrap.HOST_UID` when this process is root so RLIMIT_NPROC binds)
with three differences for an interactive session: no RLIMIT_FSIZE (seed 003), the
deadline is the session's (default one hour), and the caller's ``--mount`` folders are
bound in (read-only unless ``:rw``). Its pid 1 runs ``_agent.py``, which speaks the framed
protocol on the container's stdin/stdout with the terminal service's agent (wbcore-terminal:
``Terminal.agent_file``, bound in next to ``frames.py``); the session secret reaches it on a pipe.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from wbcore_runtime.contract import terminal
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.contract.host import RuntimeServices
from wbcore_runtime.contract.terminal import ShellRequest
from wbcore_runtime.dispatch.mounts import Mount, unreachable_by
from wbcore_runtime.wire import frames

from wbcore_container import bwrap, rootfs

AGENT = Path(__file__).with_name("_agent.py")
PYTHON = "/usr/bin/python3"
#: The programs a session may start (seed 003's command allowlist): the root's shells and python3.
ALLOWED = ("/bin/sh", "/bin/bash", "/bin/dash", "/usr/bin/sh", "/usr/bin/bash", "/usr/bin/dash",
           "/usr/bin/python3")
SHELL_MEMORY = 4 << 30  # RLIMIT_AS of every process in the container
SHELL_PROCESSES = 64
SHELL_TMP = 256 << 20
START_TIMEOUT_S = 20.0


class ContainerShell:
    """A running shell container: ``channel`` and ``secret`` reach its agent; ``close`` ends it."""

    def __init__(self, running: bwrap.Running, secret: bytes, deadline: float) -> None:
        self.running, self.secret, self.deadline = running, secret, deadline
        proc = running.proc
        assert proc.stdout is not None and proc.stdin is not None
        self.channel = frames.Channel(proc.stdout.fileno(), proc.stdin.fileno())

    def alive(self) -> bool:
        return self.running.proc.poll() is None

    def close(self) -> None:
        if self.alive():
            try:
                # Offered, never waited for: an agent that reads nothing (its pipe full) must not
                # hold the close, and no watchdog ends this container but this close. The frame
                # is under PIPE_BUF, so it is written whole or not at all.
                os.set_blocking(self.channel.write_fd, False)
                self.channel.send_frame(frames.shutdown(self.secret))
                self.running.proc.wait(timeout=1.0)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.running.close()


def open_shell(runtime: RuntimeServices, root: rootfs.Root, request: ShellRequest) -> ContainerShell:
    """Start the container, complete the agent's handshake and return the open shell
    (``runtime`` serves the terminal engine: wbcore-terminal)."""
    pty = terminal.service(runtime)
    shell = start_agent(root, request, pty.agent_file)
    try:
        _with_deadline(lambda: pty.handshake(shell.channel, shell.secret), shell.running, START_TIMEOUT_S)
    except BaseException as exc:
        shell.close()
        if isinstance(exc, (frames.FrameError, OSError)):
            raise NotFound(f"the shell container did not start: {exc}") from None
        raise
    return shell


def start_agent(root: rootfs.Root, request: ShellRequest, agent: Path) -> ContainerShell:
    """Start the container with its agent (``agent``: ``Terminal.agent_file``) waiting for the
    host's Ping (no handshake yet)."""
    ok, why = bwrap.probe()
    if not ok:
        raise NotFound(f"tier container is unavailable: {why}")
    if request.program not in ALLOWED:
        raise InvalidArgs(f"wbx shell: {request.program!r} is not on the container's command allowlist "
                          f"({', '.join(ALLOWED)})")
    if not Path(PYTHON).exists():
        raise NotFound("the container's shell agent needs python3 in the root (apt-get install python3)")
    dropping = os.geteuid() == 0
    for mount in request.mounts:
        why = unreachable_by(mount.host, mount.rw, bwrap.HOST_UID) if dropping else ""
        if why:
            raise InvalidArgs(f"--mount {mount.host}:{mount.guest}: the container runs as host uid "
                              f"{bwrap.HOST_UID}, which cannot use it: {why}")
    secret = frames.new_secret()
    sec_r, sec_w = os.pipe()
    os.write(sec_w, secret)
    os.close(sec_w)
    config = json.dumps({"allow": [p for p in ALLOWED if Path(p).exists()], "nofile": bwrap.NOFILE,
                         "nproc": SHELL_PROCESSES}).encode()
    lib = Path(frames.__file__).parent
    limits = bwrap.BwrapLimits(memory=SHELL_MEMORY, processes=SHELL_PROCESSES,
                               cpu_s=max(1, int(request.timeout_s) + 1),
                          deadline_s=request.timeout_s, stdout_cap=0, stderr_cap=0, tmp_bytes=SHELL_TMP,
                          file_bytes=None)
    spec = bwrap.Spec(
        argv=[PYTHON, "-I", "-S", "/wb/agent.py", str(sec_r)], stdin=b"", limits=limits,
        files=[bwrap.Data("/wb/agent.py", path=AGENT),
               bwrap.Data("/wb/lib/frames.py", path=lib / "frames.py"),
               bwrap.Data("/wb/lib/pty_agent.py", path=agent),
               bwrap.Data("/wb/agent.json", data=config)],
        binds=[(m.host, m.guest) for m in request.mounts if not m.rw],
        rw_binds=[(m.host, m.guest) for m in request.mounts if m.rw],
        unprivileged=True, pass_fds=(sec_r,))
    try:
        running = bwrap.launch(spec, root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None)
    finally:
        os.close(sec_r)
    return ContainerShell(running, secret, time.monotonic() + request.timeout_s)


def _with_deadline(fn: Callable[[], None], running: bwrap.Running, seconds: float) -> None:
    """``fn()`` with the container killed if it has not returned in ``seconds`` (a hung agent
    cannot hold ``wbx shell`` at its handshake)."""
    import threading

    done = threading.Event()

    def watch() -> None:
        if not done.wait(seconds):
            running.kill()

    threading.Thread(target=watch, daemon=True).start()
    try:
        fn()
    finally:
        done.set()


__all__ = ["ALLOWED", "ContainerShell", "Mount", "open_shell", "start_agent"]
