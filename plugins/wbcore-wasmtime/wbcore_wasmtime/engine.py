"""One wasmtime ``Engine`` per process, configured once, and what hangs off it.

- **Config**: epoch interruption always on (the wall-clock deadline of every call);
  fuel metering on when ``WB_WASM_FUEL=1`` (it costs guest speed, so it is opt-in).
  The config is fingerprinted into the compiled-cache key (``cache_key()``), so a
  cache compiled under another wasmtime version, config or CPU is never loaded.
- **Ticker**: a daemon thread increments the engine epoch every ``TICK_S`` while at
  least one call or kernel is active (``ticking()``), and sleeps otherwise.
- **Guard**: each store gets an epoch deadline one tick ahead and a callback
  (:func:`attach_guard`) that checks the wall-clock deadline, the caller's cancel event,
  the output caps and a ``#+SCRATCH`` folder's size (every few ticks); a runaway guest
  stops within one tick of its deadline, the trap
  unwinds only the guest, and the host thread carries on.
- **Modules**: ``modules().load(artifacts, sha)`` loads a verified artifact once per
  process (the compiled form from the artifact store) with one WASI ``InstancePre``.
- **Caps** (the Dock seam): :func:`link_caps` links one host import per granted cap
  (``wb.<cap>``, :mod:`wbcore_wasmtime.dock_link`) into a per-call Linker before instantiation;
  an import of an ungranted cap fails with ``CapabilityDenied`` naming the cap. Modules
  that import no caps skip it and use the shared ``InstancePre``.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from wbcore_runtime.store.digest import sha256
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs
from wbcore_runtime.contract.frozen import Record

if TYPE_CHECKING:
    import wasmtime

    from wbcore_runtime.contract.calls import Principal
    from wbcore_runtime.runtime import Runtime

TICK_S = 0.005
#: Import modules a guest may name: WASI preview 1 (stdio only, nothing inherited) and
#: ``wb`` (the brokered caps).
WASI_MODULE = "wasi_snapshot_preview1"
CAP_MODULE = "wb"
MAX_CACHED_MODULES = 256
K = TypeVar("K")
V = TypeVar("V")

_lock = threading.Lock()
_engine: Engine | None = None


@functools.lru_cache(maxsize=1)
def wasmtime_version() -> str:
    """The installed wasmtime-py version (part of the compiled-module cache key). Read from
    the ``wasmtime-<version>.dist-info`` folder beside the package when there is exactly
    one (importing ``importlib.metadata`` costs more than a ``wbx run`` may spend on it)."""
    import wasmtime

    site = os.path.dirname(os.path.dirname(wasmtime.__file__))
    try:
        found = [n for n in os.listdir(site) if n.startswith("wasmtime-") and n.endswith(".dist-info")]
    except OSError:
        found = []
    if len(found) == 1:
        return found[0][len("wasmtime-"):-len(".dist-info")]
    from importlib.metadata import version

    return version("wasmtime")


def fuel_enabled() -> bool:
    return os.environ.get("WB_WASM_FUEL", "") in ("1", "true", "yes")


class Ticker:
    """Advances the engine epoch while anything is running (see module docstring)."""

    def __init__(self, engine: wasmtime.Engine, tick_s: float = TICK_S) -> None:
        from wasmtime import _ffi

        self._inc = _ffi.wasmtime_engine_increment_epoch
        self._ptr = engine.ptr()
        self.tick_s = tick_s
        self._active = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wb-epoch-ticker", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # Deadlines are only as punctual as this thread: on a busy machine ask the kernel
        # to schedule it ahead of ordinary work (best effort; needs CAP_SYS_NICE).
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10)
        except (OSError, AttributeError):
            pass
        sleep, inc, ptr, wake, lock = time.sleep, self._inc, self._ptr, self._wake, self._lock
        while True:
            wake.wait()
            sleep(self.tick_s)
            inc(ptr)
            # the thread parks itself once nothing runs, so back-to-back calls never pay
            # for waking it
            with lock:
                if self._active == 0:
                    wake.clear()

    def enter(self) -> None:
        with self._lock:
            self._active += 1
            if not self._wake.is_set():
                self._wake.set()

    def leave(self) -> None:
        with self._lock:
            if self._active > 0:
                self._active -= 1

    @contextmanager
    def ticking(self) -> Iterator[None]:
        self.enter()
        try:
            yield
        finally:
            self.leave()



class Engine(Record):
    """The process-wide engine, its config fingerprint and its epoch ticker (as ``@dataclass``
    did; written by hand, ``wbcore_runtime.contract.frozen``: it is on every ``wbx run``)."""

    __match_args__ = ("wasm", "config", "fuel", "ticker")
    wasm: wasmtime.Engine
    config: dict[str, Any]
    fuel: bool
    ticker: Ticker

    def __init__(self, wasm: wasmtime.Engine, config: dict[str, Any], fuel: bool, ticker: Ticker) -> None:
        self.wasm, self.config, self.fuel, self.ticker = wasm, config, fuel, ticker

    @property
    def cache_key(self) -> str:
        """``wasmtime-<version>-<arch>-<config digest>``: the compiled-cache key."""
        blob = json.dumps(self.config, sort_keys=True).encode()
        digest = sha256(blob).hexdigest()[:16]
        return f"wasmtime-{self.config['wasmtime']}-{self.config['arch']}-{digest}"


def get() -> Engine:
    """The one engine of this process (created on first use, thread-safe)."""
    global _engine
    eng = _engine
    if eng is not None:
        return eng
    with _lock:
        if _engine is None:
            import wasmtime

            fuel = fuel_enabled()
            cfg = wasmtime.Config()
            cfg.epoch_interruption = True
            cfg.consume_fuel = fuel
            cfg.cranelift_opt_level = "speed"
            # The c lane's setjmp/longjmp (Lua, interpreters) lowers to wasm exceptions.
            cfg.wasm_exceptions = True
            config = {
                "wasmtime": wasmtime_version(),
                "arch": os.uname().machine,  # platform.machine(), without importing platform
                "epoch_interruption": True,
                "consume_fuel": fuel,
                "opt": "speed",
                "exceptions": True,
            }
            wasm = wasmtime.Engine(cfg)
            _engine = Engine(wasm, config, fuel, Ticker(wasm))
    return _engine


# --- the per-tick guard ---------------------------------------------------------------------
#
# A guarded store's epoch deadline is one tick; when it passes, wasmtime calls _on_tick on
# the guest's own thread: past the wall-clock deadline → trap; an output file past its cap
# → trap; otherwise continue for one more tick. The reason is left on the Guard for the
# runner to turn into Timeout / LimitExceeded. Calls shorter than a tick never enter
# Python, and the deadline is wall-clock exact to a tick even when the ticker thread is
# starved on a busy machine (counting ticks alone would stretch it).


class Guard:
    __slots__ = (
        "cancel", "deadline", "err", "err_cap", "out", "out_cap", "reason", "scratch", "scratch_bytes",
        "scratch_files", "ticks",
    )

    #: A scratch folder is measured every this many ticks (a walk of its tree).
    SCRATCH_EVERY = 2

    def __init__(self, deadline: float, out: str | None = None, err: str | None = None,
                 out_cap: int = 0, err_cap: int = 0, cancel: Any = None, scratch: str | None = None,
                 scratch_bytes: int = 0, scratch_files: int = 0) -> None:
        self.deadline = deadline
        self.out, self.err = out, err
        self.out_cap, self.err_cap = out_cap, err_cap
        self.reason = ""
        self.cancel = cancel  # a threading.Event: once set, the guest stops at the next tick
        # a call's #+SCRATCH folder: its bytes and files, bounded while the guest runs
        self.scratch, self.scratch_bytes, self.scratch_files = scratch, scratch_bytes, scratch_files
        self.ticks = 0

    def check(self) -> str:
        if self.cancel is not None and self.cancel.is_set():
            return "cancelled"
        if time.perf_counter() >= self.deadline:
            return "timeout"
        if self.out is not None:
            try:
                if os.stat(self.out).st_size > self.out_cap:
                    return "stdout"
                if self.err is not None and os.stat(self.err).st_size > self.err_cap:
                    return "stderr"
            except OSError:
                pass
        if self.scratch is not None:
            self.ticks += 1
            if self.ticks % self.SCRATCH_EVERY == 0 and scratch_over(self.scratch, self.scratch_bytes,
                                                                      self.scratch_files):
                return "scratch"
        return ""


def scratch_over(folder: str, max_bytes: int, max_files: int) -> bool:
    """Whether ``folder`` holds more than ``max_bytes`` (apparent sizes: a sparse file counts
    whole) or ``max_files`` entries; the walk stops as soon as either is passed."""
    total = count = 0
    stack = [folder]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                count += 1
                if count > max_files:
                    return True
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    else:
                        total += e.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
                if total > max_bytes:
                    return True
    return False


_guards: dict[int, Guard] = {}
_guard_ids = itertools.count(1)
#: The guard of each guarded store by its context address, for host functions (which
#: see only their caller's context) to say why they stop the guest.
_by_context: dict[int, Guard] = {}
_context_of: dict[int, int] = {}


def guard_for(context_address: int) -> Guard | None:
    """The guard of the store whose context is at ``context_address`` (``None`` if unguarded)."""
    return _by_context.get(context_address)


def _make_callback() -> tuple[Any, Any]:
    import ctypes

    from wasmtime import _bindings as B

    cb_type = ctypes.CFUNCTYPE(
        ctypes.c_size_t, ctypes.POINTER(B.wasmtime_context_t), ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(B.wasmtime_update_deadline_kind_t),
    )
    error_new = B._wasmtime_error_new

    @cb_type
    def on_tick(_ctx: Any, data: Any, delta: Any, kind: Any) -> int:
        guard = _guards.get(data or 0)
        reason = guard.check() if guard is not None else ""
        if reason:
            guard.reason = reason  # type: ignore[union-attr]
            err = error_new(f"wb: {reason} limit".encode())
            return ctypes.cast(err, ctypes.c_void_p).value or 0
        delta[0] = 1
        kind[0] = 0  # WASMTIME_UPDATE_DEADLINE_CONTINUE
        return 0

    return on_tick, ctypes.cast(
        ctypes.c_void_p(), ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    )  # a NULL finalizer


_callback: tuple[Any, Any] | None = None


def attach_guard(store: Any, guard: Guard) -> int:
    """Guard ``store`` (epoch deadline one tick ahead, checked by ``guard``); returns its id
    for :func:`detach_guard`. The ticker must be running while the guest runs."""
    global _callback
    from wasmtime import _bindings as B

    if _callback is None:
        _callback = _make_callback()
    import ctypes

    gid = next(_guard_ids)
    _guards[gid] = guard
    address = ctypes.cast(store._context(), ctypes.c_void_p).value or 0
    _by_context[address] = guard
    _context_of[gid] = address
    B._wasmtime_store_epoch_deadline_callback(store.ptr(), _callback[0], gid, _callback[1])
    store.set_epoch_deadline(1)
    return gid


def detach_guard(gid: int) -> None:
    guard = _guards.pop(gid, None)
    address = _context_of.pop(gid, None)
    if address is not None and _by_context.get(address) is guard:
        del _by_context[address]


# --- the caps seam --------------------------------------------------------------------


def check_import_modules(name: str, imports: Iterable[tuple[str, str]]) -> None:
    """A guest may import only WASI preview 1 and ``wb`` (the Dock); anything else is
    ``CapabilityDenied`` naming the import — never a silent stub."""
    for module, item in imports:
        if module not in (WASI_MODULE, CAP_MODULE):
            raise CapabilityDenied(
                f"{name}: imports {module}.{item}; a guest may import only {WASI_MODULE} (stdio) and "
                f"{CAP_MODULE}.<cap> (brokered caps)")


def link_caps(linker: wasmtime.Linker, store: Any, caps: frozenset[str], principal: Principal,
              *, runtime: Runtime, module: wasmtime.Module, name: str, timeout: float | None = None,
              toolkit: str | None = None, allowed_hosts: tuple[str, ...] = ()) -> list[str]:
    """Link the ``wb.<cap>`` host imports ``module`` uses, for granted ``caps`` only.

    The seam between the engine and the Dock (``wbcore_runtime.dispatch.dock``): a per-instance
    ``DockContext`` (principal, caps, deadline, toolkit) is made and
    ``dock_link.link`` defines one host function per imported, granted cap on
    ``linker`` (which must not be shared with another call). A module importing a cap
    outside ``caps`` — with the default ``caps=frozenset()``, any cap — raises
    ``CapabilityDenied`` naming it. ``store`` is the store the instance will live in
    (unused: the host functions reach memory through their caller). Returns the
    linked caps.
    """
    from wbcore_wasmtime import dock_link

    dock = runtime.dock
    ctx = dock.context(
        principal=principal, caps=caps, timeout=timeout, toolkit=toolkit, allowed_hosts=allowed_hosts
    )
    try:
        return dock_link.link(dock, linker, module, ctx)
    except CapabilityDenied as exc:
        raise CapabilityDenied(f"{name}: {exc.message}") from None


# --- loaded modules -------------------------------------------------------------------


def wasi_linker(engine: wasmtime.Engine) -> wasmtime.Linker:
    """A linker with WASI preview 1, its ``poll_oneoff`` bounded by the store's deadline
    (:mod:`wbcore_wasmtime.wasi_poll`: a sleeping guest stops at its deadline too)."""
    import wasmtime

    from wbcore_wasmtime import wasi_poll

    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    wasi_poll.define(linker)
    return linker



class LoadedModule:
    """A compiled module, its imports, and (for modules without caps) its ``InstancePre``."""

    def __init__(self, sha: str, module: wasmtime.Module, engine: Engine) -> None:
        self.sha = sha
        self.module = module
        self.engine = engine
        self.imports: tuple[tuple[str, str], ...] = tuple((i.module, i.name or "") for i in module.imports)
        self.uses_caps = any(m == CAP_MODULE for m, _ in self.imports)
        self._pre: Any = None
        self._lock = threading.Lock()

    def instantiate(self, store: Any, *, name: str, runtime: Runtime, caps: frozenset[str],
                    principal: Principal, timeout: float | None = None, toolkit: str | None = None,
                    allowed_hosts: tuple[str, ...] = ()) -> Any:
        """A new instance in ``store``: WASI (as configured on the store) plus, when the
        module imports ``wb.*``, the granted caps linked through :func:`link_caps`."""
        check_import_modules(name, self.imports)
        if not self.uses_caps:
            return self.instance_pre(name).instantiate(store)
        linker = wasi_linker(self.engine.wasm)
        link_caps(linker, store, caps, principal, runtime=runtime, module=self.module, name=name,
                  timeout=timeout, toolkit=toolkit, allowed_hosts=allowed_hosts)
        return linker.instantiate(store, self.module)

    def instance_pre(self, name: str) -> Any:
        """The module pre-linked with WASI: built once, instantiated per call."""
        pre = self._pre
        if pre is not None:
            return pre
        with self._lock:
            if self._pre is None:
                import wasmtime

                linker = wasi_linker(self.engine.wasm)
                try:
                    self._pre = linker.instantiate_pre(self.module)
                except wasmtime.WasmtimeError as exc:
                    raise InvalidArgs(f"{name}: cannot link: {str(exc).strip()}") from None
        return self._pre


class Memo(Generic[K, V]):
    """A per-process map whose entries are made once each under a lock (a reader that finds
    its key takes no lock): the one shape of this plugin's caches of compiled forms (modules,
    component linkers). At most ``limit`` entries are kept; the oldest leaves first."""

    def __init__(self, limit: int | None = None) -> None:
        self._items: dict[K, V] = {}
        self._lock = threading.Lock()
        self._limit = limit

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The entry for ``key``, made by ``make()`` the first time (once, even when threads race)."""
        item = self._items.get(key)
        if item is not None:
            return item
        with self._lock:
            item = self._items.get(key)
            if item is None:
                item = make()
                if self._limit is not None and len(self._items) >= self._limit:
                    self._items.pop(next(iter(self._items)))
                self._items[key] = item
        return item

    def drain(self) -> list[V]:
        """Forget every entry and hand them back (to be closed)."""
        with self._lock:
            items = list(self._items.values())
            self._items.clear()
        return items


