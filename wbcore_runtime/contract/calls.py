"""The records of one call: who asked, what ran, what it cost, what came back."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.errors import Internal, Timeout
from wbcore_runtime.contract.frozen import Frozen, Record, set_fields

if TYPE_CHECKING:
    from wbcore_runtime.trust.policy import Profile


_KEYS: dict[Principal, str] = {}


class Principal(Frozen):
    """Who is calling: the key for rate limits, revocation, audit and storage.

    ``reach``: the toolkits this caller's calls may run (an agent's ``:TOOLKITS:``), or
    ``None`` for no such limit. It travels with the principal into every nested call
    (the exec brokers keep it when they name the nested toolkit), and
    ``wbcore_runtime.dispatch.dispatcher.check_reach`` decides it; it is not part of the key."""

    __slots__ = __match_args__ = ("tenant", "toolkit", "reach")
    tenant: str
    toolkit: str
    reach: frozenset[str] | None

    def __init__(self, tenant: str = "default", toolkit: str = "",
                 reach: frozenset[str] | None = None) -> None:
        set_fields(self, tenant=tenant, toolkit=toolkit, reach=reach)

    def __str__(self) -> str:
        return f"{self.tenant}/{self.toolkit}" if self.toolkit else self.tenant

    @property
    def key(self) -> str:
        """``str(self)``, computed once (the Dock keys every broker call by it)."""
        try:
            return _KEYS[self]
        except KeyError:
            if len(_KEYS) > 4096:
                _KEYS.clear()
            k = _KEYS[self] = str(self)
            return k


class Usage(Record):
    __slots__ = __match_args__ = ("wall_s", "fuel", "peak_memory", "bytes_out", "isolation", "tier")
    wall_s: float
    fuel: int | None
    peak_memory: int
    bytes_out: int
    #: How the tier isolated the call when it is worth naming (microvm: ``kvm`` or ``tcg``).
    isolation: str
    #: The tier the call ran at (set by the call path, ``dispatch.call_command``).
    tier: str

    def __init__(self, wall_s: float = 0.0, fuel: int | None = None, peak_memory: int = 0, bytes_out: int = 0,
                 isolation: str = "", tier: str = "") -> None:
        self.wall_s, self.fuel, self.peak_memory, self.bytes_out = wall_s, fuel, peak_memory, bytes_out
        self.isolation, self.tier = isolation, tier

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"wall_s": self.wall_s, "fuel": self.fuel, "peak_memory": self.peak_memory,
                               "bytes_out": self.bytes_out}
        if self.tier:
            out["tier"] = self.tier
        if self.isolation:
            out["isolation"] = self.isolation
        return out

    def describe(self) -> str:
        """One line for ``wbx run -v``: where the call ran and how it was isolated."""
        where = f"tier {self.tier or '?'}" + (f" ({self.isolation})" if self.isolation else "")
        return f"{where}, {self.wall_s * 1000:.1f} ms wall, peak memory {self.peak_memory >> 10} KiB"


#: ``CallResult``'s default ``usage``: a new :class:`Usage` each time.
_NEW_USAGE: Any = object()


class CallResult(Frozen):
    __slots__ = __match_args__ = ("stdout", "stderr", "exit_code", "usage")
    _factories = {"usage": Usage}
    stdout: bytes
    stderr: bytes
    exit_code: int
    usage: Usage

    def __init__(self, stdout: bytes, stderr: bytes, exit_code: int, usage: Usage = _NEW_USAGE) -> None:
        set_fields(self, stdout=stdout, stderr=stderr, exit_code=exit_code,
                   usage=Usage() if usage is _NEW_USAGE else usage)


class CallRecord(Frozen):
    """Handed to ``wbcore_call_started`` / ``wbcore_call_finished``."""

    __slots__ = __match_args__ = ("name", "shape", "principal", "argv", "toolkit", "tier", "caps")
    name: str
    shape: str
    principal: Principal
    argv: tuple[str, ...]
    toolkit: str | None
    #: The isolation tier the call was resolved to, and its granted caps (telemetry, audit).
    tier: str | None
    caps: frozenset[str]

    def __init__(self, name: str, shape: str, principal: Principal, argv: tuple[str, ...] = (),
                 toolkit: str | None = None, tier: str | None = None,
                 caps: frozenset[str] = frozenset()) -> None:
        set_fields(self, name=name, shape=shape, principal=principal, argv=argv, toolkit=toolkit, tier=tier,
                   caps=caps)


# --- what a shape runner is handed ----------------------------------------------------


class CommandRequest(Frozen):
    """One command call, resolved: the verified artifact, the limits, the caps.

    ``wbcore_runtime.dispatch.dispatcher`` builds it from the resolved call and hands it to the tier that
    runs it (in this process: the shape's runner, ``ExecShape.runner(runtime).call``),
    which returns a :class:`CallResult` or raises a ``WbError``.
    """

    __slots__ = __match_args__ = ("name", "sha256", "artifact", "argv", "stdin", "profile", "timeout_s",
                                  "principal", "caps", "arg_mode", "fuel", "toolkit", "cancel",
                                  "allowed_hosts", "tier", "preopens", "scratch", "mounts")
    name: str
    sha256: str
    artifact: Path
    argv: tuple[str, ...]
    stdin: bytes
    profile: Profile
    timeout_s: float
    principal: Principal
    caps: frozenset[str]
    arg_mode: str
    fuel: int | None
    toolkit: str | None
    #: A ``threading.Event``: once set (the caller cancelled), the guest stops at the next tick.
    cancel: Any
    #: ``#+ALLOWED_HOSTS`` of the toolkit as it was verified at build time.
    allowed_hosts: tuple[str, ...]
    #: The isolation tier the call was resolved to (``wbcore_runtime.dispatch.tiers.choose_tier``).
    tier: str
    #: ``(host folder, guest path)`` of each folder preopened read-only (``#+PREOPEN``,
    #: :mod:`wbcore_runtime.guard.preopen`); a runner that cannot map them all refuses the call.
    preopens: tuple[tuple[str, str], ...]
    #: ``(guest path, byte cap)`` of the call's own writable scratch folder (``#+SCRATCH``),
    #: made empty for the call and removed after it.
    scratch: tuple[str, int] | None
    #: Host folders the deployer granted to this call (``wbx run --mount``): checked
    #: ``wbcore_runtime.dispatch.mounts.Mount`` records, bound by tiers that list ``mount`` in their kinds.
    mounts: tuple[Any, ...]

    def __init__(self, name: str, sha256: str, artifact: Path, argv: tuple[str, ...], stdin: bytes,
                 profile: Profile, timeout_s: float, principal: Principal, caps: frozenset[str] = frozenset(),
                 arg_mode: str = "argv", fuel: int | None = None, toolkit: str | None = None,
                 cancel: Any = None, allowed_hosts: tuple[str, ...] = (), tier: str = "instance",
                 preopens: tuple[tuple[str, str], ...] = (),
                 scratch: tuple[str, int] | None = None, mounts: tuple[Any, ...] = ()) -> None:
        set_fields(self, name=name, sha256=sha256, artifact=artifact, argv=argv, stdin=stdin, profile=profile,
                   timeout_s=timeout_s, principal=principal, caps=caps, arg_mode=arg_mode, fuel=fuel,
                   toolkit=toolkit, cancel=cancel, allowed_hosts=allowed_hosts, tier=tier, preopens=preopens,
                   scratch=scratch, mounts=mounts)

    def guest_input(self, program: str | None = None) -> tuple[list[str], bytes]:
        """The guest's argv (``program``, default the command's name, first) and stdin: THE
        ``ARG_MODE`` rule every runner and tier applies. ``stdin1`` (seed 000: jq, grep): the
        arguments, joined by spaces, are the first stdin line and argv is the program alone."""
        prog = self.name if program is None else program
        if self.arg_mode == "stdin1" and self.argv:
            return [prog], " ".join(self.argv).encode() + b"\n" + self.stdin
        return [prog, *self.argv], self.stdin



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


#: A wasm page: the least a ``memory.grow`` can be refused.
PAGE = 65536


def near_memory_cap(peak: int, cap: int) -> bool:
    """Whether a guest that failed was plausibly refused memory: store limits make
    ``memory.grow`` return -1 without telling the host, so "within 1/16 of the cap (at
    least one page)" is the signal."""
    return peak + max(PAGE, cap // 16) > cap


def check_guest_end(req: CommandRequest, *, wall: float, stopped: str = "", over: str = "",
                    trap: str | None = None, trap_code: str = "", exit_code: int = 0, peak: int = 0,
                    fuel: int = 0) -> None:
    """Raise the error for how a wasm command's guest ended, the same at every tier that runs
    wasm (instance, os_process, container); return if it ended on its own.

    ``stopped``: ``"timeout"`` or ``"cancelled"`` when the host stopped it; ``over``: the
    stream (``stdout``/``stderr``) that passed its cap; ``trap``: the trap's text and
    ``trap_code`` its wasmtime ``TrapCode`` name (``INTERRUPT`` is the deadline's epoch,
    ``OUT_OF_FUEL`` the ``fuel`` budget); ``peak``: the guest memory's size at its end, so that a
    trap or a failing exit at the profile's memory cap is ``LimitExceeded(limit="memory")``.
    """
    name, prof = req.name, req.profile
    deadline = f"{name}: stopped after {wall:.3f} s: over its {req.timeout_s:g} s deadline"
    if stopped == "timeout":
        raise Timeout(deadline)
    if stopped == "cancelled":
        raise Timeout(f"{name}: cancelled by the caller after {wall:.3f} s; the guest was stopped")
    if over == "scratch" and req.scratch is not None:
        raise LimitExceeded(f"{name}: its #+SCRATCH folder {req.scratch[0]} passed its "
                            f"{req.scratch[1]}-byte cap "
                            "(or its file count); the guest was stopped", limit="scratch")
    if over:
        cap = prof.stdout_bytes if over == "stdout" else prof.stderr_bytes
        raise LimitExceeded(f"{name}: {over} passed the {cap}-byte cap of profile {prof.name}; "
                            "output stopped",
                            limit=over)
    if trap_code == "INTERRUPT":
        raise Timeout(deadline)
    at_memory_cap = near_memory_cap(peak, prof.memory_bytes)
    if trap is not None:
        if trap_code == "OUT_OF_FUEL":
            raise LimitExceeded(f"{name}: ran out of fuel ({fuel} units)", limit="fuel")
        if at_memory_cap:
            raise LimitExceeded(
                f"{name}: hit the {prof.memory_bytes >> 20} MiB memory limit of profile {prof.name} "
                f"(it had {peak / (1 << 20):.1f} MiB; {trap})", limit="memory")
        raise GuestTrap(f"{name}: guest trapped: {trap}")
    if exit_code != 0 and at_memory_cap:
        raise LimitExceeded(
            f"{name}: exited {exit_code} at the {prof.memory_bytes >> 20} MiB memory limit of profile "
            f"{prof.name}",
            limit="memory")


class KernelABIError(Internal):
    """A kernel broke its ABI: a missing export, or an out_len/offset outside its memory."""
