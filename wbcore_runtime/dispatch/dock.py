"""The Dock: every capability as a brokered call, under one security cadence.

A sandboxed guest names a privileged operation; trusted host code performs it. Every
broker call passes one function, :meth:`Dock.call_raw` (bytes in, bytes out: a CBOR
request ``{"op": ..., ...}`` → ``(status, CBOR response)``), or its Python convenience
:meth:`Dock.call`, and so the same steps, in this order; each decision is audited
(allowed or denied):

1. default-deny: the cap must be in the call's effective set (profile ∩ #+CAPS ∩ grants);
2. revocation of the principal (or of one cap for it), checked on *every* call, so a
   revocation issued while a guest runs stops its next call;
3. the principal's rate limit (default 120,000 calls per 60 s, ``WB_DOCK_RATE=N/SECONDS``):
   every call counts, a malformed one too, and a principal over it leaves one audit line
   per window (a guest looping on refused calls cannot rotate the trail's history away);
4. the request size cap, the operation name, the deadline;
5. the broker itself (``DockContext.remaining()`` is its timeout); a result that arrives
   after the deadline is discarded (timeout); its CBOR response is size-capped
   (``DockContext.max_response``).

The core knows no engine. How a guest reaches ``call_raw`` is the engine's business: the
wasmtime plugin links ``wb.<cap>`` host imports (``wbcore_wasmtime.dock_link``, the ABI in
``docs/dock.md``), the js lane frames requests over WASI, a component gets a WIT
function. What the core decides for them is data: which ``wb.*`` import names a module
may link (:meth:`Dock.linkable`), what ``wb.info`` answers (:meth:`Dock.info`), and the
status a refusal gives (:meth:`Dock.deny`).
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cbor2

from wbcore_runtime.contract import cbor
from wbcore_runtime.dispatch.audit import AuditLog, digest
from wbcore_runtime.dispatch.rate import RateLimiter, rate_from_env
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import (
    CapabilityDenied,
    DiskFull,
    ErrorKind,
    Internal,
    InvalidArgs,
    NotFound,
    Timeout,
    WbError,
    disk_full_of,
    unknown_name,
)
from wbcore_runtime.store import leftovers
from wbcore_runtime.dispatch import resolve as resolution

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices

MiB = 1 << 20
#: The guest import module of the Dock ABI (one function per granted cap).
IMPORT_MODULE = "wb"
#: Import names in module ``wb`` that are not caps: always linked, grant nothing.
ALWAYS_LINKED = ("fetch", "info")
MAX_REQUEST = 64 * MiB
DEFAULT_MAX_RESPONSE = 16 * MiB

#: The status a guest sees per error kind (``-status`` is returned). 0 is success.
STATUS: dict[ErrorKind, int] = {
    ErrorKind.NOT_FOUND: 1,
    ErrorKind.INVALID_ARGS: 2,
    ErrorKind.TIMEOUT: 3,
    ErrorKind.CAPABILITY_DENIED: 4,
    ErrorKind.INTERNAL: 5,
}
KIND_OF_STATUS = {v: k for k, v in STATUS.items()}


#: The guest SDKs, one copy each: ``wb_dock.h`` (C, header-only; the C lanes bind this
#: folder as ``/wb-sdk`` and add ``-I/wb-sdk``) and ``wb_dock.js`` (the js and ts lanes add
#: it to every bundle as ``wb_dock.js``), so no toolkit ships its own.
SDK = Path(__file__).resolve().parents[1] / "sdk"
SDK_C = SDK


def sdk_digest(name: str) -> str:
    """sha256 of the SDK file ``name``: part of the lanes' version (so of the build cache key)."""
    return _sdk_digest(SDK / name)


def sdk_c_digest() -> str:
    return sdk_digest("wb_dock.h")


@functools.cache
def _sdk_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def refuse(cls: type[WbError], reason: str, message: str) -> WbError:
    """A broker refusal: an error of ``cls``'s kind with a short machine ``reason``
    (``too-large``, ``quota``, ``rate-limited``, ``depth``, ``ssrf``...)."""
    exc = cls(message)
    exc.reason = reason  # type: ignore[attr-defined]
    return exc


def request_too_large(cap: str, n: int) -> WbError:
    """The refusal of a request over :data:`MAX_REQUEST` (an engine refuses the length with
    :meth:`Dock.deny` before it copies the bytes out of a guest)."""
    return refuse(InvalidArgs, "too-large", f"{cap}: request of {n} bytes exceeds the {MAX_REQUEST}-byte cap")


