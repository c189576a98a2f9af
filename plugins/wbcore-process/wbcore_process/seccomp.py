"""The build sandbox's seccomp policy, compiled by the core's one filter builder.

The filter is :func:`wbcore_runtime.guard.seccomp.bpf` (default allow; the kernel surface, sockets but
AF_UNIX, ``clone`` with CLONE_NEWUSER, ``clone3`` and TIOCSTI answer an errno); this tier
adds only ``personality`` to what it refuses. Built in the parent; the sandbox's init loads
the bytes with ``prctl(PR_SET_SECCOMP)`` right before ``execve``, so the child never imports
libseccomp.
"""

from __future__ import annotations

from wbcore_runtime.guard import seccomp

#: What a compiler or the os_process worker may not call (EPERM): the core's list, and
#: ``personality`` (no build changes its execution domain).
DENIED = (*seccomp.KERNEL_SURFACE, "personality")


def bpf() -> bytes | None:
    """The filter as BPF bytes for this machine's architecture, or None without pyseccomp."""
    return seccomp.bpf(DENIED)
