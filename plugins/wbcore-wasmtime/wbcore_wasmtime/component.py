"""The ``component`` shape: a WIT-typed component called in-process (seed 000).

- **Typed calls**: every exported function (top level, or inside an exported
  interface) is a tool; JSON arguments are checked and lowered against its WIT types
  (:mod:`wbcore_wasmtime.wit_values`), the result is lifted back to JSON. A top-level
  ``result<T, E>`` that returns ``err`` is an execution error carrying ``E``.
- **WASI p2, nothing inherited**: no preopened directories, no environment, no
  network (sockets are linked but every address is denied; ``wasi:http`` is never
  linked: egress would bypass the Dock's SSRF guard, so ``net`` reaches a component only
  as ``wb:host/net``); stdout/stderr are captured and capped.
- **Caps as host interfaces** of the ``wb:host`` WIT world (``wit/wb-host.wit``): the
  interface ``wb:host/<cap>`` has ``call: func(request: list<u8>) -> result<list<u8>,
  list<u8>>`` (CBOR request ``{"op": ...}`` in, CBOR response or error map out; the same
  requests as the core-module Dock ABI, through the same cadence). It is linked only
  when the cap is granted: a component importing an ungranted one does not instantiate
  (``CapabilityDenied`` naming the cap). ``wb:host/info`` (read-only ids) is always on.
- **Limits as for commands**: store memory limits from the profile, fuel when the
  engine meters it, and a wall-clock deadline through epoch interruption. The epoch
  callback also checks the call's cancel event, so cancelling a call stops its guest
  at the next tick (``Cancelled``) while the host and other calls carry on.
- **Types-only imports** (``act:core/types``: an interface that exports only type
  definitions, no function, instance or resource) are satisfied by an empty instance:
  there is nothing to call through them, so accepting one grants nothing.
- **Async exports** (component-model async, ``async func``; every ACT tool provider
  exports them) are called through the wasmtime C API's ``wasmtime_component_func_call_async``
  and polled to completion on the calling thread (:func:`_call_async`): wasmtime-py 50
  exposes the function but wraps only the synchronous call. The same epoch deadline and
  cancel event stop the guest; a call still pending at its deadline is dropped.
  ``stream``/``future`` values cannot cross the C API (it has no value kind for them,
  and lifting one aborts the process), so an async export whose result *can* carry one
  is called in a worker process (:mod:`wbcore_wasmtime.isolated`): an answer that does is
  a clear error and only the worker stops.
- **Compiled once**: the serialized component is cached in the artifact store under
  the engine's cache key, so a second process deserializes instead of compiling
  (an 18 MB componentize-py component compiles in seconds, deserializes in ms).
"""

from __future__ import annotations

import contextvars
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.calls import Principal, Usage
from wbcore_runtime.contract.errors import (
    CapabilityDenied, Internal, InvalidArgs, NotFound, Timeout, WbError, unknown_name,
)

from wbcore_wasmtime import engine as _engine
from wbcore_wasmtime import wit_values

if TYPE_CHECKING:
    from wbcore_runtime.trust.policy import Profile
    from wbcore_runtime.runtime import Runtime

HOST_PACKAGE = "wb:host"
HOST_VERSION = "0.1.0"
HOST_IMPORT_RE = re.compile(r"^wb:host/([a-z][a-z0-9-]*)(?:@[0-9A-Za-z.+-]+)?$")
INFO_INTERFACE = "info"
#: WASI interfaces never linked: wasmtime's own HTTP stack would bypass the Dock's SSRF
#: guard, audit and rate limits. A component reaches the network through ``wb:host/net``.
WASI_REFUSED = ("wasi:http/",)
MAX_OUTPUT = 1 << 20
#: Exports that are toolchain plumbing, not tools: componentize-py's pre-initialization
#: hook (component-init), which must never be called after the component is built.
INTERNAL_EXPORTS = frozenset({("exports", "init")})
#: Import types that need a host definition; an import whose exports are all other
#: (value) types is types-only.
DEFINING_TYPES = frozenset(
    {"FuncType", "ComponentInstanceType", "ResourceType", "ModuleType", "ComponentType"}
)
#: While an async call is pending (its guest waits), the poll loop sleeps this long.
ASYNC_POLL_S = 0.0005
MAX_CACHED = 64
DEFAULT_FUEL = 10_000_000_000


class Cancelled(Timeout):
    """The caller cancelled the call; its guest was stopped at the next epoch tick."""