def reason_of(exc: WbError) -> str:
    return getattr(exc, "reason", None) or exc.kind.value


#: The name prefix of a call's own instance (one made without a name): it carries its
#: owner process (``wbcore_runtime.store.leftovers``), and its state is released when the context goes.
EPHEMERAL_PREFIX = "call-"


@dataclass(frozen=True, slots=True, weakref_slot=True)
class DockContext:
    """What one guest instance (or one Python caller) may reach through the Dock."""

    principal: Principal
    caps: frozenset[str]
    instance: str = field(default_factory=lambda: uuid.uuid4().hex)
    depth: int = 0
    deadline: float | None = None  # time.monotonic() value
    allowed_hosts: tuple[str, ...] = ()
    max_response: int = DEFAULT_MAX_RESPONSE
    toolkit: str | None = None
    #: The principal as the audit, the rate limiter and revocation key it (``principal.key``),
    #: taken once per context: every call of it needs it twice.
    who: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "who", self.principal.key)

    def remaining(self, default: float = 30.0) -> float:
        """Seconds left before the deadline (``default`` when unbounded), never < 0."""
        if self.deadline is None:
            return default
        return max(0.0, self.deadline - time.monotonic())

    def child(self, **changes: Any) -> DockContext:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class BrokerCall:
    """One operation handed to a broker driver, after the cadence let it through."""

    dock: Dock
    ctx: DockContext
    cap: str
    op: str
    args: dict[str, Any]

    def arg(self, name: str, typ: type | tuple[type, ...], default: Any = ...) -> Any:
        """A typed argument; missing or mistyped (a NaN too: it compares false with every bound,
        so a ``timeout <= 0`` check lets it through) is invalid-args naming it."""
        if name not in self.args:
            if default is ...:
                raise InvalidArgs(f"{self.cap}.{self.op}: missing argument {name!r}")
            return default
        value = self.args[name]
        if isinstance(value, bool) and typ is int or not isinstance(value, typ):
            want = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
            raise InvalidArgs(f"{self.cap}.{self.op}: argument {name!r} must be {want}, "
                              f"got {type(value).__name__}")
        if isinstance(value, float) and value != value:
            raise InvalidArgs(f"{self.cap}.{self.op}: argument {name!r} must be a number, got NaN")
        return value

    def target(self, value: str) -> None:
        """Tell the audit what this call reached (a URL or host; redacted on write)."""
        _TARGET.value = value


_TARGET = threading.local()
_NEST = threading.local()
#: An ``#+ALLOWED_HOSTS`` entry that matches nothing.
DENY_ALL_HOSTS = "none://-:1"


@contextmanager
def nested(ctx: DockContext) -> Iterator[None]:
    """Run a nested guest (exec, run-command, parallel) under ``ctx``: contexts made on
    this thread meanwhile get ``depth = ctx.depth + 1`` and no later deadline."""
    prev = getattr(_NEST, "ctx", None)
    _NEST.ctx = ctx
    try:
        yield
    finally:
        _NEST.ctx = prev


