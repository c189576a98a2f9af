"""Entry point of wb-lane-rust. Imports nothing heavy; the build sandbox comes from the runtime."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore import hookimpl
from wbcore.records import Availability, BuildLane


def _factory(runtime: Any) -> Any:
    from wb_lane_rust.lane import RustLane

    return RustLane.for_runtime(runtime)


def _available() -> Availability:
    from wb_lane_rust.toolchain import check

    return check()


def _check_flags(flags: tuple[str, ...]) -> None:
    from wb_lane_rust.lane import check_flags

    check_flags(flags)


@hookimpl
def wbcore_build_lanes() -> Iterator[BuildLane]:
    yield BuildLane(
        name="rust",
        summary="Rust → wasm32-wasi(p1): one main.rs through rustc, or a Cargo package with crates from a local "
        "directory source (vendor/ or the configured crate registry), offline",
        where="native rustc/cargo inside the build sandbox (user/mount/pid/net namespaces, no network, read-only "
        "source and crates, writable /out only, rlimits, deadline); build scripts and proc-macros run there too",
        factory=_factory,
        available=_available,
        needs_build_sandbox=True,
        check_flags=_check_flags,
        output_fields=("BUILD_FLAGS",),
    )
