"""The build sandbox: run one native program (a compiler) with nothing of the host.

Lanes reach it through their runtime (``runtime.build_sandbox()`` returns a
:class:`SandboxDriver`, served by this plugin's ``wbcore_build_sandboxes``) and speak the
core's contract (``wbcore_runtime.contract.sandbox``: ``Bind``, ``SandboxLimits``, ``SandboxResult``); the
``os_process`` tier uses :class:`Sandbox` directly::

    box = Sandbox()                       # raises SandboxUnavailable naming the missing feature
    res = box.run(
        ["/zig/zig", "cc", "-o", "/out/a.wasm", "/src/main.c"],
        binds=[Bind(zig_dir, "/zig"), Bind(src_dir, "/src")],   # read-only by default
        out_dir=host_out,                 # /out inside; its files are copied here afterwards
        limits=SandboxLimits(wall_seconds=120),
    )
    res.check()                           # raises a WbError with the program's own stderr

What the program sees: a read-only root holding only the given binds, ``/dev/{null,zero,
full,random,urandom}``, a fresh ``/proc`` of its own pid namespace, a private tmpfs ``/tmp``
and a tmpfs ``/out`` (both size-capped). It runs as uid/gid 1000 with no capabilities,
``no_new_privs``, a seccomp filter (when pyseccomp and libseccomp are present), rlimits on
address space, CPU, file size, open files and processes, in new user, mount, pid, net, ipc,
uts and cgroup namespaces: no network at all, not even loopback. A wall-clock deadline
SIGKILLs pid 1 of its namespace, which ends every process in it. After the program ends,
``/out``'s regular files and folders (never links or devices) are copied to ``out_dir``.
"""

from __future__ import annotations

from contextlib import suppress as _suppress
import json
import marshal
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

from wbcore_runtime.store import leftovers
from wbcore_runtime.contract.errors import Internal, InvalidArgs, Timeout, WbError
from wbcore_runtime.contract.drivers import Availability
from wbcore_runtime.contract.sandbox import Bind, BuildSandboxDriver, SandboxLimits, SandboxResult, SandboxRun

#: The host-side scratch folder of a spawned (long-lived) sandboxed process.
SPAWN_PREFIX = "wb-spawn-"

INIT = Path(__file__).with_name("_sandbox_init.py")
#: Outer uid/gid the sandboxed program runs as when the host process is root.
SANDBOX_HOST_ID = 0x5B000000 + 1000
NAMESPACES = ("user", "mount", "pid", "net", "ipc", "uts", "cgroup")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
#: The fd a spawned program reads its secret from (an inherited pipe; see Sandbox.spawn).
SECRET_FD = 3


class SandboxUnavailable(WbError):
    """A namespace or kernel feature the sandbox needs is missing here."""


_SIGNAL_LIMITS: dict[int, str] = {signal.SIGXCPU: "cpu", signal.SIGXFSZ: "file-size"}


@lru_cache(maxsize=1)
def probe() -> tuple[bool, str, tuple[str, ...]]:
    """Whether the namespace sandbox works here: (ok, reason, features). Cached per process."""
    if sys.platform != "linux":
        return False, f"the build sandbox needs Linux namespaces (this is {sys.platform})", ()
    try:
        maxns = int(Path("/proc/sys/user/max_user_namespaces").read_text())
    except (OSError, ValueError):
        maxns = 1
    if maxns == 0:
        return False, "user namespaces are disabled (sysctl user.max_user_namespaces=0)", ()
    if os.geteuid() != 0:
        try:
            if Path("/proc/sys/kernel/unprivileged_userns_clone").read_text().strip() == "0":
                return (False, "unprivileged user namespaces are disabled "
                        "(sysctl kernel.unprivileged_userns_clone=0)", ())
        except OSError:
            pass
    with tempfile.TemporaryDirectory(prefix="wb-probe-") as tmp:
        try:
            res = Sandbox(_probing=True).run(["/bin/sh", "-c", "exit 0"], binds=_system_binds(),
                                             out_dir=Path(tmp), limits=SandboxLimits(wall_seconds=20))
        except SandboxUnavailable as exc:
            return False, exc.message, ()
        except WbError as exc:
            return False, f"the sandbox could not start: {exc.message}", ()
    if res.returncode != 0:
        return False, f"the sandbox could not run /bin/sh (exit {res.returncode}): {res.log}", res.features
    return (True, "namespaces " + ", ".join(NAMESPACES) + ("; seccomp" if "seccomp" in res.features
                                                           else "; no seccomp"), res.features)


