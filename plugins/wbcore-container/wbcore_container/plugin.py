"""Entry point of wbcore-container: the container tier (bubblewrap backend) and the posix shape."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore_runtime import hookimpl
from wbcore_runtime.plugins.manager import lazy
from wbcore_runtime.contract.records import ExecShape, IsolationTier

from wbcore_container import shapes as _shapes


@hookimpl
def wbcore_exec_shapes() -> Iterator[ExecShape]:
    yield from _shapes.shapes()


@hookimpl
def wbcore_isolation_tiers() -> Iterator[IsolationTier]:
    yield IsolationTier(
        name="container",
        summary="a call in a throwaway bubblewrap container: new user/pid/net/ipc/uts namespaces, no "
        "network, a read-only root from this host's Debian packages, tmpfs /tmp, rlimits, SIGKILL at the "
        "deadline; wasm commands (caps bridged to the host's Dock over the framed protocol), posix CLIs, "
        ":role task blocks (WB_TOOLKIT_EXEC=1), "
        "interactive shells (wbx shell) and host folders bound in for posix calls and tasks (wbx run "
        "--mount)",
        rung=2,
        factory=lazy("wbcore_container.tiers:factory"),
        available=lazy("wbcore_container.tiers:available"),
        kinds=frozenset({"command", "posix", "shell", "task", "mount"}),
        bridges_caps=True,
    )
