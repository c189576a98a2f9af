"""The records of one call: who asked, what ran, what it cost, what came back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
