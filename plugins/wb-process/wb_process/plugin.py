"""Entry point of wb-process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore import hookimpl
from wbcore.records import Availability, ExecShape, IsolationTier

from wb_process import shapes as _shapes


@hookimpl
def wbcore_exec_shapes() -> Iterator[ExecShape]:
    yield from _shapes.shapes()


def _tier(runtime: Any) -> Any:
    from wb_process.tiers import factory

    return factory(runtime)


def _tier_available() -> Availability:
    from wb_process.tiers import available

    return available()


@hookimpl
def wbcore_isolation_tiers() -> Iterator[IsolationTier]:
    yield IsolationTier(
        name="os_process",
        summary="a command in a warm sandboxed worker process (namespaces, no network, seccomp, rlimits, "
        "SIGKILL watchdog) on top of wasm isolation; caps bridged to this host's Dock over a framed channel",
        rung=1,
        factory=_tier,
        available=_tier_available,
        kinds=frozenset({"command"}),
        bridges_caps=True,
    )