def _system_binds() -> list[Bind]:
    """Read-only binds of the host's program folders (no /etc, no /home, no /root)."""
    out = []
    for d in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32"):
        p = Path(d)
        if p.is_dir():  # merged-/usr links (/bin -> usr/bin) are bound at their own path
            out.append(Bind(p, d))
    return out


def system_binds() -> list[Bind]:
    """Binds for programs that need the host's shared libraries (/usr, /lib ...), never /etc."""
    return _system_binds()


def own_for_sandbox(root: Path) -> None:
    """Make a trusted tree (a warmed compiler cache) owned by the sandbox's uid, so that an
    ``overlay`` bind of it is writable inside (copy-up needs the owner's rights). A no-op
    unless this process is root: otherwise the sandbox's uid is this user's own."""
    if os.geteuid() != 0:
        return
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), SANDBOX_HOST_ID, SANDBOX_HOST_ID)
    os.lchown(root, SANDBOX_HOST_ID, SANDBOX_HOST_ID)


class Sandbox(BuildSandboxDriver):
    """Runs programs in the namespace sandbox. Construct once, ``run`` many times.

    The core's ``BuildSandboxDriver``: ``run`` (its one signature) hands :meth:`execute` the
    defaulted :class:`~wbcore_runtime.contract.sandbox.SandboxRun`. ``lazy``: the seccomp filter and the
    probe wait for the first run (a lane's driver costs nothing until it builds)."""

    def __init__(self, *, seccomp: bool | None = None, _probing: bool = False, lazy: bool = False) -> None:
        self._want_seccomp, self._probing = seccomp, _probing
        self._seccomp: bytes | None = None
        self._ready = False
        if not lazy:
            self._prepare()

    def _prepare(self) -> None:
        if self._ready:
            return
        from wbcore_process.seccomp import bpf

        self._seccomp = bpf() if self._want_seccomp is not False else None
        if self._want_seccomp is True and self._seccomp is None:
            raise SandboxUnavailable("seccomp was required but pyseccomp/libseccomp is not loadable here")
        if not self._probing:
            ok, reason, _ = probe()
            if not ok:
                raise SandboxUnavailable(f"the build sandbox is unavailable: {reason}")
        self._ready = True

    @property
    def features(self) -> tuple[str, ...]:
        feats = tuple(f"ns:{n}" for n in NAMESPACES) + ("rlimits", "deadline", "uid-drop", "no-new-privs")
        return feats + (("seccomp",) if self._seccomp else ())

    def execute(self, job: SandboxRun) -> SandboxResult:
        """Run ``job.argv`` (an absolute path inside the sandbox) and copy ``/out`` to ``job.out_dir``;
        ``job.seed_out``: a host folder whose files start in ``/out`` (writable copies)."""
        self._prepare()
        env = _launch(job.argv, job.binds, job.env)
        job.out_dir.mkdir(parents=True, exist_ok=True)
        return self._run_sandboxed(job.argv, job.binds, job.out_dir, job.limits, env, job.cwd, job.stdin,
                                   job.seed_out)

    def probe(self) -> Availability:
        return availability()

    def system_binds(self) -> list[Bind]:
        return system_binds()

    def own_for_sandbox(self, root: Path) -> None:
        own_for_sandbox(root)

    # --- the namespace path ------------------------------------------------------------

    def _run_sandboxed(self, argv, binds, out_dir, limits, env, cwd, stdin, seed_out) -> SandboxResult:
        start = time.monotonic()
        root_user = os.geteuid() == 0
        # owner in the name: the next wbx command sweeps it if we are killed
        scratch = leftovers.mkdtemp("wb-sbx-")
        try:
            export = scratch / "export"
            proc, sync_r, go_w, status_r = self._start(scratch, argv, binds, limits, env, cwd,
                                                       stdin=stdin is not None, seed_out=seed_out)
            init_pid = None
            try:
                init_pid = self._handshake(proc, sync_r, go_w, root_user, start + limits.wall_seconds)
                out, err, out_trunc, err_trunc, timed_out = _pump(proc, stdin, limits,
                                                                  start + limits.wall_seconds)
            finally:
                if proc.poll() is None:
                    for pid in (init_pid, proc.pid):
                        if pid:
                            _kill(pid)
                    with _suppress(OSError):
                        os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                os.close(sync_r)
                os.close(go_w)
            status = _read_status(status_r)
            os.close(status_r)
            if status.get("phase") in ("unshare", "setup"):
                raise SandboxUnavailable(f"the build sandbox could not be set up ({status['phase']}): "
                                         f"{status['error']}")
            if status.get("phase") != "done":
                if timed_out:
                    return SandboxResult(tuple(argv), -signal.SIGKILL, out, err, time.monotonic() - start,
                                         self.features, timed_out=True, stdout_truncated=out_trunc,
                                         stderr_truncated=err_trunc, limit="wall-clock")
                raise Internal(f"the sandbox init ended without a report (exit {proc.returncode}): "
                               f"{err[-2000:].decode('utf-8', 'replace')}")
            code = int(status["exit"])
            limit = _SIGNAL_LIMITS.get(-code) if code < 0 else None
            if status.get("error"):
                limit = limit or "output-size"
                err += f"\nwb-sandbox: {status['error']}".encode()
            if not status.get("error"):
                _move_out(export, out_dir)
            return SandboxResult(
                tuple(argv), code, out, err, time.monotonic() - start, self.features,
                timed_out=timed_out, stdout_truncated=out_trunc, stderr_truncated=err_trunc,
                limit="wall-clock" if timed_out else limit, out_files=int(status.get("files", 0)),
                out_bytes=int(status.get("bytes", 0)), skipped=tuple(status.get("skipped", ())),
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _start(self, scratch: Path, argv, binds, limits, env, cwd, *, stdin: bool, seed_out,
               secret: bytes | None = None) -> tuple:
        """Write the init's config into ``scratch`` (0700) and start it: ``(proc, sync_r,
        go_w, status_r)``; the caller runs :meth:`_handshake` next. ``secret`` goes to the
        program over an inherited pipe (its fd :data:`SECRET_FD`), never through a file or
        the environment (``/proc/<pid>/environ`` is readable by the same user)."""
        os.chmod(scratch, 0o700)
        (scratch / "root").mkdir()
        export = scratch / "export"
        export.mkdir()
        sync_r, sync_w = os.pipe()
        go_r, go_w = os.pipe()
        status_r, status_w = os.pipe()
        secret_r: int | None = None
        if secret is not None:
            if len(secret) > 4096:
                raise InvalidArgs("a sandbox secret is at most 4096 bytes (one pipe write)")
            secret_r, secret_w = os.pipe()
            try:
                os.write(secret_w, secret)  # fits the pipe's buffer: never blocks
            finally:
                os.close(secret_w)
        cfg = {
            "namespaces": list(NAMESPACES),
            "root": str(scratch / "root"),
            "export": str(export),
            "binds": [{"src": str(Path(b.src).resolve()), "dst": b.dst.rstrip("/"), "rw": b.writable,
                       "overlay": b.overlay}
                      for b in binds],
            "limits": limits.as_dict(),
            "argv": list(argv),
            "env": dict(env),
            "cwd": cwd,
            "stdin": "pipe" if stdin else "null",
            "seccomp_bpf": self._seccomp.hex() if self._seccomp else None,
            "drop_groups": os.geteuid() == 0,
            "seed_out": str(seed_out) if seed_out else None,
            "sync_w": sync_w,
            "go_r": go_r,
            "status_w": status_w,
            "secret_r": secret_r,
        }
        cfg_path = scratch / "config.marshal"
        cfg_path.write_bytes(marshal.dumps(cfg))
        fds = (sync_w, go_r, status_w) + ((secret_r,) if secret_r is not None else ())
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(INIT), str(cfg_path)],
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=fds,
                start_new_session=True,
                env={},
            )
        except BaseException:
            for fd in (sync_r, go_w, status_r):
                os.close(fd)
            raise
        finally:
            for fd in fds:
                os.close(fd)
        return proc, sync_r, go_w, status_r

    def spawn(
        self,
        argv: Sequence[str],
        *,
        binds: Sequence[Bind] = (),
        limits: SandboxLimits | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = "/tmp",
        start_timeout: float = 30.0,
        secret: bytes | None = None,
    ) -> SandboxedProcess:
        """Start ``argv`` in the sandbox and return at once: a long-lived program the caller
        speaks to over its stdin and stdout (the ``os_process`` tier's workers).

        The same root, namespaces, uid drop, seccomp and rlimits as :meth:`run`; no
        wall-clock deadline of its own (``limits.wall_seconds`` is not used): the caller
        ends it with :meth:`SandboxedProcess.kill` or :meth:`SandboxedProcess.close`.
        ``secret`` is readable once on the program's fd :data:`SECRET_FD` (``WB_SECRET_FD``
        names it): the program reads it to the end and closes it at start.
        """
        self._prepare()
        limits = limits or SandboxLimits()
        full_env = _launch(argv, binds,
                           {**(env or {}), **({"WB_SECRET_FD": str(SECRET_FD)} if secret else {})})
        # owner in the name: removed by close(), and swept (leftovers.sweep_home, the pool's
        # start) once its owner is dead, if this process is killed before it closes the worker
        scratch = leftovers.mkdtemp(SPAWN_PREFIX)
        try:
            proc, sync_r, go_w, status_r = self._start(scratch, argv, binds, limits, full_env, cwd,
                                                       stdin=True, seed_out=None, secret=secret)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        box = SandboxedProcess(proc, scratch, sync_r, go_w, status_r)
        try:
            box.init_pid = self._handshake(proc, sync_r, go_w, os.geteuid() == 0,
                                           time.monotonic() + start_timeout)
        except BaseException:
            box.close()
            raise
        if box.init_pid is None:
            status = box.close()
            if status.get("phase") in ("unshare", "setup"):
                raise SandboxUnavailable(f"the sandbox could not be set up ({status['phase']}): "
                                         f"{status['error']}")
            raise Internal(f"the sandboxed {argv[0]} did not start (exit {proc.returncode})")
        # The init has read its config; nothing else needs the scratch files on the host.
        (scratch / "config.marshal").unlink(missing_ok=True)
        return box

    @staticmethod
    def _handshake(proc, sync_r, go_w, root_user, deadline) -> int | None:
        """Write the uid/gid maps of the child's new user namespace; return pid 1's host pid."""
        if not _wait_readable(sync_r, deadline):
            raise Timeout("the sandbox did not start in time")
        if os.read(sync_r, 1) != b"u":
            return None  # unshare failed; the status pipe says why
        pid = proc.pid
        me_u, me_g = os.geteuid(), os.getegid()
        try:
            if root_user:
                uid_map = f"0 0 1\n1000 {SANDBOX_HOST_ID} 1\n"
                gid_map = f"0 0 1\n1000 {SANDBOX_HOST_ID} 1\n"
            else:
                Path(f"/proc/{pid}/setgroups").write_text("deny")
                uid_map = f"1000 {me_u} 1\n"
                gid_map = f"1000 {me_g} 1\n"
            Path(f"/proc/{pid}/uid_map").write_text(uid_map)
            Path(f"/proc/{pid}/gid_map").write_text(gid_map)
        except OSError as exc:
            _kill(pid)
            raise SandboxUnavailable(f"cannot write the sandbox's uid/gid map: {exc}") from None
        os.write(go_w, b"g")
        if not _wait_readable(sync_r, deadline):
            return None
        line = b""
        while not line.endswith(b"\n"):
            chunk = os.read(sync_r, 32)
            if not chunk:
                break
            line += chunk
        return int(line) if line.strip().isdigit() else None