@dataclass(frozen=True, slots=True)
class ComponentFunction:
    """One exported function: its tool name, export path and WIT signature."""

    name: str
    export: tuple[str, ...]
    params: tuple[tuple[str, Any], ...]
    result: Any
    is_async: bool = False

    def input_schema(self) -> dict[str, Any]:
        return wit_values.params_schema(list(self.params))

    def output_schema(self) -> dict[str, Any] | None:
        return None if self.result is None else wit_values.schema(self.result)

    @property
    def isolated(self) -> bool:
        """An async export whose result can carry a stream/future: called in a worker
        process (:mod:`wbcore_wasmtime.isolated`), since lifting one aborts the process."""
        return self.is_async and self.result is not None and _has_async_value(self.result)

    @property
    def wit_signature(self) -> str:
        ps = ", ".join(f"{n}: {type(t).__name__}" for n, t in self.params)
        return f"{'/'.join(self.export)}({ps})"


@dataclass(frozen=True, slots=True)
class ComponentRequest:
    """One typed call, resolved: the artifact, the function, JSON args, limits and caps."""

    name: str
    sha256: str
    function: str
    args: Mapping[str, Any]
    profile: Profile
    timeout_s: float
    principal: Principal
    caps: frozenset[str] = frozenset()
    fuel: int | None = None
    toolkit: str | None = None
    cancel: threading.Event | None = None
    allowed_hosts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ComponentResult:
    value: Any
    stdout: bytes = b""
    stderr: bytes = b""
    usage: Usage = field(default_factory=Usage)


class ComponentError(WbError):
    """A function returned ``err(E)``: an execution error whose ``detail`` is ``E`` as JSON."""

    #: The call's output besides the error (stdout, stderr, usage), when it ran to the end.
    result: ComponentResult | None = None

    def __init__(self, message: str, detail: Any) -> None:
        super().__init__(message, kind=None)
        self.detail = detail


# --- the per-call context host functions read -----------------------------------------

_dock_ctx: contextvars.ContextVar[Any] = contextvars.ContextVar("wb_component_dock_ctx", default=None)


def _session_info(ctx: Any) -> bytes:
    import cbor2

    if ctx is None:
        return cbor2.dumps({}, canonical=True)
    return cbor2.dumps(
        {"principal": str(ctx.principal), "toolkit": ctx.toolkit, "instance": ctx.instance,
         "caps": sorted(ctx.caps)},
        canonical=True,
    )


def _cap_call(runtime: Runtime, cap: str) -> Any:
    from wasmtime.component import Variant

    def call(_store: Any, request: Any) -> Any:
        ctx = _dock_ctx.get()
        if ctx is None:  # linked but called outside a call: refuse, never act unscoped
            import cbor2

            return Variant("err", cbor2.dumps({"error": "capability-denied", "message": "no active call"}))
        status, body = runtime.dock.call_raw(ctx, cap, bytes(request))
        return Variant("ok", body) if status == 0 else Variant("err", body)

    return call


# --- loaded components ----------------------------------------------------------------


def _walk_exports(
    engine: Any, items: Mapping[str, Any], path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], Any]]:
    from wasmtime.component import ComponentInstanceType, FuncType

    for name, ext in items.items():
        ty = ext.ty
        if isinstance(ty, FuncType):
            yield path + (name,), ty
        elif isinstance(ty, ComponentInstanceType):
            yield from _walk_exports(engine, ty.exports(engine), path + (name,))


def _is_async(fty: Any) -> bool:
    from wasmtime import _ffi as ffi

    return bool(ffi.wasmtime_component_func_type_async(fty.ptr()))


def _has_async_value(ty: Any, depth: int = 0) -> bool:
    """Whether a WIT type can hold a ``stream``/``future``/``error-context`` value."""
    k = type(ty).__name__
    if k in ("StreamType", "FutureType", "ErrorContextType") or depth > 64:
        return True
    inner: list[Any] = []
    if k == "ListType":
        inner = [ty.element]
    elif k == "OptionType":
        inner = [ty.payload]
    elif k == "TupleType":
        inner = list(ty.elements)
    elif k == "RecordType":
        inner = [t for _, t in ty.fields]
    elif k == "VariantType":
        inner = [t for _, t in ty.cases if t is not None]
    elif k == "ResultType":
        inner = [t for t in (ty.ok, ty.err) if t is not None]
    return any(_has_async_value(t, depth + 1) for t in inner)


def _types_only(item: Any, engine: Any) -> bool:
    """An imported instance that exports only type definitions (nothing to link)."""
    from wasmtime.component import ComponentInstanceType

    ty = getattr(item, "ty", item)
    if not isinstance(ty, ComponentInstanceType):
        return False
    return all(type(getattr(e, "ty", e)).__name__ not in DEFINING_TYPES for e in ty.exports(engine).values())


