"""The records of one call: who asked, what ran, what it cost, what came back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wbcore.errors import Internal

if TYPE_CHECKING:
    from wbcore.policy import Profile


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key for rate limits, revocation, audit and storage."""

    tenant: str = "default"
    toolkit: str = ""

    def __str__(self) -> str:
        return f"{self.tenant}/{self.toolkit}" if self.toolkit else self.tenant


@dataclass(slots=True)
class Usage:
    wall_s: float = 0.0
    fuel: int | None = None
    peak_memory: int = 0
    bytes_out: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"wall_s": self.wall_s, "fuel": self.fuel, "peak_memory": self.peak_memory, "bytes_out": self.bytes_out}


@dataclass(frozen=True, slots=True)
class CallResult:
    stdout: bytes
    stderr: bytes
    exit_code: int
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True)
class CallRecord:
    """Handed to ``wbcore_call_started`` / ``wbcore_call_finished``."""

    name: str
    shape: str
    principal: Principal
    argv: tuple[str, ...] = ()
    toolkit: str | None = None


# --- what a shape runner is handed ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommandRequest:
    """One command call, resolved: the verified artifact, the limits, the caps.

    ``Runtime.call`` builds it from the registry entry and hands it to the shape's
    runner (``ExecShape.runner(runtime).call(request)``), which returns a
    :class:`CallResult` or raises a ``WbError``.
    """

    name: str
    sha256: str
    artifact: Path
    argv: tuple[str, ...]
    stdin: bytes
    profile: Profile
    timeout_s: float
    principal: Principal
    caps: frozenset[str] = frozenset()
    arg_mode: str = "argv"
    fuel: int | None = None
    toolkit: str | None = None
    #: A ``threading.Event``: once set (the caller cancelled), the guest stops at the next tick.
    cancel: Any = None


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """A kernel's ABI (seed 004 "Kernel ABI"): ``entry(in_len) -> out_len`` over a fixed
    arena, input written at ``in_off``, output read at ``out_off``."""

    entry: str = "process"
    in_off: int = 1024
    out_off: int = 65536
    timeout_s: float = 60.0

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> KernelSpec:
        d = cls()
        return cls(
            entry=str(options.get("entry", d.entry)),
            in_off=int(options.get("in_off", d.in_off)),
            out_off=int(options.get("out_off", d.out_off)),
            timeout_s=float(options.get("timeout_s", d.timeout_s)),
        )

    def as_options(self) -> dict[str, Any]:
        return {"entry": self.entry, "in_off": self.in_off, "out_off": self.out_off, "timeout_s": self.timeout_s}


@dataclass(frozen=True, slots=True)
class KernelRequest:
    """Open one kernel instance (instantiated once, then called many times)."""

    name: str
    sha256: str
    artifact: Path
    spec: KernelSpec
    profile: Profile
    principal: Principal
    caps: frozenset[str] = frozenset()
    toolkit: str | None = None


# --- how a call can end, besides its own exit code ----------------------------------


class LimitExceeded(Internal):
    """A profile limit ended the call (memory, stdout, stderr, fuel). ``limit`` names it."""

    limit: str = "limit"

    def __init__(self, message: str, *, limit: str | None = None) -> None:
        super().__init__(message)
        if limit is not None:
            self.limit = limit


class GuestTrap(Internal):
    """The guest trapped (unreachable, out-of-bounds access, stack overflow ...)."""


class KernelABIError(Internal):
    """A kernel broke its ABI: a missing export, or an out_len/offset outside its memory."""


# --- dispatch: what Runtime.call / Runtime.kernel do ---------------------------------
#
# The runtime resolves a registry entry into a request (artifact, profile, caps,
# deadline), fires the lifecycle hooks, and hands the request to the runner of the
# entry's shape. Runners are built once per runtime and shape.


def _runner(runtime: Any, shape: str) -> Any:
    cache = runtime.__dict__.setdefault("_wb_runners", {})
    runner = cache.get(shape)
    if runner is None:
        record = runtime.shapes.get(shape)
        if record.runner is None:
            from wbcore.errors import InvalidArgs

            raise InvalidArgs(f"shape {shape!r} has no runner (it is discovery-only)")
        runner = cache[shape] = record.runner(runtime)
    return runner


def runner_for(runtime: Any, entry: Any) -> Any:
    """The runner of a registry entry: its lane's runner when the entry was built by a
    compile-and-run lane (``BuildLane.runner``, e.g. js: the artifact is an interpreter
    plus sources), else its shape's runner."""
    lane = entry.options.get("lane") if entry.options else None
    if lane:
        cache = runtime.__dict__.setdefault("_wb_runners", {})
        key = ("lane", lane)
        runner = cache.get(key)
        if runner is None and lane in runtime.lanes:
            factory = getattr(runtime.lanes.get(lane), "runner", None)
            if factory is not None:
                runner = cache[key] = factory(runtime)
        if runner is not None:
            return runner
    return _runner(runtime, entry.shape)


def entry_for(runtime: Any, kind: str, name: str) -> Any:
    from wbcore.errors import NotFound, unknown_name
    from wbcore.registry import RESERVED

    if kind == "command" and name in RESERVED:
        checked = runtime.__dict__.setdefault("_wb_builtins_checked", set())
        if name not in checked:
            install_builtins(runtime, [name])  # registers it, or refreshes a stale version
            checked.add(name)
    entry = runtime.registry.lookup(kind, name)
    if entry is None:
        hint = "" if kind != "command" else " (build its toolkit: wbx toolkit build <id>)"
        raise NotFound(unknown_name(kind, name, runtime.registry.names(kind)) + hint)
    return entry


