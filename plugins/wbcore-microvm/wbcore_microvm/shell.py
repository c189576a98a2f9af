"""``wbx shell --tier microvm``: a micro-VM restored from the tier's snapshot, its guest
agent serving terminal sessions.

The VM is the one a posix call gets (no network device, QEMU's seccomp sandbox, an
unprivileged QEMU when this process is root, the session secret on the guest's kernel
command line, restored from the snapshot in a few seconds) but for one session's life
instead of one call's. The guest agent (``agent/wb_agent.c``) speaks the same PTY frames
as the container tier's (wbcore-terminal's ``agent.py``): it starts only programs on the image's
allowlist (``/bin/sh`` is busybox's), as uid 1000 on a fresh pty, at most four at once.
The host relays the terminal with the terminal service's ``attach`` (wbcore-terminal) over the VM's
virtio-serial channel; a watchdog SIGKILLs QEMU at the session's deadline + :data:`GRACE_S`.

``--mount`` folders travel over virtio-9p: QEMU restores exactly the devices it saved, so a
shell with mounts restores a second snapshot (built once, like the first) whose VM has
:data:`MOUNT_SLOTS` virtio-9p devices, each exporting an empty read-only folder at
snapshot time (9p migrates only while nothing is mounted); the restored QEMU exports the
caller's folders in their place (read-only ones ``security_model=none,readonly=on``;
``:rw`` ones ``mapped-xattr``, so the guest owns what it creates and the host never gets a
guest-chosen mode),
and the agent mounts them (a sealed ``Mount`` frame per folder, before any session;
nosuid, nodev). Calls never use that snapshot. As root, QEMU runs as host uid
:data:`wbcore_microvm.vm.QEMU_UID`: a folder must be reachable by it (checked, with the
``chmod``/``chown`` that is missing named).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Sequence

from wbcore_microvm import tiers
from wbcore_microvm import vm as _vm
from wbcore_runtime.wire import frames
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, Timeout
from wbcore_runtime.dispatch.mounts import Mount, unreachable_by
from wbcore_runtime.contract.terminal import ShellRequest

#: The host's watchdog ends the VM this long after the session's deadline.
GRACE_S = 1.0
#: virtio-9p devices of a shell VM with mounts (its snapshot has as many; unused ones export
#: an empty read-only folder).
MOUNT_SLOTS = 4


class MicrovmShell:
    """A restored VM whose agent answered the handshake: ``channel`` and ``secret`` reach
    it; ``close`` (or the deadline) tears the VM down."""

    def __init__(self, vm: _vm.Vm, secret: bytes, deadline: float) -> None:
        self.vm, self.secret, self.deadline = vm, secret, deadline
        assert vm.sock is not None
        vm.sock.setblocking(True)  # frames.Channel reads and writes the descriptor itself
        fd = vm.sock.fileno()
        self.channel = frames.Channel(fd, fd)
        self._done = threading.Event()
        threading.Thread(target=self._watchdog, daemon=True, name="wbcore-microvm-shell-watchdog").start()

    def _watchdog(self) -> None:
        if not self._done.wait(max(0.0, self.deadline + GRACE_S - time.monotonic())):
            self.vm.kill()

    def alive(self) -> bool:
        return self.vm.proc.poll() is None

    def close(self) -> None:
        self._done.set()
        self.vm.kill()


def check_mounts(request: ShellRequest) -> None:
    """At most :data:`MOUNT_SLOTS` host folders, each reachable by the QEMU that exports it."""
    check_call_mounts(request.mounts, "wbx shell --tier microvm")


def check_call_mounts(mounts: Sequence[Mount], what: str = "tier microvm") -> None:
    """:func:`check_mounts` for any sandbox run of this tier (a shell's or a call's folders)."""
    if len(mounts) > MOUNT_SLOTS:
        raise InvalidArgs(f"{what}: at most {MOUNT_SLOTS} --mount folders (got {len(mounts)})")
    for m in mounts:
        # The guest sees the folder's own host owner and mode (what it creates inside is its
        # own, mapped-xattr) and its shell is guest uid 1000, an "other" to the folder.
        if m.rw and not os.stat(m.host).st_mode & stat.S_IWOTH:
            raise InvalidArgs(
                f"--mount {m.host}:{m.guest}:rw: the micro-VM's shell (guest uid 1000) sees the folder's "
                f"host owner and mode and may write in it only if others may: chmod o+rwx {m.host}"
            )
    if os.geteuid() != 0:
        return
    for m in mounts:
        why = unreachable_by(m.host, m.rw, _vm.QEMU_UID)
        if why:
            raise InvalidArgs(
                f"--mount {m.host}:{m.guest}: the micro-VM's QEMU runs as host uid {_vm.QEMU_UID}, "
                f"which cannot use it: {why}"
            )


def mount_all(vm: _vm.Vm, secret: bytes, mounts: Sequence[Mount], deadline: float) -> None:
    """Ask the agent to mount each folder at its guest path (slot by slot, in order)."""
    for slot, m in enumerate(mounts):
        vm.send_frame(frames.seal(frames.MOUNT, secret, {"slot": slot, "guest": m.guest, "rw": m.rw}))
        while True:
            kind, payload = vm.recv(deadline)
            if kind in (frames.MOUNTED, frames.REFUSED):
                break
        obj, _ = frames.unpack(payload)
        if kind == frames.REFUSED or obj.get("ok") is not True:
            raise InvalidArgs(f"--mount {m.host}:{m.guest}: the guest could not mount it: "
                              f"{obj.get('error') or obj.get('message')}")


def open_shell(snap: tiers.Snapshot, request: ShellRequest) -> MicrovmShell:
    """Restore a VM from ``snap`` (one with :data:`MOUNT_SLOTS` virtio-9p slots when the
    request has mounts), complete the agent's handshake, mount, return the open shell."""
    check_mounts(request)
    started = time.monotonic()
    shares: list[tuple[str | None, bool]] | None = None
    if request.mounts:
        shares = [(m.host, m.rw) for m in request.mounts]
        shares += [(None, False)] * (MOUNT_SLOTS - len(shares))
    vm = _vm.Vm(snap.image, snap.accel, snap.secret, incoming=snap.path, shares=shares)
    try:
        end = min(started + tiers.RESTORE_S, started + request.timeout_s)
        vm.connect(end)
        vm.handshake(end)
        mount_all(vm, snap.secret, request.mounts, end)
    except (Timeout, _vm.GuestGone, frames.FrameError, OSError) as exc:
        why = vm.stderr()
        vm.kill()
        raise NotFound(f"wbx shell: the micro-VM did not come up from its snapshot ({exc}): {why}; try again "
                       "(delete the microvm cache's snapshots folder if it persists)") from None
    except BaseException:
        vm.kill()
        raise
    return MicrovmShell(vm, snap.secret, started + request.timeout_s)


__all__ = [
    "GRACE_S", "MOUNT_SLOTS", "MicrovmShell", "check_call_mounts", "check_mounts", "mount_all", "open_shell",
]
