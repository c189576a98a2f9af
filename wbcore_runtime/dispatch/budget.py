"""ByteBudget: how many more bytes a broker may gather for one answer.

The Dock checks an encoded response against ``DockContext.max_response`` only after the
broker returned; a broker that gathers rows, keys, messages, results or a body must stop
*while* it gathers, or the host holds gigabytes for the length of a deadline before the
check. Every broker that accumulates takes from one budget per call, inside the loop that
grows the answer, and the refusal is decided here, once::

    budget = ByteBudget.for_call(call, MAX_OWN, "kv.list")
    for (key,) in cursor:
        budget.take(budget.size_of(key))   # raises before the next item is read
        keys.append(key)

The sizes are the payload sizes (bytes and UTF-8 text lengths, 8 per number, 1 per
null/bool), close to the CBOR body the Dock encodes; the Dock's exact check still runs
after the broker, so the budget only has to keep memory at the cap plus one item.
"""

from __future__ import annotations

from typing import Any

from wbcore_runtime.dispatch.dock import BrokerCall, refuse
from wbcore_runtime.contract.errors import InvalidArgs


class ByteBudget:
    """At most ``cap`` bytes for one answer; :meth:`take` refuses with ``too-large``."""

    __slots__ = ("cap", "used", "what")

    def __init__(self, cap: int, what: str) -> None:
        self.cap = max(0, int(cap))
        self.used = 0
        self.what = what

    @classmethod
    def for_call(cls, call: BrokerCall, own_cap: int | None, what: str) -> ByteBudget:
        """The budget of one broker call: ``min(call.ctx.max_response, own_cap)``."""
        cap = call.ctx.max_response if own_cap is None else min(call.ctx.max_response, own_cap)
        return cls(cap, what)

    @property
    def left(self) -> int:
        """Bytes that may still be taken (never < 0)."""
        return max(0, self.cap - self.used)

    def take(self, n: int) -> None:
        """Count ``n`` more bytes; past the cap raise ``InvalidArgs`` (reason ``too-large``)
        so the caller stops before it reads the next item."""
        self.used += n
        if self.used > self.cap:
            raise refuse(InvalidArgs, "too-large",
                         f"{self.what}: the answer passed the {self.cap}-byte cap while it was gathered "
                         f"({self.used} bytes so far); stopped — "
                         "ask for less (a narrower query, a limit, a prefix)")

    @staticmethod
    def size_of(value: Any) -> int:
        """The payload size of one scalar value (bytes, text, number, null); containers
        are sized by their caller, item by item."""
        if isinstance(value, (bytes, bytearray, memoryview)):
            return len(value)
        if isinstance(value, str):
            return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
        if value is None or isinstance(value, bool):
            return 1
        return 8
