"""The one seccomp filter builder: a tier's policy (data) compiled to classic BPF.

Every sandbox that loads a seccomp filter — the build sandbox and the os_process worker
(``wbcore-process``: its init loads the bytes with ``prctl(PR_SET_SECCOMP)`` right before
``execve``) and the container tier (``bwrap --seccomp``) — builds it here, so what a
sandboxed program may not ask the kernel is decided in one place; a tier differs only by
the names it adds to :data:`KERNEL_SURFACE`. Default allow (a compiler or a native CLI
needs the ordinary system-call surface); the rest answers an errno, so a program reports a
clean failure instead of dying on a signal:

- :data:`KERNEL_SURFACE` answers ``EPERM``: the calls that widen an attacker's reach into
  the host kernel from an unprivileged user namespace — ptrace and cross-process memory,
  the mount family, new namespaces (``unshare``, ``setns``), bpf, perf events,
  userfaultfd, io_uring, keyrings, modules, kexec, reboot, swap, acct, quotactl,
  iopl/ioperm, clocks, host names, handle-based opens, syslog;
- ``socket`` for every family but AF_UNIX answers ``EAFNOSUPPORT`` (the network namespace
  has no interface anyway);
- ``clone`` with ``CLONE_NEWUSER`` answers ``EPERM``, ``clone3`` ``ENOSYS`` (its flags live
  in memory a filter cannot read: libc falls back to ``clone``);
- the TIOCSTI ioctl (typing into a terminal) answers ``EPERM``.

Built with pyseccomp (libseccomp, which the plugins that load a filter declare) in the
host process; ``None`` without it, and the caller says what that means for its tier.
"""

from __future__ import annotations

import errno
import os
import tempfile
from functools import lru_cache

AF_UNIX = 1
CLONE_NEWUSER = 0x10000000
TIOCSTI = 0x5412

#: The system calls no sandboxed program needs (``EPERM``); a tier may add names.
KERNEL_SURFACE = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
    "chroot", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf",
    "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl",
    "ioperm", "iopl", "open_by_handle_at", "name_to_handle_at", "syslog", "vhangup",
    "lookup_dcookie", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick",
    "mount_setattr", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "settimeofday", "clock_settime", "adjtimex", "sethostname", "setdomainname",
    "uselib", "nfsservctl",
)


@lru_cache(maxsize=8)
def bpf(denied: tuple[str, ...] = KERNEL_SURFACE) -> bytes | None:
    """The filter denying ``denied`` (and the fixed rules above) as BPF bytes for this
    machine's architecture, or ``None`` without pyseccomp."""
    try:
        import pyseccomp as sc
    except (ImportError, RuntimeError, OSError):
        return None
    f = sc.SyscallFilter(sc.ALLOW)
    eperm = sc.ERRNO(errno.EPERM)
    for name in denied:
        try:
            f.add_rule(eperm, name)
        except (OSError, ValueError, RuntimeError):
            continue  # not a system call on this architecture
    f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.NE, AF_UNIX))
    f.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    f.add_rule(eperm, "ioctl", sc.Arg(1, sc.EQ, TIOCSTI))
    with tempfile.TemporaryFile() as fh:
        f.export_bpf(fh)
        fh.flush()
        os.lseek(fh.fileno(), 0, os.SEEK_SET)
        return fh.read()