class Modules:
    """Per-process cache of loaded modules by (artifact root, sha256), artifacts verified on
    every load: the one in-memory cache of this plugin's compiled forms. ``compile_or_load``
    makes an entry (default: a core module, :func:`_compile_or_load`; the component runner
    passes its own), at most ``limit`` kept."""

    def __init__(self, compile_or_load: Any = None, limit: int = MAX_CACHED_MODULES) -> None:
        self._memo: Memo[tuple[str, str], Any] = Memo(limit)
        self._make = compile_or_load
        #: Whether the last entry made was compiled now (``False``: from the serialized cache).
        self.last_built = False

    def load(self, artifacts: Any, sha: str) -> Any:
        """The module for ``sha``; its ``.wasm`` is checked against its digest each time
        (a stat compare after the first hash), so a tampered artifact never runs."""
        artifacts.verify(sha)
        return self._memo.get(
            (str(artifacts.root), sha), lambda: (self._make or _compile_or_load)(artifacts, sha)
        )

    def clear(self) -> None:
        self._memo.drain()


def _compile_or_load(artifacts: Any, sha: str) -> LoadedModule:
    import wasmtime

    eng = get()

    def compile_(wasm: bytes) -> bytes:
        try:
            return bytes(wasmtime.Module(eng.wasm, wasm).serialize())
        except wasmtime.WasmtimeError as exc:
            raise InvalidArgs(f"artifact {sha[:12]}… is not a valid module: {exc}") from None

    def load(path: Any) -> wasmtime.Module:
        return wasmtime.Module.deserialize_file(eng.wasm, str(path))

    def loads(blob: bytes) -> wasmtime.Module:
        return wasmtime.Module.deserialize(eng.wasm, blob)

    module, _built = artifacts.compiled(sha, eng.cache_key, compile=compile_, load=load, loads=loads)
    return LoadedModule(sha, module, eng)