def _short(iface: str) -> str:
    """``wb:demo/tools@0.1.0`` → ``tools``."""
    return iface.split("/")[-1].split("@")[0]


class LoadedComponent:
    """A compiled component, its typed functions, and one linker per linked cap set."""

    def __init__(self, sha: str, component: Any, engine: _engine.Engine) -> None:
        self.sha = sha
        self.component = component
        self.engine = engine
        ctype = component.type
        imported = ctype.imports(engine.wasm)
        self.imports: tuple[str, ...] = tuple(imported)
        # wasi:* is linked (or refused) by name and wb:host/* by cap: never "types-only"
        self.types_only: frozenset[str] = frozenset(
            n for n, item in imported.items()
            if not n.startswith("wasi:") and not HOST_IMPORT_RE.match(n) and _types_only(item, engine.wasm))
        found = [
            f
            for f in _walk_exports(engine.wasm, ctype.exports(engine.wasm), ())
            if f[0] not in INTERNAL_EXPORTS
        ]
        counts: dict[str, int] = {}
        for path, _ in found:
            counts[path[-1]] = counts.get(path[-1], 0) + 1
        self.functions: dict[str, ComponentFunction] = {}
        for path, fty in found:
            short = (
                path[-1] if counts[path[-1]] == 1 else ".".join([*(_short(p) for p in path[:-1]), path[-1]])
            )
            self.functions[short] = ComponentFunction(
                short, path, tuple(fty.params), fty.result, _is_async(fty)
            )
        self._indexes: dict[str, Any] = {}
        self._linkers: _engine.Memo[frozenset[str], Any] = _engine.Memo()

    def needed_caps(self, name: str, granted: frozenset[str]) -> frozenset[str]:
        """The caps this component imports, all granted; else ``CapabilityDenied`` naming one."""
        needed: dict[str, str] = {}
        for imp in self.imports:
            if imp in self.types_only:
                continue  # nothing to call through it: accepted, grants nothing
            m = HOST_IMPORT_RE.match(imp)
            if m:
                if m.group(1) != INFO_INTERFACE:
                    needed.setdefault(m.group(1), imp)
                continue
            if imp.startswith(WASI_REFUSED):
                raise CapabilityDenied(
                    f"{name}: imports {imp}; direct HTTP egress is not offered (it would bypass the SSRF "
                    f"guard): import {HOST_PACKAGE}/net and have the net cap granted"
                )
            if not imp.startswith("wasi:"):
                raise CapabilityDenied(
                    f"{name}: imports {imp}; a component may import only wasi:* (p2, nothing inherited) "
                    f"and {HOST_PACKAGE}/<cap> interfaces"
                )
        for cap in sorted(needed):
            if cap not in granted:
                shown = ", ".join(sorted(granted)) or "none"
                raise CapabilityDenied(
                    f"{name}: imports {needed[cap]} (cap {cap!r}), which is not granted (granted: {shown})"
                )
        return frozenset(needed)

    def linker(self, needed: frozenset[str], runtime: Runtime) -> Any:
        return self._linkers.get(needed, lambda: self._build_linker(needed, runtime))

    def _build_linker(self, needed: frozenset[str], runtime: Runtime) -> Any:
        from wasmtime.component import Linker

        linker = Linker(self.engine.wasm)
        linker.add_wasip2()
        host_imports = {HOST_IMPORT_RE.match(i).group(1): i for i in self.imports if HOST_IMPORT_RE.match(i)}  # type: ignore[union-attr]
        for cap in needed:
            if cap not in runtime.brokers and cap in host_imports:
                raise CapabilityDenied(
                    f"cap {cap!r} is granted but no installed broker serves it; installed: "
                    f"{', '.join(runtime.brokers.names()) or 'none'}"
                )
        # The root must be closed (``with``) before the linker instantiates anything.
        with linker.root() as root:
            for imp in sorted(self.types_only):
                with root.add_instance(imp):
                    pass  # an empty instance: the import defines types only
            for cap, imp in sorted(host_imports.items()):
                with root.add_instance(imp) as inst:
                    if cap == INFO_INTERFACE:
                        inst.add_func("session", lambda _s: _session_info(_dock_ctx.get()))
                    elif cap in needed:
                        inst.add_func("call", _cap_call(runtime, cap))
        return linker

    def export_index(self, fn: ComponentFunction) -> Any:
        idx = self._indexes.get(fn.name)
        if idx is None:
            parent = None
            for part in fn.export:
                parent = self.component.get_export_index(part, parent)
                if parent is None:
                    raise NotFound(f"component {self.sha[:12]}… has no export {'/'.join(fn.export)}")
            idx = self._indexes[fn.name] = parent
        return idx


