"""The audit-trail reading contract: what ``wbx audit`` and the engine ask of a reader.

The core writes the trail (``dispatch.audit``: every decision, hash-chained, signed heads);
reading it (the whole trail, its tail, a filtered page, a cursor that follows it, the check
that its chain holds) is an engine a plugin serves through ``wbcore_audit_trails``
(``wbcore-audit-trail``); a caller takes it with :func:`service`. Every operation takes the
writer (``dispatch.audit.AuditLog``) and first writes this process's queued decisions
(``log.flush()``), so a reader sees what was recorded before it. An entry is one decision as
written (a dict), or ``{"seq": None, "unparseable": …}``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from wbcore_runtime.contract.host import Choice

if TYPE_CHECKING:
    from wbcore_runtime.dispatch.audit import AuditLog

ENV_CHOICE = "WB_AUDIT_TRAIL"
NONE_INSTALLED = "no audit-trail reader is installed; pip install wbcore-audit-trail"

Entry = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Problem:
    """One place where the chain does not hold."""

    segment: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.segment}:{self.line}: {self.message}"


class Cursor(Protocol):
    """Follows the trail from a ``seq`` on, reading only what is new."""

    last: int  # the last seq read

    def pending(self) -> bool:
        """Whether there may be decisions past the cursor (one ``stat``; no read)."""
        ...

    def read(self, limit: int, max_bytes: int = 1 << 20) -> list[Entry]:
        """Up to ``limit`` decisions past the cursor (at most about ``max_bytes`` read)."""
        ...


class AuditTrail(Protocol):
    """The reading operations on the writer's log."""

    def entries(self, log: AuditLog) -> Iterator[Entry]:
        """Every written decision, oldest first (export and ``--verify``, not servers)."""
        ...

    def tail(self, log: AuditLog, n: int, *, after: int = -1) -> list[Entry]:
        """The last ``n`` decisions with ``seq > after``, oldest first."""
        ...

    def page(self, log: AuditLog, n: int, *, before: int | None = None,
             match: Callable[[Entry], bool] | None = None, scan: int = 10_000,
             contains: tuple[bytes, ...] = ()) -> tuple[list[Entry], int | None]:
        """Up to ``n`` decisions with ``seq < before``, newest first, that ``match`` keeps, looking
        at no more than ``scan`` lines; and the ``before`` of the next page (``None``: the start)."""
        ...

    def cursor(self, log: AuditLog, after: int) -> Cursor:
        """A :class:`Cursor` past ``after``."""
        ...

    def verify(self, log: AuditLog) -> list[Problem]:
        """Check the whole chain and the signed head and anchor; an empty list means it holds."""
        ...


#: ``service(runtime, name)``: the audit-trail reader to use (``contract.host.Choice``).
service: Choice[AuditTrail] = Choice(lambda r: r.audit_trails, ENV_CHOICE,
                                     ("audit-trail reader", "audit-trail readers"), NONE_INSTALLED)
