"""Entry point of wbcore-microvm: the microvm tier (rung 3)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.plugins.manager import lazy
from wbcore_runtime.contract.records import IsolationTier


@hookimpl
def wbcore_isolation_tiers() -> Iterator[IsolationTier]:
    yield IsolationTier(
        name="microvm",
        summary="a call in a QEMU micro-VM restored from a snapshot (kvm where a guest answers, else tcg): "
        "its own kernel, no network device, a guest agent speaking the framed protocol with the session "
        "secret, the command allowlist, rlimits, uid 1000, SIGKILL at the deadline inside and VM teardown "
        "outside; posix commands of its busybox image; caps bridged to the host's Dock; interactive shells "
        "(wbx shell, --mount over virtio-9p); host folders for posix calls (wbx run --mount)",
        rung=3,
        factory=lazy("wbcore_microvm.tiers:factory"),
        available=lazy("wbcore_microvm.tiers:available"),
        kinds=frozenset({"command", "posix", "shell", "mount"}),
        bridges_caps=True,
    )


@hookimpl
def wbcore_cli_commands(add: Any) -> None:
    from wbcore_microvm import cli

    add("snapshot", cli.build(getattr(add, "runtime", None)),
        help="Named snapshots of prepared micro-VMs: save, restore, list, delete (tier microvm).")
