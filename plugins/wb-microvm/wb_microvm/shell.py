"""``wbx shell --tier microvm``: a micro-VM restored from the tier's snapshot, its guest
agent serving terminal sessions.

The VM is the one a posix call gets (no network device, QEMU's seccomp sandbox, an
unprivileged QEMU when this process is root, the session secret on the guest's kernel
command line, restored from the snapshot in a few seconds) but for one session's life
instead of one call's. The guest agent (``agent/wb_agent.c``) speaks the same PTY frames
as the container tier's (:mod:`wbcore.terminal`): it starts only programs on the image's
allowlist (``/bin/sh`` is busybox's), as uid 1000 on a fresh pty, at most four at once.
The host relays the terminal with :func:`wbcore.terminal.attach` over the VM's
virtio-serial channel; a watchdog SIGKILLs QEMU at the session's deadline + :data:`GRACE_S`.

``--mount`` is refused: the snapshot was taken without a shared-folder device, and a VM
restored from it cannot gain one (QEMU restores exactly the devices it saved).
"""

from __future__ import annotations

import threading
import time

from wb_microvm import tiers
from wb_microvm import vm as _vm
from wbcore import frames
from wbcore.errors import InvalidArgs, NotFound, Timeout
from wbcore.terminal import Channel, ShellRequest

#: The host's watchdog ends the VM this long after the session's deadline.
GRACE_S = 1.0


class MicrovmShell:
    """A restored VM whose agent answered the handshake: ``channel`` and ``secret`` reach
    it; ``close`` (or the deadline) tears the VM down."""

    def __init__(self, vm: _vm.Vm, secret: bytes, deadline: float) -> None:
        self.vm, self.secret, self.deadline = vm, secret, deadline
        assert vm.sock is not None
        vm.sock.setblocking(True)  # terminal.Channel reads and writes the descriptor itself
        fd = vm.sock.fileno()
        self.channel = Channel(fd, fd)
        self._done = threading.Event()
        threading.Thread(target=self._watchdog, daemon=True, name="wb-microvm-shell-watchdog").start()

    def _watchdog(self) -> None:
        if not self._done.wait(max(0.0, self.deadline + GRACE_S - time.monotonic())):
            self.vm.kill()

    def alive(self) -> bool:
        return self.vm.proc.poll() is None

    def close(self) -> None:
        self._done.set()
        self.vm.kill()


def refuse_mounts(request: ShellRequest) -> None:
    if request.mounts:
        m = request.mounts[0]
        raise InvalidArgs(f"wbx shell --tier microvm: --mount {m.host}:{m.guest} is not supported: the micro-VM is "
                          "restored from a snapshot taken without a shared-folder device, so no host folder can "
                          "reach its guest; use --tier container for a shell with host folders")


def open_shell(snap: tiers.Snapshot, request: ShellRequest) -> MicrovmShell:
    """Restore a VM from ``snap``, complete the agent's handshake, return the open shell."""
    refuse_mounts(request)
    started = time.monotonic()
    vm = _vm.Vm(snap.image, snap.accel, snap.secret, incoming=snap.path)
    try:
        end = min(started + tiers.RESTORE_S, started + request.timeout_s)
        vm.connect(end)
        vm.handshake(end)
    except (Timeout, _vm.GuestGone, frames.FrameError, OSError) as exc:
        why = vm.stderr()
        vm.kill()
        raise NotFound(f"wbx shell: the micro-VM did not come up from its snapshot ({exc}): {why}; try again "
                       "(delete the microvm cache's snapshots folder if it persists)") from None
    except BaseException:
        vm.kill()
        raise
    return MicrovmShell(vm, snap.secret, started + request.timeout_s)


__all__ = ["GRACE_S", "MicrovmShell", "open_shell", "refuse_mounts"]
