"""Entry point of wbcore-lane-rust. Imports nothing heavy; the build sandbox comes from the runtime."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore_runtime import hookimpl
from wbcore_runtime.plugins.manager import lazy
from wbcore_runtime.contract.records import BuildLane


@hookimpl
def wbcore_build_lanes() -> Iterator[BuildLane]:
    yield BuildLane(
        name="rust",
        summary="Rust → wasm32-wasi(p1): one main.rs through rustc, or a Cargo package with crates from a "
        "local directory source (vendor/ or the configured crate registry), offline",
        where="native rustc/cargo inside the build sandbox (user/mount/pid/net namespaces, no network, "
        "read-only source and crates, writable /out only, rlimits, deadline); build scripts and proc-macros "
        "run there too",
        factory=lazy("wbcore_lane_rust.lane:RustLane.for_runtime"),
        available=lazy("wbcore_lane_rust.toolchain:check"),
        needs_build_sandbox=True,
        check_flags=lazy("wbcore_lane_rust.lane:check_flags"),
        output_fields=("BUILD_FLAGS",),
    )
