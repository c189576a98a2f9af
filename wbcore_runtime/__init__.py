"""wbcore: discover, verify, build, sign and run toolkits as sandboxed WebAssembly.

The public API is small: :class:`~wbcore_runtime.runtime.Runtime` to embed the core,
:data:`hookimpl` and the records in :mod:`wbcore_runtime.contract.records` to write a plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Runtime", "__version__", "hookimpl"]

if TYPE_CHECKING:
    from wbcore_runtime.contract.hookspecs import hookimpl
    from wbcore_runtime.runtime import Runtime


def __getattr__(name: str) -> Any:
    # Runtime and hookimpl (pluggy) are imported on first use: `import wbcore_runtime` stays cheap,
    # and a command that loads no plugin (wbx toolkit list) never imports pluggy.
    if name == "Runtime":
        from wbcore_runtime.runtime import Runtime

        return Runtime
    if name == "hookimpl":
        from wbcore_runtime.contract.hookspecs import hookimpl

        return hookimpl
    raise AttributeError(name)
