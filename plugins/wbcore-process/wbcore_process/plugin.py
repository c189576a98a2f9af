"""Entry point of wbcore-process: the build sandbox (a service lanes ask their runtime for), the
os_process tier, the task shape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.plugins.manager import lazy
from wbcore_runtime.contract.records import BuildSandbox, ExecShape, IsolationTier

from wbcore_process import shapes as _shapes


@hookimpl
def wbcore_exec_shapes() -> Iterator[ExecShape]:
    yield from _shapes.shapes()


@hookimpl
def wbcore_isolation_tiers() -> Iterator[IsolationTier]:
    yield IsolationTier(
        name="os_process",
        summary="a command in a warm sandboxed worker process (namespaces, no network, seccomp, rlimits, "
        "SIGKILL watchdog) on top of wasm isolation; caps bridged to this host's Dock over a framed channel",
        rung=1,
        factory=lazy("wbcore_process.tiers:factory"),
        available=lazy("wbcore_process.tiers:available"),
        kinds=frozenset({"command"}),
        bridges_caps=True,
    )


def _sandbox(runtime: Any) -> Any:
    from wbcore_process.sandbox import SandboxDriver

    return SandboxDriver()


@hookimpl
def wbcore_build_sandboxes() -> Iterator[BuildSandbox]:
    yield BuildSandbox(
        name="namespaces",
        summary="user/mount/pid/net/ipc/uts/cgroup namespaces, read-only binds, no network, uid 1000, "
        "seccomp, rlimits, a SIGKILL deadline, size-capped /tmp and /out",
        factory=_sandbox,
        available=lazy("wbcore_process.sandbox:availability"),
    )
