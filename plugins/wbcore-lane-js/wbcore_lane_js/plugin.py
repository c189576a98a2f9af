"""Entry point of wbcore-lane-js. Imports nothing heavy: wasmtime loads in the factory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.plugins.manager import lazy
from wbcore_runtime.contract.records import BuildLane


def no_flags(lane: str) -> Any:
    """The js, ts and svelte lanes take no ``#+BUILD_FLAGS``: the check build and verify both call."""

    def check(flags: tuple[str, ...]) -> None:
        if flags:
            from wbcore_runtime.contract.errors import InvalidArgs

            raise InvalidArgs(f"{lane} takes no build flags (got {' '.join(flags)}); remove #+BUILD_FLAGS")

    return check


@hookimpl
def wbcore_build_lanes() -> Iterator[BuildLane]:
    yield BuildLane(
        name="js",
        summary="ES modules (top-level await, promises) on QuickJS-NG; artifact = reactor wasm + sources, "
                "one sha256",
        where="QuickJS-NG reactor wasm in wasmtime, at build (compile-only check) and at run; sees only its "
              "own sources read-only at /app; heap, stack, memory and deadline limits",
        factory=lazy("wbcore_lane_js.lane:JsLane.for_runtime"),
        available=lazy("wbcore_lane_js.qjs:check"),
        check_flags=no_flags("js"),
        kind="compile-and-run",
        runner=lazy("wbcore_lane_js.runner:JsRunner"),
    )
    yield BuildLane(
        name="ts",
        summary="TypeScript: type-stripped by the TypeScript compiler (transpileModule, no type check), then "
                "the js lane",
        where="typescript.js (5.9.3, fetched from npm once, sha256-pinned) inside QuickJS-NG's reactor wasm "
              "in wasmtime, then as js; "
        "zero native execution",
        factory=lazy("wbcore_lane_js.ts:TsLane.for_runtime"),
        available=lazy("wbcore_lane_js.ts:check"),
        check_flags=no_flags("ts"),
        kind="compile-and-run",
        runner=lazy("wbcore_lane_js.runner:JsRunner"),
    )
    yield BuildLane(
        name="svelte",
        summary="Svelte 5 components compiled for the server (generate: 'server') and rendered by Svelte's "
                "runtime: JSON props on stdin, HTML on stdout; then the js lane",
        where="the Svelte compiler (svelte 5.57.3 from npm, fetched once, sha256-pinned) inside QuickJS-NG's "
              "reactor wasm in "
        "wasmtime; the runtime modules bundled from the same tarballs; zero native execution",
        factory=lazy("wbcore_lane_js.svelte:SvelteLane.for_runtime"),
        available=lazy("wbcore_lane_js.svelte:check"),
        check_flags=no_flags("svelte"),
        kind="compile-and-run",
        runner=lazy("wbcore_lane_js.runner:JsRunner"),
    )
