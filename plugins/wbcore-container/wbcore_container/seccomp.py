"""The container's seccomp policy, compiled by the core's one filter builder for ``bwrap --seccomp``.

bwrap loads it last, after it built the namespaces and right before it executes the
call's program, so it binds everything inside and nothing of bwrap's own setup. The
filter is :func:`wbcore_runtime.guard.seccomp.bpf` with the core's list as it is (default allow: a native
CLI needs the ordinary system-call surface; the kernel surface a command never needs
answers ``EPERM``, sockets other than AF_UNIX ``EAFNOSUPPORT``).

``None`` without pyseccomp (the tier then runs without a filter and says so in its
availability).
"""

from __future__ import annotations

from wbcore_runtime.guard import seccomp

#: What a command in the container may not call (EPERM): the core's list, nothing added.
DENIED = seccomp.KERNEL_SURFACE


def bpf() -> bytes | None:
    """The filter as BPF bytes for this machine's architecture, or ``None`` without pyseccomp."""
    return seccomp.bpf(DENIED)
