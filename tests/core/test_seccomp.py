"""The one seccomp filter builder (``wbcore_runtime.guard.seccomp``): every tier that loads a filter builds it
here from its policy (data), and the filter refuses what the module says it refuses."""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import sys

import pytest

from wbcore_runtime.guard import seccomp

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


def test_the_kernel_surface_names_the_calls_that_reach_into_the_host_kernel() -> None:
    for name in ("ptrace", "mount", "unshare", "setns", "bpf", "userfaultfd", "io_uring_setup", "kexec_load"):
        assert name in seccomp.KERNEL_SURFACE
    assert len(set(seccomp.KERNEL_SURFACE)) == len(seccomp.KERNEL_SURFACE)


def test_a_policy_is_data_and_each_is_built_once() -> None:
    pytest.importorskip("pyseccomp")
    base = seccomp.bpf()
    if base is None:
        pytest.skip("libseccomp is not loadable here")
    assert seccomp.bpf(seccomp.KERNEL_SURFACE) == base
    assert seccomp.bpf(seccomp.KERNEL_SURFACE) is seccomp.bpf(seccomp.KERNEL_SURFACE)  # built once per policy
    wider = seccomp.bpf((*seccomp.KERNEL_SURFACE, "personality"))
    assert wider is not None and wider != base and len(wider) % 8 == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux's")
def test_the_filter_refuses_what_it_says_in_a_process_that_loads_it() -> None:
    pytest.importorskip("pyseccomp")
    prog = seccomp.bpf((*seccomp.KERNEL_SURFACE, "personality"))
    if prog is None:
        pytest.skip("libseccomp is not loadable here")
    pid = os.fork()
    if pid == 0:  # the child loads the filter and reports by its exit code
        code = 99
        try:
            libc = ctypes.CDLL(None, use_errno=True)

            class SockFprog(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

            buf = ctypes.create_string_buffer(prog, len(prog))
            fprog = SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
            if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER,
                                                                        ctypes.byref(fprog), 0, 0):
                os._exit(10)

            def refused(call: object, want: int) -> bool:
                return call == -1 and ctypes.get_errno() == want

            checks = [
                refused(libc.unshare(seccomp.CLONE_NEWUSER), errno.EPERM),
                refused(libc.ptrace(0, 0, 0, 0), errno.EPERM),
                refused(libc.personality(0xFFFFFFFF), errno.EPERM),
            ]
            try:
                socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
                checks.append(False)
            except OSError as exc:
                checks.append(exc.errno == errno.EAFNOSUPPORT)
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()  # AF_UNIX stays allowed
            code = 0 if all(checks) else 20 + checks.index(False)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
