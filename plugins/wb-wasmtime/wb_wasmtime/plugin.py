"""Entry point of wb-wasmtime. Imports nothing heavy: wasmtime loads on first call."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore import hookimpl
from wbcore.records import ExecShape

from wb_wasmtime import shapes as _shapes


@hookimpl
def wbcore_exec_shapes() -> Iterator[ExecShape]:
    yield from _shapes.shapes()
