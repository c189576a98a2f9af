"""A core module named at the top of the module that needs it, imported on its first use.

Why: ``wbx run``, ``wbx --help`` and a listing each load a small part of the core
(docs/architecture.md measures which). A module that needs another only on some of its paths
names it here, beside its other imports, instead of importing it inside a function: every
dependency stays at the top, where the layout test (``tests/core/test_layout.py``) reads it as
an edge of the import graph, and the import's cost is paid by the first call that uses it.
The pattern of Scientific Python's SPEC 1, kept to the core's own modules::

    if TYPE_CHECKING:  # mypy reads the real module
        from wbcore_runtime.dispatch import dispatcher
    else:
        dispatcher = lazy.module("wbcore_runtime.dispatch.dispatcher")

Only at module level: a call inside a function would hide the edge again (the layout test
counts it as an in-function import).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

PACKAGE = "wbcore_runtime."


class Module:
    """Stands for the module ``name`` until an attribute is read; then imports it (once:
    ``importlib`` holds a per-module lock, so two threads' first uses import it once) and
    reads the attribute from the module itself, so a patched attribute is seen."""

    __slots__ = ("_module", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<lazy module {self._name!r} ({state})>"


def module(name: str) -> Any:
    """The core module ``name`` (absolute, ``wbcore_runtime.…``), imported on first use."""
    if not name.startswith(PACKAGE):
        raise ValueError(f"lazy.module takes a core module (wbcore_runtime.…), got {name!r}; "
                         "defer a third-party import inside the function that needs it, with a comment")
    return Module(name)
