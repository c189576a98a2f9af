"""The build sandbox: run one native program (a compiler) with nothing of the host.

Usage::

    from wb_process.sandbox import Bind, Limits, Sandbox

    box = Sandbox()                       # raises SandboxUnavailable naming the missing feature
    res = box.run(
        ["/zig/zig", "cc", "-o", "/out/a.wasm", "/src/main.c"],
        binds=[Bind(zig_dir, "/zig"), Bind(src_dir, "/src")],   # read-only by default
        out_dir=host_out,                 # /out inside; its files are copied here afterwards
        limits=Limits(wall_seconds=120),
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

``Sandbox(unsandboxed=True)`` runs the argv directly on the host with the same rlimits and
deadline; it exists for trusted first-party builds on machines without namespaces
(``--unsandboxed-build``), and every result says so in ``features``.
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
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from wbcore.errors import Internal, InvalidArgs, Timeout, WbError

INIT = Path(__file__).with_name("_sandbox_init.py")
#: Outer uid/gid the sandboxed program runs as when the host process is root.
SANDBOX_HOST_ID = 0x5B000000 + 1000
NAMESPACES = ("user", "mount", "pid", "net", "ipc", "uts", "cgroup")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


class SandboxUnavailable(WbError):
    """A namespace or kernel feature the sandbox needs is missing here."""


@dataclass(frozen=True, slots=True)
class Bind:
    """Host ``src`` seen at ``dst`` inside the sandbox (read-only unless ``writable``).

    A writable bind is for trusted state only (a compiler cache being warmed by a
    first-party build); untrusted output goes to ``/out``. An ``overlay`` bind lets an
    untrusted build use (and seem to update) a cache without changing it on the host.
    """

    src: Path
    dst: str
    writable: bool = False
    overlay: bool = False  # writable inside, but writes land in a private tmpfs and vanish


@dataclass(frozen=True, slots=True)
class Limits:
    """Every bound of one sandboxed run. Sizes in bytes, times in seconds."""

    wall_seconds: float = 120.0
    cpu_seconds: int = 120
    address_space: int = 8 << 30
    file_size: int = 256 << 20
    open_files: int = 512
    processes: int = 64
    tmp_bytes: int = 512 << 20
    out_bytes: int = 256 << 20
    out_files: int = 10_000
    output_bytes: int = 1 << 20  # per captured stream (stdout, stderr)

    def as_dict(self) -> dict[str, int | float]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class SandboxResult:
    argv: tuple[str, ...]
    returncode: int  # the program's exit code; negative = killed by that signal
    stdout: bytes
    stderr: bytes
    duration: float
    features: tuple[str, ...]
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    limit: str | None = None  # which limit ended the run, when one did
    out_files: int = 0
    out_bytes: int = 0
    skipped: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.limit is None

    @property
    def log(self) -> str:
        text = self.stderr.decode("utf-8", "replace")
        out = self.stdout.decode("utf-8", "replace")
        return (out + ("\n" if out and text else "") + text).strip()

    def check(self, what: str = "sandboxed program") -> SandboxResult:
        """This result, or a WbError naming the limit hit or carrying the program's stderr."""
        if self.timed_out:
            raise Timeout(f"{what} passed its {self.limit or 'wall-clock'} limit and was killed\n{self.log}".rstrip())
        if self.limit:
            raise InvalidArgs(f"{what} ended at its {self.limit} limit\n{self.log}".rstrip())
        if self.returncode != 0:
            raise InvalidArgs(f"{what} failed (exit {self.returncode})\n{self.log}".rstrip())
        return self


_SIGNAL_LIMITS = {signal.SIGXCPU: "cpu", signal.SIGXFSZ: "file-size"}


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
                return False, "unprivileged user namespaces are disabled (sysctl kernel.unprivileged_userns_clone=0)", ()
        except OSError:
            pass
    with tempfile.TemporaryDirectory(prefix="wb-probe-") as tmp:
        try:
            res = Sandbox(_probing=True).run(["/bin/sh", "-c", "exit 0"], binds=_system_binds(), out_dir=Path(tmp),
                                              limits=Limits(wall_seconds=20))
        except SandboxUnavailable as exc:
            return False, exc.message, ()
        except WbError as exc:
            return False, f"the sandbox could not start: {exc.message}", ()
    if res.returncode != 0:
        return False, f"the sandbox could not run /bin/sh (exit {res.returncode}): {res.log}", res.features
    return True, "namespaces " + ", ".join(NAMESPACES) + ("; seccomp" if "seccomp" in res.features else "; no seccomp"), res.features


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