def _compile_or_load(artifacts: Any, sha: str) -> LoadedComponent:
    import wasmtime
    from wasmtime.component import Component

    eng = _engine.get()

    def compile_(wasm: bytes) -> bytes:
        try:
            return bytes(Component(eng.wasm, wasm).serialize())
        except wasmtime.WasmtimeError as exc:
            raise InvalidArgs(
                f"artifact {sha[:12]}… is not a valid component: {str(exc).splitlines()[0]}"
            ) from None

    def load(path: Any) -> Any:
        return Component.deserialize_file(eng.wasm, str(path))

    def loads(blob: bytes) -> Any:
        return Component.deserialize(eng.wasm, blob)

    comp, built = artifacts.compiled(
        sha, "component-" + eng.cache_key, compile=compile_, load=load, loads=loads
    )
    components.last_built = built
    return LoadedComponent(sha, comp, eng)


components = _engine.Modules(_compile_or_load, MAX_CACHED)


def artifact_store(runtime: Runtime) -> Any:
    store = getattr(runtime, "artifacts", None)
    if store is None:
        from wbcore_runtime.store.artifacts import ArtifactStore

        store = ArtifactStore(runtime.home / "artifacts")
    return store


# --- the runner -----------------------------------------------------------------------


class ComponentRunner:
    """``ExecShape("component").runner(runtime)``: typed in-process calls."""

    def __init__(self, runtime: Runtime, *, isolate: bool = True) -> None:
        self.runtime = runtime
        self.isolate = isolate  # False inside the isolated worker itself

    def load(self, sha: str) -> LoadedComponent:
        return components.load(artifact_store(self.runtime), sha)

    def functions(self, sha: str) -> list[ComponentFunction]:
        return list(self.load(sha).functions.values())

    def invoke(self, **fields: Any) -> ComponentResult:
        """``call(ComponentRequest(**fields))``: for surfaces that do not import this plugin."""
        return self.call(ComponentRequest(**fields))

    def call(self, request: ComponentRequest) -> ComponentResult:
        import wasmtime

        t0 = time.perf_counter()
        loaded = self.load(request.sha256)
        fn = loaded.functions.get(request.function)
        if fn is None:
            raise NotFound(
                unknown_name(
                    f"function of component {request.name}", request.function, list(loaded.functions)
                )
            )
        args = request.args or {}
        extra = sorted(set(args) - {n for n, _ in fn.params})
        if extra:
            raise InvalidArgs(
                f"{request.name}.{fn.name}: unknown argument(s) {', '.join(extra)}; parameters: "
                f"{', '.join(n for n, _ in fn.params) or 'none'}"
            )
        missing = [n for n, _ in fn.params if n not in args]
        if missing:
            raise InvalidArgs(f"{request.name}.{fn.name}: missing argument(s) {', '.join(missing)}")
        needed = loaded.needed_caps(request.name, request.caps)
        if self.isolate and fn.isolated:
            from wbcore_wasmtime import isolated

            return isolated.call(request, artifact_store(self.runtime).root, needed)
        linker = loaded.linker(needed, self.runtime)

        eng = loaded.engine
        store = wasmtime.Store(eng.wasm)
        wasi = wasmtime.WasiConfig()
        out, err = _Capped(MAX_OUTPUT), _Capped(MAX_OUTPUT)
        wasi.stdout_custom = out
        wasi.stderr_custom = err
        store.set_wasi(wasi)
        store.set_limits(memory_size=request.profile.memory_bytes)
        if eng.fuel:
            store.set_fuel(request.fuel or DEFAULT_FUEL)

        dock_ctx = None
        if needed:
            dock_ctx = self.runtime.dock.context(
                principal=request.principal, caps=request.caps, timeout=request.timeout_s,
                allowed_hosts=request.allowed_hosts, toolkit=request.toolkit,
            )
        # The engine's one guard (wbcore_wasmtime.engine): the deadline and the cancel event,
        # checked at every epoch tick as for a command.
        watch = _engine.Guard(time.perf_counter() + request.timeout_s, cancel=request.cancel)
        guard_id = _engine.attach_guard(store, watch)
        token = _dock_ctx.set(dock_ctx)
        try:
            with eng.ticker.ticking():
                try:
                    instance = linker.instantiate(store, loaded.component)
                except wasmtime.WasmtimeError as exc:
                    raise self._trap(exc, watch, request, "instantiate") from None
                func = instance.get_func(store, loaded.export_index(fn))
                if func is None:
                    raise NotFound(f"{request.name}: export {'/'.join(fn.export)} is not a function")
                lowered = [wit_values.from_json(t, args[n], n) for n, t in fn.params]
                try:
                    raw = (
                        _call_async(func, store, fn, lowered, watch) if fn.is_async else func(store, *lowered)
                    )
                except wasmtime.WasmtimeError as exc:
                    raise self._trap(exc, watch, request, fn.name) from None
                value = None if fn.result is None else wit_values.to_json(fn.result, raw)
                if not fn.is_async:
                    try:
                        func.post_return(store)
                    except wasmtime.WasmtimeError:
                        pass  # post-return is implicit in newer component ABIs
        finally:
            _dock_ctx.reset(token)
            _engine.detach_guard(guard_id)
        usage = Usage(wall_s=time.perf_counter() - t0, bytes_out=out.size)
        if eng.fuel:
            try:
                usage.fuel = (request.fuel or DEFAULT_FUEL) - store.get_fuel()
            except wasmtime.WasmtimeError:
                pass
        if type(fn.result).__name__ == "ResultType" and isinstance(value, dict) and "err" in value:
            detail = value["err"]
            failed = ComponentError(f"{request.name}.{fn.name} returned an error: {_brief(detail)}", detail)
            failed.result = ComponentResult(value, out.value(), err.value(), usage)
            raise failed
        return ComponentResult(value, out.value(), err.value(), usage)

    def _trap(self, exc: Exception, watch: _engine.Guard, request: ComponentRequest, where: str) -> WbError:
        if watch.reason == "cancelled":
            return Cancelled(f"{request.name}: {where} cancelled by the caller; the guest was stopped")
        if watch.reason == "timeout":
            return Timeout(
                f"{request.name}: {where} exceeded its {request.timeout_s:g} s deadline; the guest was "
                "stopped"
            )
        text = str(exc)
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        if "fuel" in text:
            return Timeout(f"{request.name}: {where} ran out of fuel")
        if where == "instantiate":
            return InvalidArgs(f"{request.name}: cannot instantiate: {first}")
        return Internal(f"{request.name}: {where} trapped: {first}")


