"""The build sandbox's seccomp filter, compiled once per process to classic BPF.

Built with pyseccomp (libseccomp) in the parent; the sandbox's init loads the bytes
with ``prctl(PR_SET_SECCOMP)`` right before ``execve``, so the child never imports
libseccomp. Default allow; the calls below answer an errno (so compilers report a clean
failure instead of dying on a signal):

- kernel and namespace surface a compiler never needs: ptrace, mount family, pivot_root,
  chroot, unshare, setns, bpf, perf_event_open, userfaultfd, keyrings, modules, kexec,
  reboot, swap, acct, quotactl, iopl/ioperm, handle-based opens, syslog, io_uring,
  clock and host-name changes, personality;
- ``socket`` for every family but AF_UNIX (the net namespace has no interfaces anyway);
- ``clone`` with CLONE_NEWUSER, and ``clone3`` (its flags live in memory a filter cannot
  read: ENOSYS makes libc fall back to ``clone``);
- the TIOCSTI ioctl (typing into a terminal).
"""

from __future__ import annotations

import errno
import os
import tempfile
from functools import lru_cache

CLONE_NEWUSER = 0x10000000
TIOCSTI = 0x5412

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
    "chroot", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf",
    "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl",
    "ioperm", "iopl", "open_by_handle_at", "name_to_handle_at", "syslog", "vhangup",
    "lookup_dcookie", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick",
    "mount_setattr", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "settimeofday", "clock_settime", "adjtimex", "sethostname", "setdomainname",
    "personality", "uselib", "nfsservctl",
)


@lru_cache(maxsize=1)
def bpf() -> bytes | None:
    """The filter as BPF bytes for this machine's architecture, or None without pyseccomp."""
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
            continue  # not a syscall on this architecture
    f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.NE, 1))
    f.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    f.add_rule(eperm, "ioctl", sc.Arg(1, sc.EQ, TIOCSTI))
    with tempfile.TemporaryFile() as fh:
        f.export_bpf(fh)
        fh.flush()
        os.lseek(fh.fileno(), 0, os.SEEK_SET)
        return fh.read()