class Sandbox:
    """Runs programs in the namespace sandbox. Construct once, ``run`` many times."""

    def __init__(self, *, unsandboxed: bool = False, seccomp: bool | None = None, _probing: bool = False) -> None:
        self.unsandboxed = unsandboxed
        from wb_process.seccomp import bpf

        self._seccomp = bpf() if seccomp is not False else None
        if seccomp is True and self._seccomp is None:
            raise SandboxUnavailable("seccomp was required but pyseccomp/libseccomp is not loadable here")
        if not unsandboxed and not _probing:
            ok, reason, _ = probe()
            if not ok:
                raise SandboxUnavailable(
                    f"the build sandbox is unavailable: {reason}; "
                    "only trusted first-party source may build with --unsandboxed-build"
                )

    @property
    def features(self) -> tuple[str, ...]:
        if self.unsandboxed:
            return ("unsandboxed", "rlimits", "deadline")
        feats = tuple(f"ns:{n}" for n in NAMESPACES) + ("rlimits", "deadline", "uid-drop", "no-new-privs")
        return feats + (("seccomp",) if self._seccomp else ())

    def run(
        self,
        argv: Sequence[str],
        *,
        binds: Sequence[Bind] = (),
        out_dir: Path,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = "/out",
        stdin: bytes | None = None,
        seed_out: Path | None = None,
    ) -> SandboxResult:
        """Run ``argv`` (an absolute path inside the sandbox) and copy ``/out`` to ``out_dir``.

        ``seed_out``: a host folder whose files start in ``/out`` (writable copies).
        """
        limits = limits or Limits()
        _check_launch(argv, binds)
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        full_env = {"PATH": DEFAULT_PATH, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
        full_env.update(env or {})
        if self.unsandboxed:
            return self._run_unsandboxed(argv, binds, out_dir, limits, full_env, cwd, stdin, seed_out)
        return self._run_sandboxed(argv, binds, out_dir, limits, full_env, cwd, stdin, seed_out)

    # --- the namespace path ------------------------------------------------------------

    def _run_sandboxed(self, argv, binds, out_dir, limits, env, cwd, stdin, seed_out) -> SandboxResult:
        start = time.monotonic()
        root_user = os.geteuid() == 0
        scratch = Path(tempfile.mkdtemp(prefix="wb-sbx-"))
        try:
            export = scratch / "export"
            proc, sync_r, go_w, status_r = self._start(scratch, argv, binds, limits, env, cwd,
                                                       stdin=stdin is not None, seed_out=seed_out)
            init_pid = None
            try:
                init_pid = self._handshake(proc, sync_r, go_w, root_user, start + limits.wall_seconds)
                out, err, out_trunc, err_trunc, timed_out = _pump(proc, stdin, limits, start + limits.wall_seconds)
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
                raise SandboxUnavailable(f"the build sandbox could not be set up ({status['phase']}): {status['error']}")
            if status.get("phase") != "done":
                if timed_out:
                    return SandboxResult(tuple(argv), -signal.SIGKILL, out, err, time.monotonic() - start,
                                         self.features, timed_out=True, stdout_truncated=out_trunc,
                                         stderr_truncated=err_trunc, limit="wall-clock")
                raise Internal(f"the sandbox init ended without a report (exit {proc.returncode}): {err[-2000:].decode('utf-8', 'replace')}")
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

    def _start(self, scratch: Path, argv, binds, limits, env, cwd, *, stdin: bool, seed_out) -> tuple:
        """Write the init's config into ``scratch`` (0700) and start it: ``(proc, sync_r,
        go_w, status_r)``; the caller runs :meth:`_handshake` next."""
        os.chmod(scratch, 0o700)
        (scratch / "root").mkdir()
        export = scratch / "export"
        export.mkdir()
        sync_r, sync_w = os.pipe()
        go_r, go_w = os.pipe()
        status_r, status_w = os.pipe()
        cfg = {
            "namespaces": list(NAMESPACES),
            "root": str(scratch / "root"),
            "export": str(export),
            "binds": [{"src": str(Path(b.src).resolve()), "dst": b.dst.rstrip("/"), "rw": b.writable, "overlay": b.overlay}
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
        }
        cfg_path = scratch / "config.marshal"
        cfg_path.write_bytes(marshal.dumps(cfg))
        fds = (sync_w, go_r, status_w)
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
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = "/tmp",
        start_timeout: float = 30.0,
    ) -> SandboxedProcess:
        """Start ``argv`` in the sandbox and return at once: a long-lived program the caller
        speaks to over its stdin and stdout (the ``os_process`` tier's workers).

        The same root, namespaces, uid drop, seccomp and rlimits as :meth:`run`; no
        wall-clock deadline of its own (``limits.wall_seconds`` is not used): the caller
        ends it with :meth:`SandboxedProcess.kill` or :meth:`SandboxedProcess.close`.
        """
        limits = limits or Limits()
        _check_launch(argv, binds)
        full_env = {"PATH": DEFAULT_PATH, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
        full_env.update(env or {})
        scratch = Path(tempfile.mkdtemp(prefix="wb-spawn-"))
        try:
            proc, sync_r, go_w, status_r = self._start(scratch, argv, binds, limits, full_env, cwd,
                                                       stdin=True, seed_out=None)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        box = SandboxedProcess(proc, scratch, sync_r, go_w, status_r)
        try:
            box.init_pid = self._handshake(proc, sync_r, go_w, os.geteuid() == 0, time.monotonic() + start_timeout)
        except BaseException:
            box.close()
            raise
        if box.init_pid is None:
            status = box.close()
            if status.get("phase") in ("unshare", "setup"):
                raise SandboxUnavailable(f"the sandbox could not be set up ({status['phase']}): {status['error']}")
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

    # --- the explicit unsandboxed path ----------------------------------------------------

    def _run_unsandboxed(self, argv, binds, out_dir, limits, env, cwd, stdin, seed_out) -> SandboxResult:
        """Run on the host (trusted first-party only): paths are mapped from bind targets."""
        start = time.monotonic()
        mapping = sorted(((b.dst.rstrip("/"), str(Path(b.src).resolve())) for b in binds), key=lambda m: -len(m[0]))
        tmp = Path(tempfile.mkdtemp(prefix="wb-unsbx-"))
        mapping.append(("/out", str(out_dir)))
        mapping.append(("/tmp", str(tmp)))
        if seed_out:
            shutil.copytree(seed_out, out_dir, dirs_exist_ok=True, symlinks=False)

        def host(arg: str) -> str:
            for dst, src in mapping:
                if arg == dst or arg.startswith(dst + "/"):
                    return src + arg[len(dst):]
                for pre in ("=", "-I", "-L", "-o"):
                    if arg.startswith(pre + dst):
                        return pre + host(arg[len(pre):])
            return arg

        host_argv = [host(a) for a in argv]
        host_env = {k: host(v) for k, v in env.items()}

        def limit_child() -> None:
            import resource

            for res, value in (
                (resource.RLIMIT_AS, limits.address_space), (resource.RLIMIT_CPU, limits.cpu_seconds),
                (resource.RLIMIT_FSIZE, limits.file_size), (resource.RLIMIT_NOFILE, limits.open_files),
                (resource.RLIMIT_CORE, 0),
            ):
                resource.setrlimit(res, (value, value))

        try:
            proc = subprocess.Popen(
                host_argv, cwd=host(cwd), env=host_env, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, preexec_fn=limit_child,
            )
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            return SandboxResult(tuple(argv), 127, b"", str(exc).encode(), time.monotonic() - start, self.features)
        try:
            out, err, ot, et, timed_out = _pump(proc, stdin, limits, start + limits.wall_seconds)
        finally:
            if proc.poll() is None:
                with _suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            with _suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            shutil.rmtree(tmp, ignore_errors=True)
        code = proc.returncode
        return SandboxResult(
            tuple(argv), code, out, err, time.monotonic() - start, self.features, timed_out=timed_out,
            stdout_truncated=ot, stderr_truncated=et,
            limit="wall-clock" if timed_out else (_SIGNAL_LIMITS.get(-code) if code < 0 else None),
        )


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


def _pump(proc: subprocess.Popen, stdin: bytes | None, limits: Limits, deadline: float):
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



def _check_launch(argv: Sequence[str], binds: Sequence[Bind]) -> None:
    """Refuse a relative program or a bind that would cover the sandbox's own mounts."""
    if not argv or not argv[0].startswith("/"):
        raise InvalidArgs(f"sandbox argv[0] must be an absolute path inside the sandbox, got {argv[:1]!r}")
    for b in binds:
        if not b.dst.startswith("/") or ".." in Path(b.dst).parts or b.dst.rstrip("/") in ("", "/out", "/tmp", "/proc", "/dev"):
            raise InvalidArgs(f"bind target {b.dst!r} must be an absolute path outside /out, /tmp, /proc, /dev")
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
    for dirpath, dirnames, filenames in os.walk(export, followlinks=False):
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
