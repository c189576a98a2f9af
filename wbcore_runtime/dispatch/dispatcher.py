"""Dispatch: run one call as :mod:`wbcore_runtime.dispatch.resolve` resolved it, at its tier.

Every surface that runs a registered artifact — ``wbx run`` / ``call`` / ``kernel``, ``Runtime.call``,
MCP, ACT, the Dock's ``commands`` / ``exec`` / ``parallel``, the BuildBroker's ``run``, pipelines —
resolves it there (trust, caps, limits, tier: nothing else derives them) and runs it here with
:func:`call_command` / :func:`call_component` (kernels: :mod:`wbcore_runtime.dispatch.kernels`): the
reach check, the request a runner takes (deadline, ``#+PREOPEN``, granted mounts), the running-calls
table and the call hooks.
The fabric (``wbcore_runtime.dispatch.fabric``) resolves once per batch; its workers run that
resolution with ``tiers.target_for``. :func:`install_builtins` stores the plugins' built-ins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from wbcore_runtime.trust import policy
from wbcore_runtime.guard import preopen
from wbcore_runtime.contract import lazy
from wbcore_runtime.contract.calls import CallRecord, CallResult, CommandRequest, Principal
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, WbError
from wbcore_runtime.store.registry import RESERVED, Entry
from wbcore_runtime.dispatch.resolve import Resolved, resolve
from wbcore_runtime.dispatch.tiers import choose_tier, registry, shape_runner, target_for

if TYPE_CHECKING:
    from wbcore_runtime.trust.policy import Profile
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_runtime.dispatch import mounts as granting
else:  # imported on first use: only a call with --mount needs it, which keeps wbx start-up light
    granting = lazy.module("wbcore_runtime.dispatch.mounts")


def deadline(prof: Profile, timeout: float | None, default: float) -> float:
    """A call's deadline: ``timeout`` may shorten the profile's, never extend it."""
    if timeout is None:
        return default
    if timeout <= 0:
        raise InvalidArgs(f"timeout must be > 0 seconds, got {timeout}")
    return min(float(timeout), max(default, prof.timeout_s))


def audited(hook: Any, record: CallRecord, call: Callable[[Any], Any], arg: Any) -> Any:
    """``call(arg)`` between the call hooks (``runtime.call_hooks``): started, then finished
    with its result or with the ``WbError`` it raised — every surface that runs a call
    (``rt.call``, ``kernel_call``, the fabric's workers) audits it through this one function."""
    hook.wbcore_call_started(call=record)
    try:
        out = call(arg)
    except WbError as exc:
        hook.wbcore_call_finished(call=record, result=exc)
        raise
    hook.wbcore_call_finished(call=record, result=out)
    return out


def check_reach(resolved: Resolved, principal: Principal | None) -> None:
    """THE allowlist decision: a caller with a ``reach`` (an agent's ``:TOOLKITS:``,
    carried by its principal into every nested call) runs only commands of those toolkits
    and the reserved built-ins. Every path that runs a registered artifact for a caller
    (``call_command``, components, ``dispatch.kernels``' kernel calls) passes here."""
    if principal is None or principal.reach is None:
        return

    if resolved.trust == "built-in" and resolved.name in RESERVED:
        return
    if resolved.toolkit is not None and resolved.toolkit in principal.reach:
        return
    owner = f"toolkit {resolved.toolkit!r}" if resolved.toolkit else "no toolkit the caller lists"
    allowed = ", ".join(sorted(principal.reach)) or "(none)"
    raise refuse_reach(f"{principal}: {resolved.kind} {resolved.name!r} belongs to {owner}; "
                       f"this caller may reach only the toolkits {allowed} and the built-ins "
                       f"{', '.join(sorted(RESERVED))} (an agent "
                       "opts into more with :REACH: in its definition)")


def refuse_reach(message: str) -> CapabilityDenied:
    exc = CapabilityDenied(message)
    exc.reason = "not-in-reach"  # type: ignore[attr-defined]
    return exc


def _preopens(resolved: Resolved) -> tuple[tuple[str, str], ...]:
    """The stored ``#+PREOPEN`` trees of a toolkit's command
    (:func:`wbcore_runtime.guard.preopen.resolve_all`)."""
    if not resolved.toolkit or not resolved.entry.options.get(preopen.OPTION):
        return ()
    if resolved.home is None:
        raise InvalidArgs(f"{resolved.kind} {resolved.name!r}: resolved without a home, so its #+PREOPEN "
                          "data cannot be found in the store")
    return preopen.resolve_all(resolved.entry.options, resolved.home)


def _scratch(resolved: Resolved) -> tuple[str, int] | None:
    if not resolved.toolkit or not resolved.entry.options.get(preopen.SCRATCH_OPTION):
        return None
    return preopen.scratch_of(resolved.entry.options)


def _granted_mounts(runtime: RuntimeServices, resolved: Resolved, mounts: Sequence[Any],
                    principal: Principal | None, remote: str | None = None) -> tuple[Any, ...]:
    """The host folders a deployer grants to one call (``wbx run --mount``), by
    :func:`wbcore_runtime.dispatch.mounts.grant` with the call's resolved tier and effective caps."""
    return granting.grant(runtime, mounts, tiers=registry(runtime, "tiers"), tier=resolved.tier.name,
                          caps=resolved.caps, owner=resolved.toolkit or resolved.name,
                          what=f"{resolved.kind} {resolved.name!r}",
                          principal=str(principal or resolved.principal), remote=remote)


def command_request(resolved: Resolved, argv: Sequence[str], stdin: bytes, *,
                    principal: Principal | None = None, timeout: float | None = None, cancel: Any = None,
                    mounts: tuple[Any, ...] = ()) -> CommandRequest:
    prof = resolved.profile
    return CommandRequest(
        name=resolved.name, sha256=resolved.sha256, artifact=resolved.artifact, argv=tuple(argv),
        stdin=stdin, profile=prof, timeout_s=deadline(prof, timeout, prof.timeout_s),
        principal=principal or resolved.principal, caps=resolved.caps,
        arg_mode=resolved.entry.arg_mode, toolkit=resolved.toolkit, cancel=cancel,
        allowed_hosts=resolved.allowed_hosts, tier=resolved.tier.name,
        preopens=_preopens(resolved), scratch=_scratch(resolved), mounts=mounts,
    )


def call_command(runtime: RuntimeServices, name: str, argv: Sequence[str] = (), stdin: bytes = b"", *,
                 principal: Principal | None = None, timeout: float | None = None, cancel: Any = None,
                 tier: str | None = None, mounts: Sequence[Any] = (),
                 remote: str | None = None) -> CallResult:
    """Run the registered command ``name`` once, at its resolved tier (``mounts``: host
    folders granted to this call, ``remote`` the remote principal that asked for them:
    :func:`wbcore_runtime.dispatch.mounts.grant`)."""
    if not isinstance(stdin, bytes):
        if not isinstance(stdin, (bytearray, memoryview)):
            raise InvalidArgs(f"stdin must be bytes, got {type(stdin).__name__}")
        stdin = bytes(stdin)
    return call_resolved(runtime, resolve(runtime, "command", name, tier=tier), argv, stdin,
                         principal=principal, timeout=timeout, cancel=cancel, mounts=mounts, remote=remote)


def call_resolved(runtime: RuntimeServices, resolved: Resolved, argv: Sequence[str], stdin: bytes, *,
                  principal: Principal | None = None, timeout: float | None = None,
                  cancel: Any = None, mounts: Sequence[Any] = (), remote: str | None = None) -> CallResult:
    """Run a command already resolved by :func:`resolve` (or kept by ``wbcore_cli.runcache``
    and adopted): ``wbx run`` resolves once and calls this, never resolving again. ``mounts``:
    host folders asked for this call (``HOST[:GUEST][:ro|rw]``), granted by
    :func:`wbcore_runtime.dispatch.mounts.grant` (``remote``: who asked, when not the deployer — only inside
    ``WB_MOUNT_ROOTS``)."""
    name = resolved.name
    check_reach(resolved, principal)
    granted = _granted_mounts(runtime, resolved, mounts, principal, remote) if mounts else ()
    if argv and not isinstance(argv, tuple):
        argv = tuple(str(a) for a in argv)
    # entered in the running table: a revocation that lands while it runs cuts it off
    table = runtime.running
    n, running = table.enter(resolved, principal or resolved.principal, cancel)
    try:
        req = command_request(resolved, argv, stdin, principal=principal, timeout=timeout,
                              cancel=running.cancel, mounts=granted)
        hook = runtime.call_hooks
        try:
            if hook is None:
                out = resolved.target.call(req)
            else:
                record = CallRecord(name=name, shape=resolved.entry.shape, principal=req.principal,
                                    argv=req.argv, toolkit=resolved.toolkit, tier=resolved.tier.name,
                                    caps=resolved.caps)
                out = audited(hook, record, resolved.target.call, req)
        except WbError:
            if running.cut is not None:
                raise table.refusal(running) from None
            raise
        if running.cut is not None:
            raise table.refusal(running)
        out.usage.tier = resolved.tier.name  # every surface can say where the call ran
        return out
    finally:
        table.leave(n)


def component_fields(runtime: RuntimeServices, name: str, function: str, args: dict[str, Any], *,
                     principal: Principal | None = None, timeout: float | None = None,
                     cancel: Any = None) -> dict[str, Any]:
    """The resolved fields of one component call (``ComponentRunner.invoke(**fields)``)."""
    resolved = resolve(runtime, "component", name)
    check_reach(resolved, principal)
    prof = resolved.profile
    return {
        "name": resolved.toolkit or name, "sha256": resolved.sha256, "function": function,
        "args": dict(args),
        "profile": prof, "timeout_s": deadline(prof, timeout, prof.timeout_s),
        "principal": principal or resolved.principal, "caps": resolved.caps, "toolkit": resolved.toolkit,
        "cancel": cancel, "allowed_hosts": resolved.allowed_hosts,
    }


def call_component(runtime: RuntimeServices, name: str, function: str, args: dict[str, Any], *,
                   principal: Principal | None = None, timeout: float | None = None,
                   cancel: Any = None) -> Any:
    """Call ``function`` of the registered component ``name`` with JSON ``args``."""
    resolved = resolve(runtime, "component", name)
    fields = component_fields(runtime, name, function, args, principal=principal, timeout=timeout,
                              cancel=cancel)
    return shape_runner(runtime, resolved.entry.shape).invoke(**fields)


def call_artifact(runtime: RuntimeServices, *, name: str, sha256: str, lane: str | None, argv: Sequence[str],
                  stdin: bytes, principal: Principal, timeout: float, profile: str = "compute",
                  trust: str = "third-party",
                  caps: frozenset[str] = frozenset(), toolkit: str | None = None) -> CallResult:
    """Run an artifact that is not registered under a toolkit: the build cap's ``run``
    (no caps, trust third-party, so the tier escalates like any third-party call) and an
    agent session's own toolkits (first-party, ``caps`` already narrowed to ``profile``
    by the caller through ``wbcore_runtime.trust.consent.effective_caps``). The caller vouches that
    ``sha256`` is its own build; caps outside ``profile`` are never granted."""
    runtime.artifacts.verify(sha256)
    entry = Entry(kind="command", name=name, sha256=sha256, shape="command",
                  options={"lane": lane} if lane else {})
    prof = policy.profile(profile)
    caps = frozenset(caps) & prof.caps
    choice = choose_tier(runtime, entry, trust, caps)
    resolved = Resolved(kind="command", name=name, entry=entry, sha256=sha256,
                        artifact=runtime.artifacts.path(sha256), toolkit=toolkit, trust=trust, signer=None,
                        profile=prof, caps=caps, allowed_hosts=(), tier=choice,
                        target=target_for(runtime, entry, choice.name), home=runtime.home)
    req = command_request(resolved, tuple(argv), bytes(stdin), principal=principal, timeout=timeout)
    return resolved.target.call(req)

def install_builtins(runtime: RuntimeServices, names: list[str] | None = None, *,
                     force: bool = False) -> list[Entry]:
    """Store and register the plugins' built-in commands (all, or ``names``).

    A built-in already registered with its artifact present is left alone unless
    ``force``. Returns the entries registered now.
    """
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
            options={"summary": b.summary, "version": b.version,
                     **({"builtin_caps": list(b.caps)} if b.caps else {})},
        )))
    return done
