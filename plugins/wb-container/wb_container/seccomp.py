"""The container's seccomp filter, compiled once per process to classic BPF for ``bwrap --seccomp``.

bwrap loads it last, after it built the namespaces and right before it executes the
call's program, so it binds everything inside and nothing of bwrap's own setup. Default
allow (a native CLI needs the ordinary system-call surface); the kernel surface a command
never needs answers ``EPERM`` — the calls that widen an attacker's reach into the host
kernel from an unprivileged user namespace: ptrace and cross-process memory, the mount
family and new namespaces (``unshare``, ``setns``, ``clone`` with ``CLONE_NEWUSER``;
``clone3`` answers ``ENOSYS`` so libc falls back to ``clone``), bpf, perf events,
userfaultfd, io_uring, keyrings, modules, kexec, reboot, swap, clocks, host names,
handle-based opens, and the TIOCSTI ioctl. Sockets other than AF_UNIX answer
``EAFNOSUPPORT`` (the network namespace has no interface anyway).

Built with pyseccomp (libseccomp) in this process; ``None`` without it (the tier then
runs without a filter and says so in its availability).
"""

from __future__ import annotations

import errno
import os
import tempfile
from functools import lru_cache

CLONE_NEWUSER = 0x10000000
TIOCSTI = 0x5412
AF_UNIX = 1

DENIED = (
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


@lru_cache(maxsize=1)
def bpf() -> bytes | None:
    """The filter as BPF bytes for this machine's architecture, or ``None`` without pyseccomp."""
    try:
        import pyseccomp as sc
    except (ImportError, RuntimeError, OSError):
        return None
    f = sc.SyscallFilter(sc.ALLOW)
    eperm = sc.ERRNO(errno.EPERM)
    for name in DENIED:
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
