"""The bubblewrap backend: one throwaway container per call.

``bwrap --unshare-all`` (new user, pid, net, ipc, uts and cgroup namespaces; no
``--share-net``, so the only interface is a loopback that is down), ``--die-with-parent``,
``--new-session``, ``--cap-drop ALL``, ``--disable-userns``, a seccomp filter
(:mod:`wbcore_container.seccomp`, when pyseccomp is installed), the read-only root of
:mod:`wbcore_container.rootfs`, a size-capped tmpfs ``/tmp``, a cleared environment. Around it,
on the host: rlimits set by ``prlimit`` before ``bwrap`` starts (inherited by everything inside: address
space, processes, open files at or below the host's hard limit, CPU seconds, file size, no
core dumps), its own process group, a wall-clock deadline that SIGKILLs the group (the
container's pid 1 gets SIGKILL from ``--die-with-parent`` and takes every process of the
namespace with it), and stdout/stderr read while it runs, stopped at their caps.

Posix calls start ``bwrap`` as :data:`HOST_UID` when this process is root: ``RLIMIT_NPROC``
does not bind uid 0 (a fork bomb would be limited by nothing), and the unprivileged user
has no path into any host folder but the ones bound for it.
"""

from __future__ import annotations

import errno
import os
import resource
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wbcore_container import rootfs, seccomp

#: The host uid (and gid) that starts a posix call's bwrap when this process is root; it owns
#: nothing on the host. RLIMIT_NPROC counts all its processes, so concurrent posix calls share it.
HOST_UID = 61313
#: The container's /tmp (tmpfs) and the largest file written anywhere.
TMP_BYTES = 64 << 20
FILE_BYTES = 64 << 20
NOFILE = 256
CHUNK = 1 << 16
ENV = {"PATH": ":".join(rootfs.ROOT_PATH), "HOME": "/tmp", "LANG": "C.UTF-8", "TMPDIR": "/tmp",
       "USER": rootfs.USER}


@dataclass(frozen=True, slots=True)
class BwrapLimits:
    """What one container may use."""

    memory: int | None  # RLIMIT_AS, bytes (None: leave it to the payload, e.g. wasm's store limit)
    processes: int
    cpu_s: int
    deadline_s: float
    stdout_cap: int
    stderr_cap: int
    tmp_bytes: int = TMP_BYTES
    file_bytes: int | None = FILE_BYTES  # RLIMIT_FSIZE; None for interactive shells (seed 003)


@dataclass(frozen=True, slots=True)
class Outcome:
    exit_code: int  # negative: ended by that signal
    stdout: bytes
    stderr: bytes
    status: bytes  # what the payload wrote on its status fd (wasm runner), else b""
    over: str  # "stdout" / "stderr" when a cap stopped it, else ""
    timed_out: bool
    cancelled: bool
    wall_s: float


@dataclass(frozen=True, slots=True)
class Data:
    """A file the container sees at ``dest`` (read-only), copied in from host bytes or a host file."""

    dest: str
    path: Path | None = None
    data: bytes | None = None


@dataclass(slots=True)
class Spec:
    argv: Sequence[str]
    stdin: bytes
    limits: BwrapLimits
    files: list[Data] = field(default_factory=list)
    binds: list[tuple[str, str]] = field(default_factory=list)  # extra read-only (host, dest)
    # writable (host, dest): wbx shell --mount :rw
    rw_binds: list[tuple[str, str]] = field(default_factory=list)
    pass_fds: tuple[int, ...] = ()  # host fds the payload gets under the same numbers (frame channels)
    unprivileged: bool = True
    status_fd: bool = False
    cancel: threading.Event | None = None


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


#: The probe runs only ``/usr/bin/true``, but RLIMIT_NPROC counts every process :data:`HOST_UID`
#: has on the host, a container that just ended included until it is reaped: a tight limit here
#: would call the tier unavailable because of a neighbour.
PROBE_PROCESSES = 4096
#: bwrap's words for EAGAIN from clone (HOST_UID at its process limit): a passing state, retried.
TRANSIENT = "Resource temporarily unavailable"
_probed: tuple[bool, str] | None = None
_probe_lock = threading.Lock()


