"""One QEMU micro-VM on the host: start it (cold, or restored from a snapshot), talk frames
to its guest agent over virtio-serial, snapshot it, tear it down.

QEMU runs with no network device at all (``-nic none``, ``-nodefaults``), no display, no
reboot, one vCPU and :data:`MEMORY_MB` of RAM; the guest agent's channel is a
``virtserialport`` named ``wb.0`` on a unix-socket chardev in the VM's private folder
(mode 0700). The session secret is on the kernel command line (``wb.secret=<hex>``).
A restored VM runs QEMU's own seccomp sandbox (``-sandbox on`` with obsolete, privilege
elevation, process spawning and resource control denied) and reads its snapshot from an
inherited file descriptor (``-incoming fd:N``), so it needs no ``exec:``.

Every wait here is bounded: the socket's timeouts follow the caller's deadline, and a VM
that overstays is SIGKILLed (:meth:`Vm.kill`) — the teardown is the host's watchdog.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from wbcore_microvm.image import Image
from wbcore_runtime.wire import frames
from wbcore_runtime.contract.errors import NotFound, Timeout

MEMORY_MB = 256
QEMU = "qemu-system-x86_64"
#: The seccomp sandbox QEMU applies to itself once set up (restored VMs).
SANDBOX = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
#: The host uid a sandboxed tcg QEMU runs as when this process is root (it owns nothing).
QEMU_UID = 61314


def _setpriv() -> str:
    path = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if path is None:
        raise NotFound("setpriv is not installed (apt-get install util-linux)")
    return path


def qemu_path() -> str | None:
    return shutil.which(QEMU)


@lru_cache(maxsize=1)
def qemu_version() -> str:
    exe = qemu_path()
    if exe is None:
        return ""
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    return out.split("\n")[0].strip()


def kvm_openable() -> bool:
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True


class GuestGone(Exception):
    """The VM ended (killed, crashed, powered off) while the host waited on it."""


class Vm:
    """A running QEMU and, once :meth:`connect`\\ ed, its agent's frame channel."""

    def __init__(
        self, image: Image, accel: str, secret: bytes,
        *,
        incoming: Path | None = None, qmp: bool = False, sandbox: bool = True,
        shares: list[tuple[str | None, bool]] | None = None,
    ) -> None:
        exe = qemu_path()
        if exe is None:
            raise NotFound("qemu-system-x86_64 is not installed; install it with: "
                           "apt-get install --no-install-recommends qemu-system-x86")
        self.image, self.accel, self.secret = image, accel, secret
        self.dir = Path(tempfile.mkdtemp(prefix="wbcore-microvm-"))
        os.chmod(self.dir, 0o700)
        # Unprivileged QEMU (root starting a sandboxed VM, tcg: no /dev/kvm to open): it
        # reaches its kernel, initrd and snapshot through inherited descriptors, and owns
        # nothing on the host but its own folder.
        drop = sandbox and accel == "tcg" and os.geteuid() == 0
        if drop:
            os.chown(self.dir, QEMU_UID, QEMU_UID)
        self.port_path = self.dir / "wb.sock"
        self.qmp_path = self.dir / "qmp.sock" if qmp else None
        self.console = self.dir / "console.log"
        self.sock: socket.socket | None = None
        fds: list[int] = []
        try:
            def fd_path(path: Path) -> str:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                fds.append(fd)
                return f"/proc/self/fd/{fd}"

            args = [
                exe, "-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-M", "q35", "-accel",
                accel, "-m", str(MEMORY_MB), "-smp", "1", "-nic", "none", "-kernel", fd_path(image.kernel),
                "-initrd", fd_path(image.initrd), "-append",
                f"console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init wb.secret={secret.hex()}", "-serial",
                f"file:{self.console}", "-device", "virtio-serial-pci,id=vs", "-chardev",
                f"socket,id=wb,path={self.port_path},server=on,wait=off", "-device",
                "virtserialport,bus=vs.0,chardev=wb,name=wb.0",
            ]
            if shares is not None:
                # virtio-9p slots (a shell's --mount): a snapshot and the VMs restored from it
                # have the same slots; an unused one exports an empty read-only folder.
                empty = self.dir / "empty"
                empty.mkdir(mode=0o500)
                if drop:
                    os.chown(empty, QEMU_UID, QEMU_UID)
                for i, (path, rw) in enumerate(shares):
                    where = str(path or empty).replace(",", ",,")  # QEMU's option syntax escapes commas
                    # A writable folder: the guest's owners and modes live in user.virtfs.*
                    # xattrs (the shell owns what it makes; the host gets 0600/0700 files of
                    # QEMU's uid, never a guest-chosen mode or setuid bit); read-only: as is.
                    model = "mapped-xattr" if rw and path else "none,readonly=on"
                    args += ["-fsdev", f"local,id=wbfs{i},path={where},security_model={model}",
                             "-device", f"virtio-9p-pci,fsdev=wbfs{i},mount_tag=wbm{i}"]
            if self.qmp_path is not None:
                args += ["-qmp", f"unix:{self.qmp_path},server=on,wait=off"]
            if incoming is not None:
                args += ["-incoming", f"fd:{fd_path(incoming)[len('/proc/self/fd/'):]}"]
            if sandbox:
                args += ["-sandbox", SANDBOX]
            # QEMU dies with the thread that started it (no VM outlives its caller).
            wrap = [_setpriv(), "--pdeathsig", "KILL"]
            if drop:
                wrap += [f"--reuid={QEMU_UID}", f"--regid={QEMU_UID}", "--clear-groups"]
            self.unprivileged = drop
            self.started = time.monotonic()
            self.proc = subprocess.Popen(
                [*wrap, "--", *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, pass_fds=tuple(fds), start_new_session=True,
            )
        finally:
            for fd in fds:
                os.close(fd)

    # --- the channel ------------------------------------------------------------------

    def connect(self, deadline: float) -> None:
        """Connect to the agent's chardev (QEMU creates it as it starts)."""
        while True:
            if self.proc.poll() is not None:
                raise GuestGone(
                    f"qemu exited ({self.proc.returncode}) before its channel opened: {self.stderr()}"
                )
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(str(self.port_path))
                self.sock = s
                return
            except OSError:
                s.close()
            if time.monotonic() > deadline:
                raise Timeout("the micro-VM's channel did not open in time")
            time.sleep(0.02)

    def _read(self, deadline: float) -> Callable[[int], bytes]:
        sock = self.sock
        assert sock is not None

        def read(n: int) -> bytes:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Timeout("deadline passed while waiting for the guest agent")
                sock.settimeout(min(left, 0.5))
                try:
                    data = sock.recv(n)
                except TimeoutError:
                    if self.proc.poll() is not None:
                        raise GuestGone(f"the micro-VM ended (qemu exit {self.proc.returncode})") from None
                    continue
                except OSError as exc:
                    raise GuestGone(f"the micro-VM's channel broke: {exc}") from None
                if not data:
                    raise GuestGone("the micro-VM's channel closed")
                return data

        return read

    def recv(self, deadline: float) -> tuple[int, bytes]:
        try:
            return frames.read_frame(self._read(deadline))
        except frames.FrameError as exc:
            if exc.reason == "eof":
                raise GuestGone(f"the micro-VM's channel closed mid-frame ({exc.message})") from None
            raise

    def send_frame(self, frame: bytes) -> None:
        assert self.sock is not None
        self.sock.settimeout(30.0)
        try:
            self.sock.sendall(frame)
        except OSError as exc:
            raise GuestGone(f"the micro-VM's channel broke: {exc}") from None

    def handshake(self, deadline: float) -> None:
        """Ping with the secret until the agent's Pong (the guest may still be booting:
        the channel buffers until the agent opens its port). The Ping carries 32 fresh
        random bytes: a VM restored from a snapshot resumes with the snapshot's kernel RNG
        state, shared by every VM restored from it, until the agent reseeds it with these."""
        self.send_frame(frames.ping(self.secret, seed=os.urandom(frames.SEED_BYTES)))
        while True:
            kind, payload = self.recv(deadline)
            if kind == frames.PONG:
                frames.check_pong(payload)
                return
            if kind == frames.REFUSED:
                obj, _ = frames.unpack(payload)
                raise frames.FrameError(
                    str(obj.get("reason")), f"the guest agent refused the handshake: {obj.get('message')}"
                )

    def hangup(self) -> None:
        """Close the host's end of the channel (the guest sees its port's host leave)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    # --- snapshot (cold VMs started with qmp=True, sandbox=False) ---------------------

    def snapshot(self, dest: Path, timeout: float = 120.0) -> None:
        """Migrate the running VM into ``dest`` (QMP ``migrate`` to ``exec:cat``)."""
        assert self.qmp_path is not None
        tmp = dest.with_name(dest.name + f".{os.getpid()}.tmp")
        q = _Qmp(self.qmp_path, time.monotonic() + 30)
        try:
            q.call("migrate-set-capabilities", {"capabilities": [{"capability": "events", "state": False}]})
            q.call("migrate", {"uri": f"exec:cat > '{tmp}'"})
            end = time.monotonic() + timeout
            while True:
                st = q.call("query-migrate")
                status = st.get("status")
                if status == "completed":
                    break
                if status in ("failed", "cancelled") or time.monotonic() > end:
                    raise NotFound(f"the snapshot did not complete ({status}): {st.get('error-desc', '')}")
                time.sleep(0.1)
        finally:
            q.close()
        os.chmod(tmp, 0o600)
        os.rename(tmp, dest)

    # --- teardown ---------------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL QEMU (its process group) and remove its folder."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.sock is not None:
            self.sock.close()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def stderr(self) -> str:
        err = b""
        if self.proc.poll() is not None and self.proc.stderr is not None:
            try:
                err = self.proc.stderr.read(4000)
            except (OSError, ValueError):
                pass
        tail = err.decode(errors="replace").strip().splitlines()[-2:]
        try:
            con = self.console.read_bytes()[-800:].decode(errors="replace").strip().splitlines()[-3:]
        except OSError:
            con = []
        return " | ".join(tail + con) or "no output"


class _Qmp:
    """A minimal QMP client (greeting, ``qmp_capabilities``, one command at a time)."""

    def __init__(self, path: Path, deadline: float) -> None:
        while True:
            self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self.s.connect(str(path))
                break
            except OSError:
                self.s.close()
                if time.monotonic() > deadline:
                    raise Timeout("QEMU's QMP socket did not open") from None
                time.sleep(0.05)
        self.s.settimeout(30)
        self.f = self.s.makefile("rwb")
        self._line()
        self.call("qmp_capabilities")

    def _line(self) -> dict[str, Any]:
        line = self.f.readline(1 << 20)
        if not line:
            raise NotFound("QEMU closed its QMP socket")
        return json.loads(line)

    def call(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        msg = {"execute": cmd, **({"arguments": args} if args else {})}
        self.f.write(json.dumps(msg).encode() + b"\n")
        self.f.flush()
        while True:
            reply = self._line()
            if "return" in reply:
                return reply["return"] if isinstance(reply["return"], dict) else {}
            if "error" in reply:
                raise NotFound(f"QMP {cmd}: {reply['error'].get('desc')}")

    def close(self) -> None:
        self.f.close()
        self.s.close()
