"""Entry point of wbcore-brokers-build. Nothing heavy at import: the broker opens on first use."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import Broker


def _build(runtime: Any) -> Any:
    from wbcore_brokers_build.broker import BuildBroker

    return BuildBroker(runtime)


@hookimpl
def wbcore_brokers() -> Iterator[Broker]:
    yield Broker(
        name="build",
        summary="compile source with an installed lane (in its sandbox) and run the result with no caps",
        factory=_build,
        operations=("lanes", "compile", "run", "compile_run"),
    )