def probe() -> tuple[bool, str]:
    """Whether bwrap can make the namespaces here. The answer is kept for the process once known;
    a transient refusal (EAGAIN) is retried for about 3 s and never kept, so one busy moment
    does not disable the tier for a long-running server."""
    global _probed
    with _probe_lock:
        if _probed is not None:
            return _probed
        for delay in (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 0.0):
            ok, why = _probe_once()
            if ok or TRANSIENT not in why:
                _probed = (ok, why)
                return _probed
            time.sleep(delay)
        return ok, why


def _probe_once() -> tuple[bool, str]:
    exe = bwrap_path()
    if exe is None:
        return False, "bwrap is not on PATH (install it: apt-get install bubblewrap)"
    try:
        done = subprocess.run([exe, "--version"], capture_output=True, timeout=10, check=False)
        version = done.stdout.decode().strip()
        spec = Spec(argv=["/usr/bin/true"], stdin=b"",
                    limits=BwrapLimits(memory=256 << 20, processes=PROBE_PROCESSES, cpu_s=5, deadline_s=10.0,
                                       stdout_cap=4096, stderr_cap=4096))
        out = run(spec, root=None)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"bwrap could not start: {exc}"
    if out.exit_code != 0:
        why = out.stderr.decode(errors="replace").strip().splitlines()
        return (False, "bwrap cannot create its namespaces here: "
                f"{why[-1] if why else f'exit {out.exit_code}'}")
    filt = "seccomp" if seccomp.bpf() is not None else "no seccomp filter (pip install pyseccomp)"
    return True, f"{version or 'bubblewrap'} ({exe}), {filt}"


def _argv(spec: Spec, root: rootfs.Root | None, fds: list[tuple[int, str]]) -> list[str]:
    exe = bwrap_path() or "bwrap"
    args = [exe, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--disable-userns", "--clearenv",
            "--uid", str(rootfs.UID), "--gid", str(rootfs.GID), "--hostname", "wbcore-container"]
    for src in rootfs.BINDS:
        args += ["--ro-bind", src, src]
    for target, link in rootfs.SYMLINKS:
        if os.path.exists("/" + target):
            args += ["--symlink", target, link]
    for masked in rootfs.MASKED:
        if os.path.isdir(masked):
            args += ["--tmpfs", masked, "--remount-ro", masked]
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(spec.limits.tmp_bytes), "--tmpfs", "/tmp"]
    for host, dest in spec.binds:
        args += ["--ro-bind", host, dest]
    for host, dest in spec.rw_binds:
        args += ["--bind", host, dest]
    for fd, dest in fds:
        args += ["--perms", "0444", "--ro-bind-data", str(fd), dest]
    for key, value in ENV.items():
        args += ["--setenv", key, value]
    args += ["--chdir", "/tmp", "--"]
    return args + list(spec.argv)


def _limited(spec: Spec, drop: bool, cmd: list[str]) -> list[str]:
    """``cmd`` behind util-linux's ``prlimit`` (the limits everything inside inherits) and,
    when this process is root, ``setpriv`` to :data:`HOST_UID` — two execs instead of a
    ``preexec_fn``, which is unsafe in this threaded process (a fork can copy a held lock)."""
    lim = spec.limits

    def cap(which: int, value: int) -> int:
        hard = resource.getrlimit(which)[1]
        return value if hard == resource.RLIM_INFINITY else min(value, hard)

    limits = [f"--nproc={cap(resource.RLIMIT_NPROC, lim.processes)}",
              f"--nofile={cap(resource.RLIMIT_NOFILE, NOFILE)}",
              f"--cpu={cap(resource.RLIMIT_CPU, lim.cpu_s)}",
              "--core=0"]
    if lim.file_bytes is not None:
        limits.append(f"--fsize={cap(resource.RLIMIT_FSIZE, lim.file_bytes)}")
    if lim.memory is not None:
        limits.append(f"--as={cap(resource.RLIMIT_AS, lim.memory)}")
    out = [_tool("prlimit"), *limits, "--"]
    if drop:
        out += [_tool("setpriv"), f"--reuid={HOST_UID}", f"--regid={HOST_UID}", "--clear-groups", "--"]
    return out + cmd


