"""The shapes this plugin serves, with their verify contracts (seed 000)."""

from __future__ import annotations

from collections.abc import Iterator

from wbcore_wasmtime.runners import command_runner as _command_runner
from wbcore_wasmtime.runners import component_runner as _component_runner
from wbcore_wasmtime.runners import kernel_runner as _kernel_runner
from wbcore_runtime.plugins import sources
from wbcore_runtime.contract.records import Check, ExecShape, VerifyContext


def _buildable(ctx: VerifyContext) -> Check | None:
    """Not registered yet: whether ``wbx toolkit build`` would go ahead, by the very
    checks the build makes (``wbcore_runtime.build.buildable``), so verify and build never disagree."""
    from wbcore_runtime.build import buildable

    m = ctx.toolkit.manifest
    if not m.build_src:
        return None
    refused = buildable.refusals(ctx.runtime, m)
    if refused:
        return Check(False, "exec", "not yet built, and the build would refuse: "
                     + "; ".join(exc.message for exc in refused))
    spec = sources.parse(m.build_src, ctx.runtime.prefixes)
    if not buildable.compiles(m, spec.prefix.name):
        return Check(True, "exec", f"not yet fetched; prebuilt from {spec.text}: wbx toolkit build {m.id}")
    lane = buildable.lane(ctx.runtime, m, spec.text)
    return Check(
        True, "exec",
        f"not yet built; buildable from {spec.text} (lane {lane.name}): wbx toolkit build {m.id}",
    )


def verify_command(ctx: VerifyContext) -> Iterator[Check]:
    m = ctx.toolkit.manifest
    if not m.cli_bin:
        yield Check(False, "exec", "command toolkits need #+CLI_BIN (the registered command name)")
        return
    entry = ctx.runtime.registry.lookup("command", m.cli_bin)
    if entry is not None:
        yield Check(True, "exec", f"command {m.cli_bin!r} registered (artifact {entry.sha256[:12]}…)")
        return
    buildable = _buildable(ctx)
    if buildable is None:
        yield Check(
            False, "exec", f"command {m.cli_bin!r} not registered and no #+BUILD_SRC to build it from"
        )
    else:
        yield buildable


def kernel_name(ctx: VerifyContext) -> str:
    m = ctx.toolkit.manifest
    return m.cli_bin or m.id


def verify_kernel(ctx: VerifyContext) -> Iterator[Check]:
    name = kernel_name(ctx)
    entry = ctx.runtime.registry.lookup("kernel", name)
    if entry is not None:
        yield Check(True, "exec", f"kernel {name!r} registered (artifact {entry.sha256[:12]}…)")
        return
    buildable = _buildable(ctx)
    if buildable is None:
        yield Check(False, "exec", f"kernel {name!r} not registered and no #+BUILD_SRC to build it from")
    else:
        yield buildable


def verify_component(ctx: VerifyContext) -> Iterator[Check]:
    m = ctx.toolkit.manifest
    world = m.extra("WIT") or "wb:host/toolkit"
    name = m.cli_bin or m.id
    entry = ctx.runtime.registry.lookup("component", name)
    if entry is not None:
        yield Check(
            True, "exec", f"component {name!r} registered (WIT world {world}, artifact {entry.sha256[:12]}…)"
        )
        return
    buildable = _buildable(ctx)
    if buildable is None:
        yield Check(
            True, "exec", f"component (WIT world {world}); not registered and no #+BUILD_SRC", warning=True
        )
    else:
        yield buildable


def shapes() -> Iterator[ExecShape]:
    yield ExecShape(
        name="command",
        summary="argv + stdin → stdout + exit: a CLI compiled to a WASI module",
        verify=verify_command,
        runner=_command_runner,
        default_tier="instance",
        registers_commands=True,
    )
    yield ExecShape(
        name="kernel",
        summary="bytes → bytes, instantiated once and called in a hot loop",
        verify=verify_kernel,
        runner=_kernel_runner,
        default_tier="instance",
    )
    yield ExecShape(
        name="component",
        summary="WIT-typed component called in-process",
        verify=verify_component,
        runner=_component_runner,
        default_tier="instance",
    )
