"""The shapes' runner factories, in a module that imports nothing heavy: each is a
:func:`~wbcore_runtime.plugins.manager.lazy` reference, which the plugin index
(``wbcore_runtime.plugins.index``) keeps by name, so ``wbx run`` imports only the runner."""

from __future__ import annotations

from wbcore_runtime.plugins.manager import lazy

component_runner = lazy("wbcore_wasmtime.component:ComponentRunner")
command_runner = lazy("wbcore_wasmtime.command:CommandRunner")
guest_runner = lazy("wbcore_wasmtime.guests:runner")
kernel_runner = lazy("wbcore_wasmtime.kernel:KernelRunner")
