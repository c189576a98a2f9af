"""Entry point of wbcore-lane-zig. Imports nothing heavy: zig loads in the factories, and the build
sandbox comes from the runtime (``runtime.build_sandbox()``) when a build starts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.drivers import Availability
from wbcore_runtime.contract.records import BuildLane, BuiltinCommand

#: Manifest keywords that change a c/zig build's output (the cache key covers them).
OUTPUT_FIELDS = ("BUILD_FLAGS", "BUILD_OBJECTS")
WHERE = ("native zig {tool} (PyPI ziglang) inside the runtime's build sandbox (wbcore-process: "
         "user/mount/pid/net namespaces, no network, read-only source, uid 1000, seccomp, rlimits, deadline)")


def _c(runtime: Any) -> Any:
    from wbcore_lane_zig.lanes import CLane

    return CLane.for_runtime(runtime)


def _zig(runtime: Any) -> Any:
    from wbcore_lane_zig.lanes import ZigLane

    return ZigLane.for_runtime(runtime)


def _available() -> Availability:
    from wbcore_lane_zig.toolchain import available

    return available()


def _check_c_flags(flags: tuple[str, ...]) -> None:
    from wbcore_lane_zig.lanes import check_c_flags

    check_c_flags(flags)


def _check_zig_flags(flags: tuple[str, ...]) -> None:
    from wbcore_lane_zig.lanes import check_zig_flags

    check_zig_flags(flags)


def _c_available() -> Availability:
    from wbcore_lane_zig.toolchain import c_available

    return c_available()


@hookimpl
def wbcore_build_lanes() -> Iterator[BuildLane]:
    yield BuildLane(
        name="c",
        summary=("C (C17 and GNU extensions, wasi-libc, setjmp/longjmp) -Oz -s; every *.c of the folder; "
                 "Debian's clang + wasi-libc when installed, else zig cc (the availability line says which)"),
        where=WHERE.format(tool="cc").replace("native zig cc (PyPI ziglang)",
                                              "native clang (Debian) or zig cc (PyPI ziglang)"),
        factory=_c,
        available=_c_available,
        needs_build_sandbox=True,
        check_flags=_check_c_flags,
        output_fields=OUTPUT_FIELDS,
    )
    yield BuildLane(
        name="zig",
        summary="Zig 0.17 with zig build-exe -target wasm32-wasi -O ReleaseSmall -fstrip (a root .zig file; "
                "build.zig is not run)",
        where=WHERE.format(tool="build-exe"),
        factory=_zig,
        available=_available,
        needs_build_sandbox=True,
        check_flags=_check_zig_flags,
        output_fields=OUTPUT_FIELDS,
    )


def _builtin(name: str) -> Any:
    def wasm(runtime: Any) -> bytes:
        from wbcore_lane_zig.builtins import build

        return build(runtime, name)

    return wasm


def _builtin_version(name: str) -> str:
    from wbcore_lane_zig.builtins import version

    return version(name)


@hookimpl
def wbcore_builtin_commands() -> Iterator[BuiltinCommand]:
    if not _available().ok:
        return  # no zig: the built-ins cannot be built here (wbx lanes says why)
    yield BuiltinCommand(
        name="grep",
        summary="lines of stdin matching a POSIX regex; first stdin line = '[-i -v -c -n -o -F -x -w -m N] "
                "PATTERN'",
        wasm=_builtin("grep"),
        arg_mode="stdin1",
        version=_builtin_version("grep"),
    )
    yield BuiltinCommand(
        name="jq",
        summary="jq 1.8.2 (upstream, with oniguruma regexes) over JSON on stdin; first stdin line = "
                "'[OPTIONS] FILTER'",
        wasm=_builtin("jq"),
        arg_mode="stdin1",
        version=_builtin_version("jq"),
    )
    yield BuiltinCommand(
        name="wbox",
        summary="a small shell over the command registry: pipes, ; && ||, NAME=value, $NAME, > >> < 2> on "
                "the VFS",
        wasm=_builtin("wbox"),
        profile="minimal",
        caps=("commands", "vfs"),
        version=_builtin_version("wbox"),
    )
