"""Entry point of wbcore-lane-c-wasm. Imports nothing heavy: wasmtime loads in the factory."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore_runtime import hookimpl
from wbcore_runtime.plugins.manager import lazy
from wbcore_runtime.contract.records import BuildLane


@hookimpl
def wbcore_build_lanes() -> Iterator[BuildLane]:
    yield BuildLane(
        name="c-wasm",
        summary="C99 (most of C11) through TinyCC; every *.c of the source folder, linked with wasi-libc",
        where="tcc compiled to wasm, run in wasmtime: preopened source (read-only) and output dir only, "
        "epoch deadline and memory cap; zero native execution",
        factory=lazy("wbcore_lane_c_wasm.lane:CWasmLane.for_runtime"),
        available=lazy("wbcore_lane_c_wasm.toolchain:check"),
        check_flags=lazy("wbcore_lane_c_wasm.lane:check_flags"),
        # CAPS: tcc links a thunk per declared cap (wb_dock.h), so the caps shape the module.
        output_fields=("BUILD_FLAGS", "CAPS"),
    )