def _tool(name: str) -> str:
    path = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
    if path is None:
        raise OSError(f"{name} is not installed (apt-get install util-linux)")
    return path


def _data_fd(item: Data) -> int:
    """A read-only fd of ``item``'s bytes that ``--ro-bind-data`` copies (a pipe would block
    bwrap on a writer; an unlinked temporary file does not)."""
    if item.path is not None:
        return os.open(item.path, os.O_RDONLY | os.O_CLOEXEC)
    import tempfile

    fd, name = tempfile.mkstemp(prefix="wbcore-container-")
    os.unlink(name)
    view = memoryview(item.data or b"")
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def run(spec: Spec, root: rootfs.Root | None) -> Outcome:
    """Run ``spec`` in a new container over ``root`` (``None``: a root without generated files,
    for the probe) and wait for it within its deadline."""
    proc, start, status_r, info_r = _popen(spec, root, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE)
    try:
        return _wait(proc, spec, start, status_r, info_r)
    finally:
        os.close(info_r)
        if status_r >= 0:
            os.close(status_r)


@dataclass
class Running:
    """A container left running for its caller (an interactive shell's agent)."""

    proc: subprocess.Popen[bytes]
    info_r: int

    def kill(self) -> None:
        info = bytearray()
        _drain(self.info_r, info)
        _kill(self.proc, info)

    def close(self) -> None:
        """End the container (if it still runs) and reap it."""
        if self.proc.poll() is None:
            self.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        try:
            os.close(self.info_r)
        except OSError:
            pass


def launch(spec: Spec, root: rootfs.Root, **popen: Any) -> Running:
    """Start ``spec`` in a new container and return without waiting (its caller keeps the
    deadline and calls ``close``); ``popen`` are ``subprocess.Popen``'s stdio arguments."""
    proc, _, status_r, info_r = _popen(spec, root, **popen)
    if status_r >= 0:
        os.close(status_r)
    os.set_blocking(info_r, False)
    return Running(proc, info_r)


def _popen(spec: Spec, root: rootfs.Root | None,
           **popen: Any) -> tuple[subprocess.Popen[bytes], float, int, int]:
    drop = spec.unprivileged and os.geteuid() == 0
    opened: list[int] = []
    fds: list[tuple[int, str]] = []
    status_r = status_w = -1
    info_r, info_w = os.pipe()
    try:
        for dest, path in (root.files if root is not None else ()):
            fd = _data_fd(Data(dest, path=path))
            opened.append(fd)
            fds.append((fd, dest))
        for item in spec.files:
            fd = _data_fd(item)
            opened.append(fd)
            fds.append((fd, item.dest))
        filt = seccomp.bpf()
        seccomp_fd = -1
        if filt is not None:
            seccomp_fd = _data_fd(Data("", data=filt))
            opened.append(seccomp_fd)
        argv = list(spec.argv)
        if spec.status_fd:
            status_r, status_w = os.pipe()
            argv = [a.replace("{status_fd}", str(status_w)) for a in argv]
        for fd in opened:
            os.set_inheritable(fd, True)
        cmd = _argv(Spec(argv=argv, stdin=spec.stdin, limits=spec.limits, files=spec.files, binds=spec.binds,
                         rw_binds=spec.rw_binds), root, fds)
        cmd[1:1] = ["--info-fd", str(info_w)] + (["--seccomp", str(seccomp_fd)] if seccomp_fd >= 0 else [])
        cmd = _limited(spec, drop, cmd)
        start = time.monotonic()
        proc = subprocess.Popen(
            cmd, env={}, start_new_session=True,
            pass_fds=[*opened, info_w, *([status_w] if status_w >= 0 else []), *spec.pass_fds], **popen,
        )
    except BaseException:
        os.close(info_r)
        if status_r >= 0:
            os.close(status_r)
        raise
    finally:
        for fd in opened:
            os.close(fd)
        if status_w >= 0:
            os.close(status_w)
        os.close(info_w)
    return proc, start, status_r, info_r


