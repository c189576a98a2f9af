"""Kernel calls (:func:`open_kernel`, ``Runtime.kernel_call``), with the dispatcher's reach check,
deadline and call hooks; apart from it, so that ``wbx run`` never imports the kernel records."""

from __future__ import annotations

import threading
from collections.abc import Callable
from time import monotonic as _monotonic
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.calls import CallRecord, Principal
from wbcore_runtime.contract.kernel_calls import KernelRequest, KernelSpec
from wbcore_runtime.dispatch.dispatcher import audited, check_reach, deadline
from wbcore_runtime.dispatch.resolve import RECHECK_S, Resolved, resolve

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices


class KernelCalls:
    """``Runtime.kernel_call``: one open instance per (thread, name, principal, timeout),
    reopened when the name's resolution changes (rebuilt, re-granted, revoked).

    :attr:`call` is a plain function (cheaper to call than an object's ``__call__``) with
    everything the hot path reads bound as its locals."""

    def __init__(self, runtime: RuntimeServices) -> None:
        self.runtime = runtime
        self.local = threading.local()
        self.generation = runtime.registry.generation
        self.call = self._make()

    def _make(self) -> Callable[..., bytes]:
        runtime, local, gen_value, monotonic = self.runtime, self.local, self.generation.value, _monotonic
        slow = self._slow

        def kernel_call(name: str, data: bytes, *, principal: Principal | None = None,
                        timeout: float | None = None) -> bytes:
            try:
                insts = local.instances
            except AttributeError:
                insts = local.instances = {}
            hit = insts.get((name, principal, timeout))
            # The hot path of a ~2 µs call: the instance was opened for a resolution that
            # is still current (same change counter, checked within RECHECK_S; no
            # resolution made anew or forgotten since) and no hooks run.
            if (hit is not None and hit[2] == gen_value() and hit[4] == runtime.resolve_epoch
                    and monotonic() - hit[3] < RECHECK_S and runtime.call_hooks is None):
                return hit[1].call(data)
            return slow(insts, hit, name, data, principal, timeout)

        return kernel_call

    def __call__(self, name: str, data: bytes, *, principal: Principal | None = None,
                 timeout: float | None = None) -> bytes:
        return self.call(name, data, principal=principal, timeout=timeout)

    def _slow(self, insts: dict[Any, Any], hit: Any, name: str, data: bytes, principal: Principal | None,
              timeout: float | None) -> bytes:
        runtime = self.runtime
        resolved = resolve(runtime, "kernel", name)
        check_reach(resolved, principal)  # instances are kept per principal: checked once per instance
        epoch = runtime.resolve_epoch
        stamp = runtime.resolved_calls[("kernel", name, None)]
        if hit is None or hit[0] is not resolved:
            if hit is not None:
                hit[1].close()
            inst = resolved.target.open(kernel_request(resolved, principal=principal, timeout=timeout))
        else:
            inst = hit[1]
        insts[(name, principal, timeout)] = (resolved, inst, stamp[0], stamp[1], epoch)
        hook = runtime.call_hooks
        if hook is None:
            return inst.call(data)
        record = CallRecord(name=name, shape="kernel", principal=principal or resolved.principal,
                            toolkit=resolved.toolkit, tier=resolved.tier.name, caps=resolved.caps)
        return audited(hook, record, inst.call, data)


def kernel_request(resolved: Resolved, *, principal: Principal | None = None,
                   timeout: float | None = None) -> KernelRequest:
    spec = resolved.kernel or KernelSpec()
    if timeout is not None:
        spec = KernelSpec(spec.entry, spec.in_off, spec.out_off,
                          deadline(resolved.profile, timeout, spec.timeout_s))
    return KernelRequest(
        name=resolved.name, sha256=resolved.sha256, artifact=resolved.artifact, spec=spec,
        profile=resolved.profile, principal=principal or resolved.principal, caps=resolved.caps,
        toolkit=resolved.toolkit,
        allowed_hosts=resolved.allowed_hosts, tier=resolved.tier.name,
    )


def open_kernel(runtime: RuntimeServices, name: str, *, principal: Principal | None = None,
                timeout: float | None = None, tier: str | None = None) -> Any:
    """A live kernel instance: ``inst.call(data) -> bytes``, ``inst.close()``."""
    resolved = resolve(runtime, "kernel", name, tier=tier)
    check_reach(resolved, principal)
    return resolved.target.open(kernel_request(resolved, principal=principal, timeout=timeout))
