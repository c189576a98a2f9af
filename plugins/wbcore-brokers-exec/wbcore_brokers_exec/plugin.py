"""Entry point of wbcore-brokers-exec."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import Broker


def _exec(runtime: Any) -> Any:
    from wbcore_brokers_exec.broker import ExecBroker

    return ExecBroker.shared(runtime)


@hookimpl
def wbcore_brokers() -> Iterator[Broker]:
    yield Broker(name="exec",
                 summary="ExecBroker: registered commands only, structural argv, depth <= 8, <= 64 "
                         "concurrent/principal",
                 factory=_exec, operations=("run", "wire"))
    yield Broker(name="commands", summary="run-command: compose registered commands (same limits as exec)",
                 factory=_exec, operations=("run", "list"))
    yield Broker(name="parallel",
                 summary="run-command-many: one command over <= 1024 inputs, per-task timeout",
                 factory=_exec, operations=("map",))