def _kill(pid: int) -> None:
    with _suppress(OSError):
        os.kill(pid, signal.SIGKILL)


def _wait_readable(fd: int, deadline: float) -> bool:
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    try:
        return bool(sel.select(max(0.0, deadline - time.monotonic())))
    finally:
        sel.close()


def _pump(proc: subprocess.Popen, stdin: bytes | None, limits: SandboxLimits, deadline: float):
    """Feed stdin, read stdout/stderr up to their caps (draining the rest), stop at the deadline."""
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}  # type: ignore[union-attr]
    trunc = dict.fromkeys(bufs, False)
    sel = selectors.DefaultSelector()
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    writer = None
    if stdin is not None and proc.stdin is not None:
        def feed() -> None:
            with _suppress(OSError):
                proc.stdin.write(stdin)  # type: ignore[union-attr]
            with _suppress(OSError):
                proc.stdin.close()  # type: ignore[union-attr]

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
    timed_out = False
    open_fds = set(bufs)
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        for key, _ in sel.select(min(left, 0.5)):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fd)
                open_fds.discard(key.fd)
                continue
            buf = bufs[key.fd]
            room = limits.output_bytes - len(buf)
            if room > 0:
                buf += chunk[:room]
            if len(chunk) > max(room, 0):
                trunc[key.fd] = True
    if not timed_out:
        try:
            proc.wait(timeout=max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    sel.close()
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()  # type: ignore[union-attr]
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), trunc[out_fd], trunc[err_fd], timed_out



