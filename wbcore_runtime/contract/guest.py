"""The WASI guest contract: what a lane whose compiler is itself a wasm guest (c-wasm: TinyCC;
js/ts/svelte: QuickJS) asks of an engine, and what it gets back.

The core drives no engine. A plugin serves a :class:`GuestRunner` through
``wbcore_guest_runners`` (``wbcore-wasmtime``); a lane takes it from its runtime with
:func:`runner` and speaks only the types below::

    guests = guest.runner(runtime)       # NotFound naming what to install when none is served
    mod = guests.module(wasm, cache_dir=home / "cache" / "js", name="qjs")   # compiled once
    res = guest.run(mod, ["qjs", ...], preopens=[guest.Preopen(app, "/app")],
                    limits=guest.GuestLimits(timeout_s=60, memory_bytes=256 << 20))

A guest sees only the directories it is handed (``preopens``), runs under a wall-clock
deadline (and, given a ``cancel`` event, stops at the engine's next tick once it is set) and
a linear-memory cap, and its stdout/stderr are captured up to a cap. ``start`` and
``extra_imports`` receive the engine's own store, instance and linker: a lane that passes
them speaks that engine's API itself (its pinned ``wasmtime``), never the core.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from wbcore_runtime.contract.errors import NotFound
from wbcore_runtime.contract.host import Choice, Registry, RuntimeServices

#: What to say when no plugin serves a guest runner.
NONE_INSTALLED = "no WASI guest runner is installed; pip install wbcore-wasmtime"
#: Picks one of several installed runners by name.
ENV_CHOICE = "WB_GUEST_RUNNER"


@dataclass(frozen=True, slots=True)
class GuestLimits:
    timeout_s: float = 60.0
    memory_bytes: int = 512 << 20
    output_bytes: int = 1 << 20  # per stream; more is dropped and reported


@dataclass(frozen=True, slots=True)
class Preopen:
    host: Path
    guest: str
    writable: bool = False


@dataclass(frozen=True, slots=True)
class GuestResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    trap: str = ""
    truncated: bool = False
    cancelled: bool = False


@dataclass(frozen=True, slots=True, eq=False)
class GuestModule:
    """A module compiled by ``runner``: one object per (code, engine) in a process, so a lane
    may key its own per-module state by identity. ``handle`` is the engine's compiled module
    (opaque here); ``exports`` the names it exports."""

    runner: GuestRunner
    handle: Any
    digest: str  # sha256 of the wasm bytes
    exports: tuple[str, ...] = field(default=())


class GuestRunner(Protocol):
    """What ``GuestRunnerService.factory(runtime)`` returns (``wbcore-wasmtime``: one shared
    engine, its epoch ticker and deadline guard, a compiled-module cache)."""

    def module(self, wasm: bytes, *, cache_dir: Path | None = None, name: str = "guest") -> GuestModule:
        """``wasm`` compiled: once per process, and kept on disk under ``cache_dir`` (named
        ``<name>-<key>.cwasm``, the key covering the code and the engine) when given."""
        ...

    def run(
        self,
        module: GuestModule,
        argv: Sequence[str],
        *,
        preopens: Sequence[Preopen] = (),
        stdin: Path | None = None,
        env: Sequence[tuple[str, str]] = (),
        limits: GuestLimits = GuestLimits(),
        extra_imports: Callable[[Any, Any], None] | None = None,
        start: Callable[[Any, Any], int] | None = None,
        cancel: Any = None,
        stdout_wrap: Callable[[Callable[[bytes], int]], Any] | None = None,
    ) -> GuestResult:
        """Instantiate ``module`` with WASI (``argv``, ``env``, ``preopens``, ``stdin`` a file)
        and run it: ``start(store, instance)`` returns the exit code (default: the WASI
        ``_start``); ``extra_imports(linker, store)`` defines more host functions;
        ``stdout_wrap(sink)`` wraps the stdout capture (a ``finish()`` on it is called after)."""
        ...


def run(module: GuestModule, argv: Sequence[str], **kw: Any) -> GuestResult:
    """Run ``module`` on the runner that compiled it (``GuestRunner.run``'s keywords)."""
    return module.runner.run(module, argv, **kw)


def _runners(runtime: RuntimeServices) -> Registry[Any]:
    # before the plugins load, the plugin index names the runner: a js command's `wbx run`
    # imports the runner's module, not every plugin
    index = runtime.index_until_loaded()
    registry: Registry[Any] = index.registry("guest_runners") if index is not None else runtime.guest_runners
    return registry


#: ``runner(runtime, name)``: the guest runner to use (``contract.host.Choice``).
runner: Choice[GuestRunner] = Choice(_runners, ENV_CHOICE, ("WASI guest runner", "WASI guest runners"),
                                     NONE_INSTALLED)


def sandbox_caps(runtime: RuntimeServices, tier: str) -> Path:
    """The caps bridge's guest side a sandbox tier binds next to ``frames.py``: the file a served
    guest runner offers (``GuestRunnerService.sandbox_caps``; the core drives no engine). None
    offered is ``NotFound`` naming what to install."""
    for name in runtime.guest_runners.names():
        path = runtime.guest_runners.get(name).sandbox_caps
        if path is not None:
            return Path(path)
    raise NotFound(f"tier {tier} links a wasm guest's wb.* imports with the caps bridge's guest side, "
                   "which a WASI guest runner serves; none is installed: pip install wbcore-wasmtime")