def _kill(proc: subprocess.Popen[bytes], info: bytearray) -> None:
    """SIGKILL the container's pid 1 (the kernel then kills every process of its pid
    namespace, and bwrap reaps them before it exits), then bwrap's own process group."""
    import json

    try:
        child = json.loads(bytes(info).decode()).get("child-pid")
    except (UnicodeDecodeError, ValueError, AttributeError):
        child = None
    if isinstance(child, int) and child > 1:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _drain(fd: int, into: bytearray) -> None:
    """What bwrap wrote on its info fd so far (its JSON names the container's pid 1)."""
    while len(into) < 4096:
        try:
            chunk = os.read(fd, 4096)
        except (BlockingIOError, OSError):
            return
        if not chunk:
            return
        into += chunk


def _wait(proc: subprocess.Popen[bytes], spec: Spec, start: float, status_r: int, info_r: int) -> Outcome:
    lim = spec.limits
    deadline = start + lim.deadline_s
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    caps = {proc.stdout.fileno(): ("stdout", lim.stdout_cap),
            proc.stderr.fileno(): ("stderr", lim.stderr_cap)}
    status = bytearray()
    info = bytearray()
    sel = selectors.DefaultSelector()
    os.set_blocking(info_r, False)
    sel.register(info_r, selectors.EVENT_READ)
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    if status_r >= 0:
        os.set_blocking(status_r, False)
        sel.register(status_r, selectors.EVENT_READ)
    pending = memoryview(spec.stdin)
    stdin_fd = proc.stdin.fileno()
    os.set_blocking(stdin_fd, False)
    if pending:
        sel.register(stdin_fd, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    over, timed_out, cancelled = "", False, False
    open_streams = len(bufs) + (1 if status_r >= 0 else 0)
    while open_streams:
        now = time.monotonic()
        if now >= deadline:
            timed_out = True
            break
        if spec.cancel is not None and spec.cancel.is_set():
            cancelled = True
            break
        for key, _ in sel.select(timeout=min(0.05, deadline - now)):
            fd = key.fd
            if fd == stdin_fd:
                try:
                    n = os.write(fd, pending[:CHUNK])
                    pending = pending[n:]
                except BlockingIOError:
                    continue
                except BrokenPipeError:
                    pending = pending[:0]
                if not pending:
                    sel.unregister(fd)
                    proc.stdin.close()
                continue
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                continue
            except OSError as exc:
                if exc.errno != errno.EIO:
                    raise
                chunk = b""
            if not chunk:
                sel.unregister(fd)
                if fd != info_r:
                    open_streams -= 1
                continue
            if fd == status_r:
                if len(status) < 1 << 20:
                    status += chunk
                continue
            if fd == info_r:
                if len(info) < 4096:
                    info += chunk
                continue
            buf = bufs[fd]
            buf += chunk
            name, cap = caps[fd]
            if len(buf) > cap:
                over = name
                break
        if over:
            break
    if over or timed_out or cancelled:
        _drain(info_r, info)
        _kill(proc, info)
    try:
        code = proc.wait(timeout=max(0.5, deadline + 1.0 - time.monotonic()))
    except subprocess.TimeoutExpired:  # every stream closed early but bwrap lingers: the deadline holds
        _drain(info_r, info)
        _kill(proc, info)
        timed_out = True
        code = proc.wait()
    sel.close()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            stream.close()
        except OSError:
            pass
    values = list(bufs.values())  # stdout, stderr (registration order)
    return Outcome(exit_code=code, stdout=bytes(values[0][:lim.stdout_cap]),
                   stderr=bytes(values[1][:lim.stderr_cap]),
                   status=bytes(status), over=over, timed_out=timed_out, cancelled=cancelled,
                   wall_s=time.monotonic() - start)
