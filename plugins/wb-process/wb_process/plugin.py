"""Entry point of wb-process."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore import hookimpl
from wbcore.records import ExecShape

from wb_process import shapes as _shapes


@hookimpl
def wbcore_exec_shapes() -> Iterator[ExecShape]:
    yield from _shapes.shapes()
