"""The ``instance`` tier: run in this process, isolated by linear memory (rung 0).

The tier driver dispatches a resolved request to its shape's runner: a
``CommandRequest`` to the command runner, a ``KernelRequest`` to the kernel runner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.calls import CommandRequest, KernelRequest
from wbcore_runtime.contract.errors import InvalidArgs

if TYPE_CHECKING:
    from wbcore_runtime.runtime import Runtime


class InstanceTier:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def call(self, request: Any) -> Any:
        if isinstance(request, CommandRequest):
            from wbcore_wasmtime.command import CommandRunner

            return CommandRunner(self.runtime).call(request)
        if isinstance(request, KernelRequest):
            from wbcore_wasmtime.kernel import KernelRunner

            return KernelRunner(self.runtime).call(request)
        raise InvalidArgs(f"tier instance cannot run a {type(request).__name__}")


def factory(runtime: Runtime) -> InstanceTier:
    return InstanceTier(runtime)