def _call_async(
    func: Any, store: Any, fn: ComponentFunction, lowered: list[Any], watch: _engine.Guard
) -> Any:
    """Call an async-lifted export through the C API and poll it to completion.

    wasmtime runs the guest's event loop inside ``wasmtime_call_future_poll``; the epoch
    callback traps it at the deadline or on cancel as for a synchronous call. A poll
    that returns "pending" means the guest waits on something only it can resolve: the
    loop sleeps briefly and stops at the deadline, dropping the future (and the guest).
    """
    from ctypes import POINTER, byref, pointer

    import wasmtime
    from wasmtime import _ffi as ffi

    params = (ffi.wasmtime_component_val_t * max(len(lowered), 1))()
    done = 0
    result = ffi.wasmtime_component_val_t()
    err = POINTER(ffi.wasmtime_error_t)()
    try:
        for (_name, ty), val in zip(fn.params, lowered, strict=True):
            ty.convert_to_c(store, val, pointer(params[done]))
            done += 1
        future = ffi.wasmtime_component_func_call_async(
            byref(func._func), store._context(), params, done,
            byref(result) if fn.result is not None else None, 1 if fn.result is not None else 0, byref(err))
        if err:
            raise wasmtime.WasmtimeError._from_ptr(err)
        try:
            while not ffi.wasmtime_call_future_poll(future):
                watch.reason = watch.reason or watch.check()
                if watch.reason:
                    raise wasmtime.WasmtimeError(f"wb: call {watch.reason} while the guest was waiting")
                time.sleep(ASYNC_POLL_S)
        finally:
            ffi.wasmtime_call_future_delete(future)
        if err:
            raise wasmtime.WasmtimeError._from_ptr(err)
        return None if fn.result is None else fn.result.convert_from_c(result)
    finally:
        for i in range(done):
            ffi.wasmtime_component_val_delete(byref(params[i]))


def _brief(value: Any) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, default=repr)
    return text if len(text) <= 200 else text[:200] + "…"


class _Capped:
    """Collects guest output up to ``cap`` bytes and drops the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.chunks: list[bytes] = []
        self.size = 0

    def __call__(self, data: bytes) -> int:
        room = self.cap - self.size
        if room > 0:
            part = bytes(data[:room])
            self.chunks.append(part)
            self.size += len(part)
        return len(data)

    def value(self) -> bytes:
        return b"".join(self.chunks)


def runner(runtime: Runtime) -> ComponentRunner:
    return ComponentRunner(runtime)
