"""Entry point of wb-lane-c-wasm. Imports nothing heavy: wasmtime loads in the factory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore import hookimpl
from wbcore.records import Availability, BuildLane


def _factory(runtime: Any) -> Any:
    from wb_lane_c_wasm.lane import CWasmLane

    return CWasmLane.for_runtime(runtime)


def _available() -> Availability:
    from wb_lane_c_wasm.toolchain import check

    return check()


def _check_flags(flags: tuple[str, ...]) -> None:
    from wb_lane_c_wasm.lane import check_flags

    check_flags(flags)


@hookimpl
def wbcore_build_lanes() -> Iterator[BuildLane]:
    yield BuildLane(
        name="c-wasm",
        summary="C99 (most of C11) through TinyCC; every *.c of the source folder, linked with wasi-libc",
        where="tcc compiled to wasm, run in wasmtime: preopened source (read-only) and output dir only, "
        "epoch deadline and memory cap; zero native execution",
        factory=_factory,
        available=_available,
        check_flags=_check_flags,
        output_fields=("BUILD_FLAGS",),
    )
