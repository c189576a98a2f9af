"""Entry point of wb-lane-js. Imports nothing heavy: wasmtime loads in the factory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore import hookimpl
from wbcore.records import Availability, BuildLane


def _js(runtime: Any) -> Any:
    from wb_lane_js.lane import JsLane

    return JsLane.for_runtime(runtime)


def _runner(runtime: Any) -> Any:
    from wb_lane_js.runner import JsRunner

    return JsRunner(runtime)


def _available() -> Availability:
    from wb_lane_js.qjs import check

    return check()


@hookimpl
def wbcore_build_lanes() -> Iterator[BuildLane]:
    yield BuildLane(
        name="js",
        summary="ES modules (top-level await, promises) on QuickJS-NG; artifact = reactor wasm + sources, one sha256",
        where="QuickJS-NG reactor wasm in wasmtime, at build (compile-only check) and at run; sees only its own "
        "sources read-only at /app; heap, stack, memory and deadline limits",
        factory=_js,
        available=_available,
        kind="compile-and-run",
        runner=_runner,
    )
