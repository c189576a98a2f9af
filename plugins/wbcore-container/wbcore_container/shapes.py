"""The posix shape (seed 000's escape hatch): a native CLI that runs only in the container tier."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime.contract.records import Check, ExecShape, VerifyContext

from wbcore_container import rootfs

#: The tier posix commands run in; dispatch never runs one in this process or in a tier
#: whose record does not list ``posix`` in its kinds.
TIER = "container"


def verify_posix(ctx: VerifyContext) -> Iterator[Check]:
    m = ctx.toolkit.manifest
    if not m.cli_bin:
        yield Check(False, "exec", "posix toolkits need #+CLI_BIN (a native CLI inside the container root)")
        return
    found = rootfs.resolve_cli(m.cli_bin)
    if found:
        yield Check(True, "exec", f"posix CLI {m.cli_bin!r} is in the container root at {found}")
    else:
        yield Check(False, "exec", f"posix CLI {m.cli_bin!r} is not in the container root "
                                   f"({', '.join(rootfs.ROOT_PATH)} from this host's Debian packages); "
                                   "install the package that ships it (apt-get install …)")
    tiers = [t for t in ctx.runtime.tiers if "posix" in t.kinds]
    if not tiers:
        yield Check(False, "exec",
                    f"posix commands run only in tier {TIER}, which is not installed (pip install "
                    "wbcore-container)")
        return
    for t in sorted(tiers, key=lambda t: t.rung):
        avail = t.available()
        if avail.ok:
            yield Check(True, "exec", f"runs in tier {t.name} ({avail.reason}), never in this process")
            return
    reasons = "; ".join(f"{t.name}: {t.available().reason}" for t in tiers)
    yield Check(False, "exec", f"posix commands run only in tier {TIER}, unavailable here: {reasons}")


def _runner(runtime: Any) -> Any:
    # The shape's runner is the container tier's driver: a posix command has no other way to run.
    from wbcore_container.tiers import factory

    return factory(runtime)


def shapes() -> Iterator[ExecShape]:
    yield ExecShape(
        name="posix",
        summary="a native CLI from the container root (Debian packages), run only in the container tier",
        verify=verify_posix,
        runner=_runner,
        default_tier=TIER,
        registers_commands=True,
    )