_modules = Modules()


def modules() -> Modules:
    return _modules


def _after_fork_in_child() -> None:
    """A forked child has no ticker thread (threads do not survive fork), so an inherited
    engine would never reach a deadline: the child starts its own engine and caches."""
    global _engine, _modules, _lock
    _engine = None
    _modules = Modules()
    _lock = threading.Lock()
    _guards.clear()
    _by_context.clear()
    _context_of.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _release_at_exit() -> None:
    """Hand this process's cached wasmtime objects back while wasmtime's FFI still exists.

    wasmtime-py frees an object in ``__del__``; at interpreter teardown its FFI functions
    are already ``None`` when the last references go, so every cached module, pre-linked
    instance and the engine printed an "Exception ignored … TypeError" in an embedder's
    process. ``atexit`` runs first: modules and pre-linked instances are closed here (the
    native objects are reference counted, so a store still using one keeps it alive). The
    engine is not freed: the epoch ticker thread holds its raw pointer until the process
    ends, so its Python handle only lets go of the pointer (the OS reclaims it)."""
    for lm in _modules._memo.drain():
        for obj in (lm._pre, lm.module):
            if obj is not None:
                obj.close()
    eng = _engine
    if eng is not None:
        consume = getattr(eng.wasm, "_consume", None)  # wasmtime-py's "take the pointer, free nothing"
        if consume is not None:
            consume()


atexit.register(_release_at_exit)


class EngineRunner:
    """What the command and kernel runners share: the process engine made when the runner
    is (so its first call pays no set-up), the call path chosen once (``fastpath.select``),
    and the engine and its module cache read per call, never kept: a forked child gets its
    own engine (:func:`_after_fork_in_child`)."""

    def __init__(self, runtime: Any) -> None:
        from wbcore_wasmtime import fastpath

        self.runtime = runtime
        get()
        self.path = fastpath.select()

    @property
    def engine(self) -> Engine:
        return get()

    @property
    def modules(self) -> Modules:
        return modules()
