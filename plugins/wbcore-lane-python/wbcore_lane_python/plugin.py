"""Entry point of wbcore-lane-python. Imports nothing heavy (componentize-py loads in the sandbox,
which comes from the runtime)."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore_runtime import hookimpl
from wbcore_runtime.plugins.manager import lazy
from wbcore_runtime.contract.records import BuildLane


@hookimpl
def wbcore_build_lanes() -> Iterator[BuildLane]:
    yield BuildLane(
        name="python",
        summary="Python → a WIT-typed component (componentize-py); --stub-wasi unless #+WASI: p2",
        where="componentize-py (native compiler from PyPI) inside the build sandbox (user/mount/pid/net "
        "namespaces, no network, read-only source and Python, writable /out only, rlimits, deadline); the "
        "app's top level runs only inside wasmtime during pre-initialization",
        factory=lazy("wbcore_lane_python.lane:PythonLane"),
        available=lazy("wbcore_lane_python.lane:check"),
        kind="compile-to-component",
        needs_build_sandbox=True,
        output_fields=("PY_MODULE", "WIT", "WIT_WORLD", "WASI"),
    )