class Dock:
    """The one place every broker call goes through. One per :class:`Runtime`."""

    def __init__(self, runtime: RuntimeServices, *, rate: tuple[int, float] | None = None,
                 audit: AuditLog | None = None) -> None:
        self.runtime = runtime
        self.audit = audit or AuditLog.for_home(runtime.home, runtime.env)
        self.limiter = RateLimiter(*(rate or rate_from_env(runtime.env)))
        self.revocations = runtime.revocations  # shared with the running-calls table
        self._drivers: dict[str, Any] = {}
        self._drivers_lock = threading.Lock()

    # --- contexts -------------------------------------------------------------------

    def context(
        self,
        *,
        principal: Principal,
        caps: Iterable[str],
        timeout: float | None = None,
        depth: int | None = None,
        allowed_hosts: Iterable[str] | None = None,
        max_response: int = DEFAULT_MAX_RESPONSE,
        toolkit: str | None = None,
        instance: str | None = None,
    ) -> DockContext:
        """A context for one guest instance. ``depth`` defaults to the nesting of the
        broker call this instance runs under (see :func:`nested`); ``allowed_hosts``
        defaults to the ``#+ALLOWED_HOSTS`` recorded when ``toolkit`` was built
        (``wbcore_runtime.dispatch.resolve.recorded_hosts``; calls pass their resolved hosts explicitly)."""
        outer = getattr(_NEST, "ctx", None)
        if depth is None:
            depth = outer.depth + 1 if outer is not None else 0
        deadline = None if timeout is None else time.monotonic() + timeout
        if outer is not None and outer.deadline is not None:
            deadline = outer.deadline if deadline is None else min(deadline, outer.deadline)
        if allowed_hosts is None:
            allowed_hosts = self._allowed_hosts(toolkit)
        ephemeral = not instance
        if not instance:
            instance = leftovers.unique(EPHEMERAL_PREFIX)
        ctx = DockContext(
            principal=principal,
            caps=frozenset(caps),
            instance=instance,
            depth=depth,
            deadline=deadline,
            allowed_hosts=tuple(allowed_hosts),
            max_response=max_response,
            toolkit=toolkit,
        )
        if ephemeral:
            # a call's own instance lives as long as its context: then the brokers drop its
            # state (the vfs database), and a killed process's is swept by the broker's start
            weakref.finalize(ctx, self.release, instance)
        return ctx

    def release(self, instance: str) -> None:
        """Drop what the opened brokers keep for ``instance`` (a driver's ``release``)."""
        for drv in list(self._drivers.values()):
            release = getattr(drv, "release", None)
            if release is not None:
                try:
                    release(instance)
                except Exception:  # noqa: BLE001 - a finalizer must not raise; the start-up sweep retries
                    pass

    def _allowed_hosts(self, toolkit: str | None) -> tuple[str, ...]:
        if not toolkit:
            return ()

        hosts = resolution.recorded_hosts(self.runtime, toolkit)
        return (DENY_ALL_HOSTS,) if hosts is None else hosts  # nothing built and verified: fail closed

    # --- revocation -----------------------------------------------------------------

    def revoke(self, principal: Principal | str, cap: str = "*", *, persist: bool = False) -> None:
        """Stop ``principal`` (every cap, or one): its next call is denied, and a call of it
        running now is cut off (``wbcore_runtime.dispatch.running``)."""
        self.revocations.revoke(str(principal), cap, persist=persist)
        self.runtime.running.sweep()

    def restore(self, principal: Principal | str, cap: str = "*") -> None:
        self.revocations.restore(str(principal), cap)

    # --- brokers --------------------------------------------------------------------

    def driver(self, cap: str) -> Any:
        drv = self._drivers.get(cap)
        if drv is None:
            with self._drivers_lock:
                drv = self._drivers.get(cap)
                if drv is None:
                    drv = self.runtime.brokers.get(cap).factory(self.runtime)
                    self._drivers[cap] = drv
        return drv

    def set_driver(self, cap: str, driver: Any) -> None:
        """Serve ``cap`` on this Dock with ``driver`` (an embedder's configured broker, e.g.
        a NetBroker with the deployer's own resolver). The cap's broker must be installed,
        and the cadence still runs in front of it."""
        self.runtime.brokers.get(cap)
        with self._drivers_lock:
            self._drivers[cap] = driver

    # --- the cadence ----------------------------------------------------------------

    def call(self, ctx: DockContext, cap: str, op: str, args: dict[str, Any] | None = None) -> Any:
        """Run one broker operation from Python under the full cadence; returns its value
        or raises the :class:`WbError` the guest would have seen as a status."""
        args = dict(args or {})
        status, body, value = self._run(ctx, cap, op, args, digest(cbor2.dumps(args, canonical=True)), 0,
                                        self.limiter.take(ctx.who))
        if status:
            raise value
        return value

    def call_raw(self, ctx: DockContext, cap: str, request: bytes) -> tuple[int, bytes]:
        """The ABI path: a CBOR request in, ``(status, CBOR body)`` out."""
        over = self.limiter.take(ctx.who)  # counted before anything is read: a malformed call counts too
        if len(request) > MAX_REQUEST:  # refused on its length alone, like the engines' refusal (deny)
            return self._refused(ctx, cap, "", request_too_large(cap, len(request)), over, len(request))
        dg = digest(request)
        try:
            try:  # plain data only: a request cannot make the host compute (contract.cbor)
                req = cbor.loads(request)
            except InvalidArgs as exc:
                raise InvalidArgs(f"{cap}: {exc.message}") from None
            if not isinstance(req, dict) or not isinstance(req.get("op"), str):
                raise InvalidArgs(f"{cap}: the request must be a CBOR map with a text 'op'")
        except WbError as exc:
            return self._refused(ctx, cap, dg, exc, over, len(request))
        except Exception as exc:  # noqa: BLE001 - a decoder failure cbor.loads does not name
            return self._refused(ctx, cap, dg,
                                 InvalidArgs(f"{cap}: request is not valid CBOR ({type(exc).__name__})"),
                                 over, len(request))
        op = req.pop("op")
        status, body, _ = self._run(ctx, cap, op, req, dg, len(request), over)
        return status, body

    def _refused(self, ctx: DockContext, cap: str, dg: str, exc: WbError, over: int,
                 nreq: int) -> tuple[int, bytes]:
        """A call refused before its operation is known: over the rate limit, that is the reason."""
        if over:
            exc = self._over_rate(ctx.who)
        return self._deny(ctx, cap, "?", dg, exc, time.perf_counter(), nreq, audit=over <= 1)[:2]

    def _over_rate(self, who: str) -> WbError:
        return refuse(CapabilityDenied, "rate-limited", f"{who} is over its rate limit of "
                      f"{self.limiter.limit} calls per {self.limiter.window:g} s")

    def _run(self, ctx: DockContext, cap: str, op: str, args: dict[str, Any], dg: str,
             nreq: int, over: int) -> tuple[int, bytes, Any]:
        tracer = self.runtime.tracer
        if tracer is None:
            return self._decide(ctx, cap, op, args, dg, nreq, over)
        # one span per broker decision, a child of the tool call (or agent step) running it
        with tracer.span("wb.broker", {"wb.cap": cap, "wb.op": op, "wb.principal": ctx.who,
                                       "wb.toolkit": ctx.toolkit or ""}) as span:
            status, body, value = self._decide(ctx, cap, op, args, dg, nreq, over)
            span.set("wb.bytes", nreq + len(body))
            if status:
                span.set("wb.reason", reason_of(value))
                span.set("wb.error", value.kind.value)
            span.set("wb.outcome", "denied" if status else "allowed")
            return status, body, value

    def _decide(self, ctx: DockContext, cap: str, op: str, args: dict[str, Any], dg: str,
                nreq: int, over: int) -> tuple[int, bytes, Any]:
        t0 = time.perf_counter()
        _TARGET.value = None
        who = ctx.who
        try:
            if cap not in ctx.caps:
                raise refuse(CapabilityDenied, "not-granted", f"cap {cap!r} is not granted to {who}; "
                             f"granted: {', '.join(sorted(ctx.caps)) or '(none)'}")
            if self.revocations.revoked(who, cap):
                raise refuse(CapabilityDenied, "revoked",
                             f"{who} is revoked for {cap!r} (wbx/Dock.restore lifts it)")
            if over:
                raise self._over_rate(who)
            if ctx.deadline is not None and time.monotonic() >= ctx.deadline:
                raise refuse(Timeout, "deadline", f"{cap}.{op}: the call's deadline has passed")
            record = self.runtime.brokers.get(cap)
            if record.operations and op not in record.operations:
                raise InvalidArgs(unknown_name(f"{cap} operation", op, record.operations))
            value = self.driver(cap).handle(BrokerCall(self, ctx, cap, op, args))
            if ctx.deadline is not None and time.monotonic() > ctx.deadline:
                # the guest was stopped (or is about to be) at its deadline: a result that
                # comes later is not delivered, and the audit says so
                raise refuse(Timeout, "deadline", f"{cap}.{op}: the broker answered after the call's "
                             "deadline; its result was discarded")
            body = cbor2.dumps(value)
            if len(body) > ctx.max_response:
                raise refuse(InvalidArgs, "too-large", f"{cap}.{op}: response of {len(body)} bytes "
                             f"exceeds the {ctx.max_response}-byte cap")
        except WbError as exc:  # past the limit's first refusal in a window, refusals are not lines
            return self._deny(ctx, cap, op, dg, exc, t0, nreq, audit=over <= 1)
        except Exception as exc:  # a broker bug: never a host crash, never a leaked secret
            full = disk_full_of(exc, f"the {cap} store")
            if full is not None:  # its own kind: the guest and the audit can tell a full disk from a bug
                return self._deny(ctx, cap, op, dg,
                                  refuse(DiskFull, "disk-full", f"{cap}.{op}: {full.message}"), t0, nreq)
            return self._deny(ctx, cap, op, dg, refuse(Internal, "broker-error",
                                                       f"{cap}.{op}: broker failed ({type(exc).__name__})"),
                              t0, nreq)
        try:
            self.audit.record(principal=who, cap=cap, op=op, args_digest=dg, outcome="allowed",
                              target=_TARGET.value, nbytes=nreq + len(body),
                              ms=(time.perf_counter() - t0) * 1000)
        except OSError as exc:  # the line stays queued in the audit; the call is not answered without it
            return self._unaudited(exc, cap, op)
        return 0, body, value

    def _unaudited(self, exc: OSError, cap: str, op: str) -> tuple[int, bytes, WbError]:
        """The answer when the audit trail cannot be written (its lines are kept in memory,
        bounded, and a ``lost`` line marks any that had to be dropped): disk-full or internal."""
        err: WbError = (disk_full_of(exc, "the audit trail")
                        or Internal(f"the audit trail cannot be written ({exc})"))
        err = refuse(type(err), "disk-full" if isinstance(err, DiskFull) else "audit-failed",
                     f"{cap}.{op}: {err.message}")
        body = cbor2.dumps({"error": err.kind.value, "reason": reason_of(err), "message": err.message})
        return STATUS[err.kind], body, err

    def _deny(self, ctx: DockContext, cap: str, op: str, dg: str, exc: WbError, t0: float,
              nreq: int, *, audit: bool = True) -> tuple[int, bytes, WbError]:
        reason = reason_of(exc)
        try:
            if audit:
                self.audit.record(principal=ctx.who, cap=cap, op=op, args_digest=dg, outcome="denied",
                                  kind=exc.kind.value, reason=reason, target=getattr(_TARGET, "value", None),
                                  nbytes=nreq, ms=(time.perf_counter() - t0) * 1000)
        except OSError as failed:
            if not isinstance(exc, DiskFull):
                return self._unaudited(failed, cap, op)
        body = cbor2.dumps({"error": exc.kind.value, "reason": reason, "message": exc.message})
        return STATUS[exc.kind], body, exc

    # --- what engines ask the core ----------------------------------------------------

    def deny(self, ctx: DockContext, cap: str, exc: WbError, *, nreq: int = 0) -> tuple[int, bytes]:
        """Refuse one call before the cadence could read it (e.g. a request outside guest
        memory): counted against the rate and audited like any denial; returns the guest's
        ``(status, error body)``."""
        return self._refused(ctx, cap, "", exc, self.limiter.take(ctx.who), nreq)

    def info(self, ctx: DockContext) -> bytes:
        """The CBOR answer of ``wb.info`` (read-only ids; grants nothing)."""
        return cbor2.dumps({"principal": str(ctx.principal), "tenant": ctx.principal.tenant,
                            "toolkit": ctx.toolkit, "instance": ctx.instance, "caps": sorted(ctx.caps),
                            "depth": ctx.depth})

    def linkable(self, names: Iterable[str], ctx: DockContext) -> list[str]:
        """The caps to link for a module importing ``wb.<name>`` for each of ``names``.

        The link-time half of default-deny, on plain import names: ``ALWAYS_LINKED`` names
        pass (and are not returned); an unknown cap or one ``ctx`` does not grant is
        :class:`CapabilityDenied` naming it; a granted cap whose broker is not installed
        is :class:`NotFound` listing the installed ones.
        """
        caps = []
        for name in names:
            if name in ALWAYS_LINKED:
                continue
            known = self.runtime.caps_universe_for((name,)).names
            if name not in known:
                raise refuse(CapabilityDenied, "unknown-cap", f"module imports {IMPORT_MODULE}.{name}: "
                             + unknown_name("cap", name, sorted(known)))
            if name not in ctx.caps:
                granted = ", ".join(sorted(ctx.caps)) or "(none)"
                raise refuse(CapabilityDenied, "not-granted",
                             f"module imports cap {name!r} ({IMPORT_MODULE}.{name}) which is not granted "
                             f"to {ctx.principal}; granted: {granted}")
            if name not in self.runtime.brokers:
                raise NotFound(f"cap {name!r} is granted but "
                               + unknown_name("cap broker", name, self.runtime.brokers.names()))
            caps.append(name)
        return caps
