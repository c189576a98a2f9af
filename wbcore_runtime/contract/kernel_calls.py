"""The records of a kernel call (seed 004 "Kernel ABI"): their own module, so a command's start-up
does not define them (each frozen record class costs ~1 ms). ``contract.calls`` holds the rest."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.calls import Principal

if TYPE_CHECKING:
    from wbcore_runtime.trust.policy import Profile

__all__ = ["KernelRequest", "KernelSpec"]


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
        return {"entry": self.entry, "in_off": self.in_off, "out_off": self.out_off,
                "timeout_s": self.timeout_s}


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
    allowed_hosts: tuple[str, ...] = ()
    tier: str = "instance"
    #: A ``threading.Event``: once set, a running call stops at the next tick (never shipped).
    cancel: Any = field(default=None, compare=False, repr=False)
