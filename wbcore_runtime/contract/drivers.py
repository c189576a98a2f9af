"""Below the records: what a record's factory returns (the driver Protocols) and whether a record
can run here (:class:`Availability`). The records, ``contract.llm`` and ``contract.sandbox`` import
this module; it imports none of them, so none imports another back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Availability:
    """Whether a lane or tier can run on this machine, and if not, exactly why."""

    ok: bool
    reason: str = ""

    @classmethod
    def yes(cls, detail: str = "") -> Availability:
        return cls(True, detail)

    @classmethod
    def no(cls, reason: str) -> Availability:
        return cls(False, reason)



class ShapeRunner(Protocol):
    """Runs artifacts of one EXEC shape. Returned by ``ExecShape.runner(runtime)``."""

    def call(self, request: Any) -> Any: ...


class LaneDriver(Protocol):
    """Compiles resolved source into a ``.wasm`` artifact (see ``wbcore_runtime.build``)."""

    version: str

    def build(self, request: Any) -> Any: ...


class SourceDriver(Protocol):
    """Turns a ``#+BUILD_SRC`` spec into a local source folder or prebuilt artifact."""

    def resolve(self, request: Any) -> Any: ...


class BrokerDriver(Protocol):
    """Performs one capability's operations. The Dock (``wbcore_runtime.dispatch.dock``) links the host
    import, runs the common cadence (deny, revocation, rate, caps, audit) and hands each
    admitted operation to ``handle`` (a ``wbcore_runtime.dispatch.dock.BrokerCall``); the return value is
    CBOR-encoded for the guest, a ``WbError`` becomes its status."""

    def handle(self, call: Any) -> Any: ...


class TierDriver(Protocol):
    """Runs a call at one isolation depth."""

    def call(self, request: Any) -> Any: ...


class AgentLoopDriver(Protocol):
    """The agent loop (seed 004): ``run`` drives one run to its end and returns its record;
    ``sessions`` starts runs in the background (status, live step events, review queue,
    cancel) — what the engine service serves over HTTP; ``load``/``parse`` read an agent
    definition (Org, seed 004) and ``prompt`` is its system prompt with the toolkit index,
    for a shell (``wbx agent prompt``). See docs/agents.md."""

    def run(self, agent: Any, task: str, **kw: Any) -> Any: ...
    def load(self, path: Path | str) -> Any: ...
    def parse(self, text: str, where: Path | str | None = None) -> Any: ...
    def prompt(self, agent: Any) -> str: ...

    @property
    def sessions(self) -> Any: ...
