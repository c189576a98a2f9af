"""wbcore: discover, verify, build, sign and run toolkits as sandboxed WebAssembly.

The public API is small: :class:`~wbcore.runtime.Runtime` to embed the core,
:data:`hookimpl` and the records in :mod:`wbcore.records` to write a plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wbcore.hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["Runtime", "__version__", "hookimpl"]

if TYPE_CHECKING:
    from wbcore.runtime import Runtime


def __getattr__(name: str) -> Any:
    # Runtime is imported on first use so `import wbcore` (plugin import time) stays cheap.
    if name == "Runtime":
        from wbcore.runtime import Runtime

        return Runtime
    raise AttributeError(name)
