"""The shapes' runner factories, in a module that imports nothing: the plugin index
(``wbcore_runtime.plugins.index``) names them, and ``wbx run`` imports only this and the runner."""

from __future__ import annotations

from typing import Any


def component_runner(runtime: Any) -> Any:
    from wbcore_wasmtime.component import ComponentRunner

    return ComponentRunner(runtime)


def command_runner(runtime: Any) -> Any:
    from wbcore_wasmtime.command import CommandRunner

    return CommandRunner(runtime)


def guest_runner(runtime: Any) -> Any:
    from wbcore_wasmtime.guests import runner

    return runner(runtime)


def kernel_runner(runtime: Any) -> Any:
    from wbcore_wasmtime.kernel import KernelRunner

    return KernelRunner(runtime)
