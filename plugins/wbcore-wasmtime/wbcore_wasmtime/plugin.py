"""Entry point of wbcore-wasmtime. Imports nothing heavy: wasmtime loads on first call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wbcore_wasmtime import shapes as _shapes
from wbcore_wasmtime.runners import guest_runner
from wbcore_runtime import hookimpl
from wbcore_runtime.contract.drivers import Availability
from wbcore_runtime.contract.records import (
    BuildLane, BuiltinCommand, ExecShape, GuestRunnerService, IsolationTier,
)


@hookimpl
def wbcore_exec_shapes() -> Iterator[ExecShape]:
    yield from _shapes.shapes()


def _wat_lane(runtime: Any) -> Any:
    from wbcore_wasmtime.lanes import WatLane

    return WatLane()


def _instance_tier(runtime: Any) -> Any:
    from wbcore_wasmtime.tiers import InstanceTier

    return InstanceTier(runtime)


def _wasmtime_available() -> Availability:
    try:
        from importlib.metadata import version

        return Availability.yes(f"wasmtime {version('wasmtime')}")
    except Exception as exc:  # noqa: BLE001 - shown by `wbx lanes` / `wbx tiers`
        return Availability.no(f"wasmtime is not importable: {exc}")


@hookimpl
def wbcore_build_lanes() -> Iterator[BuildLane]:
    yield BuildLane(
        name="wat",
        summary="WebAssembly text → .wasm",
        where="in-process wat2wasm (wasmtime), then validated; no toolchain runs",
        factory=_wat_lane,
        available=_wasmtime_available,
    )


@hookimpl
def wbcore_isolation_tiers() -> Iterator[IsolationTier]:
    yield IsolationTier(
        name="instance",
        summary="in-process wasmtime, isolated by linear memory; fresh store per command call",
        rung=0,
        factory=_instance_tier,
        available=_wasmtime_available,
    )


@hookimpl
def wbcore_guest_runners() -> Iterator[GuestRunnerService]:
    yield GuestRunnerService(
        name="wasmtime",
        summary="WASI guests (the c-wasm and js lanes' compilers) in the process's wasmtime engine",
        factory=guest_runner,
        available=_wasmtime_available,
        # the caps bridge's guest side, bound by the sandbox tiers (os_process, container)
        sandbox_caps=str(Path(__file__).with_name("sandbox_caps.py")),
    )


def _builtin(name: str) -> Any:
    def build(runtime: Any) -> bytes:
        from wbcore_wasmtime.builtins import build as _build

        return _build(name)

    return build


def _source_version(name: str) -> str:
    import hashlib
    from importlib.resources import files

    text = files("wbcore_wasmtime.builtins").joinpath(f"{name}.wat").read_bytes()
    return "wat-" + hashlib.sha256(text).hexdigest()[:16]


@hookimpl
def wbcore_builtin_commands() -> Iterator[BuiltinCommand]:
    yield BuiltinCommand(
        name="upper",
        summary="copy stdin to stdout with ASCII letters upper-cased",
        wasm=_builtin("upper"),
        version=_source_version("upper"),
    )
