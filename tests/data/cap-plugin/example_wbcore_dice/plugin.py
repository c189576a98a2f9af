"""Serves the cap ``dice``, which the core does not know: the broker declares it.

``meaning`` is what a deployer reads before granting it; ``profiles=()`` means no profile
grants it, so a toolkit gets it only through ``wbx toolkit grant <id> dice``.
"""

from __future__ import annotations

import secrets
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.contract.records import Broker

#: Bounds on one call: a guest cannot make the host draw without limit.
MAX_DICE = 64
MAX_SIDES = 255


class DiceBroker:
    """``roll``: ``{"op": "roll", "count": n, "sides": s}`` → ``{"faces": bytes}``, one byte per
    die (1..s)."""

    def handle(self, call: Any) -> Any:
        if call.op != "roll":
            raise InvalidArgs(f"dice: unknown operation {call.op!r}; known: roll")
        count = call.arg("count", int, 1)
        sides = call.arg("sides", int, 6)
        if not 1 <= count <= MAX_DICE or not 2 <= sides <= MAX_SIDES:
            raise InvalidArgs(f"dice.roll: count must be 1..{MAX_DICE} and sides 2..{MAX_SIDES}, "
                              f"got {count} and {sides}")
        return {"faces": bytes(1 + secrets.randbelow(sides) for _ in range(count))}


def _driver(runtime: Any) -> DiceBroker:
    return DiceBroker()


@hookimpl
def wbcore_brokers():
    yield Broker(name="dice", summary="dice rolls from the host's random source", factory=_driver,
                 operations=("roll",), meaning="roll dice with the host's random source", profiles=())
