"""Built-in commands this plugin ships as WAT source, compiled by the wat lane on demand.

``upper`` (``upper.wat``): stdin → stdout with ASCII a–z upper-cased; a WASI command.
"""

from __future__ import annotations

from importlib.resources import files


def source(name: str) -> str:
    return files(__package__).joinpath(f"{name}.wat").read_text(encoding="utf-8")


def build(name: str) -> bytes:
    from wbcore_wasmtime.lanes import compile_wat

    return compile_wat(source(name), name=f"{name}.wat")