def _check_pin(runtime: Any, entry: Any) -> None:
    """``#+SHA256`` is checked before a run: a toolkit that pins a digest runs only that."""
    from wbcore.artifacts import IntegrityError

    pin = entry.options.get("pinned")
    if not pin or not entry.toolkit:
        return
    try:
        current = runtime.toolkit(entry.toolkit).manifest.sha256
    except Exception:  # noqa: BLE001 - a vanished toolkit keeps its recorded pin
        current = pin
    if current and current != entry.sha256:
        raise IntegrityError(
            f"{entry.kind} {entry.name!r}: toolkit {entry.toolkit} pins #+SHA256 {current[:12]}… but the "
            f"registered artifact is {entry.sha256[:12]}…; unavailable until rebuilt")


def _caps(runtime: Any, entry: Any) -> frozenset[str]:
    if entry.builtin:
        # A built-in's caps come from its plugin's record, bounded by its profile.
        from wbcore import policy

        return frozenset(entry.options.get("builtin_caps", ())) & policy.profile(entry.profile).caps
    if not entry.options.get("caps") or not entry.toolkit:
        return frozenset()
    try:
        return frozenset(runtime.effective_caps(runtime.toolkit(entry.toolkit)))
    except Exception:  # noqa: BLE001 - a toolkit that cannot be read grants nothing (fail closed)
        return frozenset()


def _deadline(prof: Profile, timeout: float | None, default: float) -> float:
    from wbcore.errors import InvalidArgs

    if timeout is None:
        return default
    if timeout <= 0:
        raise InvalidArgs(f"timeout must be > 0 seconds, got {timeout}")
    # A caller may shorten the deadline, never extend it past the profile's.
    return min(float(timeout), max(default, prof.timeout_s))


def call_command(runtime: Any, name: str, argv: tuple[str, ...] | list[str], stdin: bytes, *,
                 principal: Principal | None = None, timeout: float | None = None, cancel: Any = None) -> CallResult:
    from wbcore import policy
    from wbcore.errors import InvalidArgs, WbError

    if not isinstance(stdin, (bytes, bytearray, memoryview)):
        raise InvalidArgs(f"stdin must be bytes, got {type(stdin).__name__}")
    entry = entry_for(runtime, "command", name)
    _check_pin(runtime, entry)
    prof = policy.profile(entry.profile)
    who = principal or Principal(toolkit=entry.toolkit or "")
    argv = tuple(str(a) for a in argv)
    req = CommandRequest(
        name=name, sha256=entry.sha256, artifact=runtime.artifacts.path(entry.sha256), argv=argv,
        stdin=bytes(stdin), profile=prof, timeout_s=_deadline(prof, timeout, prof.timeout_s), principal=who,
        caps=_caps(runtime, entry), arg_mode=entry.arg_mode, toolkit=entry.toolkit, cancel=cancel,
    )
    record = CallRecord(name=name, shape=entry.shape, principal=who, argv=argv, toolkit=entry.toolkit)
    hook = runtime.hook
    hook.wbcore_call_started(call=record)
    try:
        result = runner_for(runtime, entry).call(req)
    except WbError as exc:
        hook.wbcore_call_finished(call=record, result=exc)
        raise
    hook.wbcore_call_finished(call=record, result=result)
    return result


def kernel_request(runtime: Any, name: str, *, principal: Principal | None = None,
                   timeout: float | None = None) -> KernelRequest:
    from wbcore import policy

    entry = entry_for(runtime, "kernel", name)
    _check_pin(runtime, entry)
    prof = policy.profile(entry.profile)
    spec = KernelSpec.from_options(entry.options)
    if timeout is not None:
        spec = KernelSpec(spec.entry, spec.in_off, spec.out_off, _deadline(prof, timeout, spec.timeout_s))
    return KernelRequest(
        name=name, sha256=entry.sha256, artifact=runtime.artifacts.path(entry.sha256), spec=spec, profile=prof,
        principal=principal or Principal(toolkit=entry.toolkit or ""), caps=_caps(runtime, entry),
        toolkit=entry.toolkit,
    )


def open_kernel(runtime: Any, name: str, *, principal: Principal | None = None, timeout: float | None = None) -> Any:
    """A live kernel instance: ``inst.call(data) -> bytes``, ``inst.close()``."""
    req = kernel_request(runtime, name, principal=principal, timeout=timeout)
    entry_shape = runtime.registry.get("kernel", name).shape
    return _runner(runtime, entry_shape).open(req)


def install_builtins(runtime: Any, names: list[str] | None = None, *, force: bool = False) -> list[Any]:
    """Store and register the plugins' built-in commands (all, or ``names``).

    A built-in already registered with its artifact present is left alone unless
    ``force``. Returns the entries registered now.
    """
    from wbcore.registry import Entry

    done = []
    for b in runtime.builtins:
        if names is not None and b.name not in names:
            continue
        kind = "kernel" if b.shape == "kernel" else "command"
        have = runtime.registry.lookup(kind, b.name)
        if (have is not None and have.builtin and runtime.artifacts.has(have.sha256) and not force
                and have.options.get("version", "") == b.version):
            continue
        art = runtime.artifacts.put_bytes(b.wasm(runtime))
        done.append(runtime.registry.register(Entry(
            kind=kind, name=b.name, sha256=art.sha256, shape=b.shape, toolkit=None, arg_mode=b.arg_mode,
            profile=b.profile, builtin=True,
            options={"summary": b.summary, "version": b.version, **({"builtin_caps": list(b.caps)} if b.caps else {})},
        )))
    return done