def _launch(argv: Sequence[str], binds: Sequence[Bind], env: Mapping[str, str]) -> dict[str, str]:
    """The checked launch of ``argv`` with ``binds`` (both ``run`` and ``spawn``): the
    environment the program gets, ``env`` over the sandbox's defaults."""
    _check_launch(argv, binds)
    return {"PATH": DEFAULT_PATH, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", **env}


def _check_launch(argv: Sequence[str], binds: Sequence[Bind]) -> None:
    """Refuse a relative program or a bind that would cover the sandbox's own mounts."""
    if not argv or not argv[0].startswith("/"):
        raise InvalidArgs("sandbox argv[0] must be an absolute path inside the sandbox, got "
                          f"{list(argv[:1])!r}")
    for b in binds:
        if (not b.dst.startswith("/") or ".." in Path(b.dst).parts
                or b.dst.rstrip("/") in ("", "/out", "/tmp", "/proc", "/dev")):
            raise InvalidArgs(f"bind target {b.dst!r} must be an absolute path outside /out, /tmp, /proc, "
                              "/dev")
        if not b.src.exists():
            raise InvalidArgs(f"bind source {b.src} does not exist")
        if b.overlay and (not b.src.is_dir() or any(c in str(b.src.resolve()) for c in ",:\\")):
            raise InvalidArgs(f"overlay source {b.src} must be a folder whose path has no ',', ':' or '\\'")


class SandboxedProcess:
    """A program :meth:`Sandbox.spawn` started: write to ``stdin_fd``, read ``stdout_fd`` and
    ``stderr_fd``; :meth:`kill` ends it (SIGKILL to pid 1 of its namespace ends everything
    in it); :meth:`close` kills, reaps and removes its host-side scratch folder."""

    def __init__(self, proc: subprocess.Popen, scratch: Path, sync_r: int, go_w: int, status_r: int) -> None:
        self.proc = proc
        self.scratch = scratch
        self.init_pid: int | None = None
        self._fds = [sync_r, go_w, status_r]
        self._status_r = status_r
        self._lock = threading.Lock()
        self._closed = False
        self._status: dict | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stdin_fd(self) -> int:
        return self.proc.stdin.fileno()  # type: ignore[union-attr]

    @property
    def stdout_fd(self) -> int:
        return self.proc.stdout.fileno()  # type: ignore[union-attr]

    @property
    def stderr_fd(self) -> int:
        return self.proc.stderr.fileno()  # type: ignore[union-attr]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the sandbox (its pid 1, the outer init, its session); safe to repeat."""
        for pid in (self.init_pid, self.proc.pid):
            if pid and self.proc.returncode is None:
                _kill(pid)
        if self.proc.returncode is None:
            with _suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int | None:
        """The program's exit code once it ended (negative: killed by that signal), or
        ``None`` if it still runs after ``timeout`` seconds."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        code = self.status().get("exit")
        return int(code) if isinstance(code, int) else self.proc.returncode

    def status(self) -> dict:
        """The init's report once the sandbox ended (``{}`` before, or if there is none)."""
        with self._lock:
            if self._status is None and self.proc.returncode is not None:
                self._status = {}
                with _suppress(OSError):
                    os.set_blocking(self._status_r, False)
                    self._status = _read_status(self._status_r)
            return self._status or {}

    def close(self) -> dict:
        """Kill, reap and clean up; returns the init's status report (``{}`` if none)."""
        with self._lock:
            if self._closed:
                return self._status or {}
            self._closed = True
        self.kill()
        self.proc.wait()
        status = self.status()
        for fd in self._fds:
            with _suppress(OSError):
                os.close(fd)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with _suppress(OSError):
                    pipe.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        return status


def _read_status(fd: int) -> dict:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
        if len(data) > 1 << 20:
            break
    for line in reversed(data.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return {}


def _move_out(export: Path, out_dir: Path) -> None:
    """Move the copied /out into ``out_dir`` (regular files and folders only)."""
    for dirpath, _dirnames, filenames in os.walk(export, followlinks=False):
        rel = Path(dirpath).relative_to(export)
        target = out_dir / rel
        target.mkdir(parents=True, exist_ok=True)
        for name in filenames:
            src = Path(dirpath) / name
            if src.is_symlink() or not src.is_file():
                continue
            if _same_fs(src, target):
                os.replace(src, target / name)
            else:
                shutil.copyfile(src, target / name)
                shutil.copymode(src, target / name)


def _same_fs(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_dev == b.stat().st_dev
    except OSError:
        return False


# --- the service a runtime hands to lanes ----------------------------------------------


def availability() -> Availability:
    """:func:`probe` as the core's ``Availability`` (the ``BuildSandbox`` record's check)."""
    ok, reason, _ = probe()
    return Availability.yes(reason) if ok else Availability.no(reason)


class SandboxDriver(Sandbox):
    """The ``wbcore_runtime.contract.sandbox.BuildSandboxDriver`` this plugin serves: what a lane gets from
    ``runtime.build_sandbox()``. The namespace sandbox is checked on the first ``run``, so a
    machine without namespaces fails there with the missing feature named."""

    def __init__(self) -> None:
        super().__init__(lazy=True)
