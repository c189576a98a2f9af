"""The Dock's rate limit: a fixed window of calls per principal (``WB_DOCK_RATE=CALLS/SECONDS``).

Every call a guest makes is counted, a malformed one too: :meth:`RateLimiter.take` says how
far over the limit a call is, so the Dock refuses it and writes one audit line per principal
and window, not one per refusal (``wbcore_runtime.dispatch.dock``).
"""

from __future__ import annotations

import threading
import time

from wbcore_runtime.contract.errors import InvalidArgs

DEFAULT_RATE = (120_000, 60.0)
#: Past this many principals, buckets of past windows are dropped when a new one arrives.
PRUNE_AT = 4096


class RateLimiter:
    """A fixed-window counter per principal: at most ``limit`` calls per ``window`` s."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit, self.window = limit, window
        self._lock = threading.Lock()
        self._buckets: dict[str, list[int]] = {}  # key -> [window slot, calls in it], updated in place

    def take(self, key: str) -> int:
        """Count one call: 0 when it may run, else how far over the limit it is (1 = the first)."""
        slot = int(time.monotonic() // self.window)
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None or bucket[0] != slot:
                if bucket is None and len(self._buckets) >= PRUNE_AT:
                    # a bucket of a past window counts nothing: dropping it changes no answer, and
                    # a long-running server keeps only the principals of the current window
                    self._buckets = {k: b for k, b in self._buckets.items() if b[0] == slot}
                bucket = self._buckets[key] = [slot, 0]
            bucket[1] += 1
            over = bucket[1] - self.limit
        return over if over > 0 else 0


def rate_from_env(env: dict[str, str]) -> tuple[int, float]:
    """``WB_DOCK_RATE`` as ``(calls, seconds)``; unset is :data:`DEFAULT_RATE`."""
    raw = env.get("WB_DOCK_RATE", "")
    if not raw:
        return DEFAULT_RATE
    try:
        n, _, secs = raw.partition("/")
        return int(n), float(secs or 60)
    except ValueError as exc:
        raise InvalidArgs(f"WB_DOCK_RATE={raw!r}: expected CALLS/SECONDS, e.g. 120000/60") from exc
