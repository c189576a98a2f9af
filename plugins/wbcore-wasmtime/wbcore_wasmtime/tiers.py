"""The ``instance`` tier: run in this process, isolated by linear memory (rung 0).

The tier driver dispatches a resolved request to its shape's runner: a
``CommandRequest`` to the command runner, a ``KernelRequest`` to the kernel runner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.calls import CommandRequest
from wbcore_runtime.contract.kernel_calls import KernelRequest
from wbcore_runtime.contract.errors import InvalidArgs

if TYPE_CHECKING:
    from wbcore_runtime.runtime import Runtime


class InstanceTier:
    """Built once per runtime (dispatch keeps tier drivers); its runners are made on first
    use and kept, as dispatch keeps the shapes' runners: never one per call."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._command: Any = None
        self._kernel: Any = None

    def call(self, request: Any) -> Any:
        if isinstance(request, CommandRequest):
            if self._command is None:
                from wbcore_wasmtime.command import CommandRunner

                self._command = CommandRunner(self.runtime)
            return self._command.call(request)
        if isinstance(request, KernelRequest):
            if self._kernel is None:
                from wbcore_wasmtime.kernel import KernelRunner

                self._kernel = KernelRunner(self.runtime)
            return self._kernel.call(request)
        raise InvalidArgs(f"tier instance cannot run a {type(request).__name__}")


def factory(runtime: Runtime) -> InstanceTier:
    return InstanceTier(runtime)
