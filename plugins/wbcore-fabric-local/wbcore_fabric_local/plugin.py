"""Entry point of wbcore-fabric-local."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import FabricEngine


def _local(runtime: Any) -> Any:
    from wbcore_fabric_local.processes import ProcessEngine

    return ProcessEngine(runtime)


def _threads(runtime: Any) -> Any:
    from wbcore_fabric_local.threads import ThreadEngine

    return ThreadEngine(runtime)


@hookimpl
def wbcore_fabric_engines() -> Iterator[FabricEngine]:
    yield FabricEngine(name="local",
                       summary="worker processes (spawn), compiled modules and kernels kept per worker",
                       factory=_local)
    yield FabricEngine(name="threads", summary="threads of this process (short calls share the GIL)",
                       factory=_threads)


@hookimpl
def wbcore_cli_commands(add: Any) -> None:
    from wbcore_fabric_local import cli

    add("fan", cli.fan(add.runtime), help="Map a command or kernel over JSON-lines inputs (stdin → stdout).")
    add("pipeline", cli.pipeline(add.runtime), help="Run pipelines (pipe / fan_out stages) authored in Org.")
