"""wbcore: discover, verify, build, sign and run toolkits as sandboxed WebAssembly.

The public API is small: :class:`~wbcore_runtime.runtime.Runtime` to embed the core,
:data:`hookimpl` and the records in :mod:`wbcore_runtime.contract.records` to write a plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Runtime", "__version__", "hookimpl"]

from wbcore_runtime.contract import lazy

if TYPE_CHECKING:
    from wbcore_runtime.contract.hookspecs import hookimpl
    from wbcore_runtime.runtime import Runtime

# Imported on first use: `import wbcore_runtime` stays cheap, and a command that loads no plugin
# (wbx toolkit list) never imports pluggy (hookspecs).
_runtime = lazy.module("wbcore_runtime.runtime")
_hookspecs = lazy.module("wbcore_runtime.contract.hookspecs")


def __getattr__(name: str) -> Any:
    if name == "Runtime":
        return _runtime.Runtime
    if name == "hookimpl":
        return _hookspecs.hookimpl
    raise AttributeError(name)
