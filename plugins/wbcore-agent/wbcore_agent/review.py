"""The human review queue of a run (seed 004 "Sessions": ``put_review`` / ``take_review``),
persisted as JSONL beside the run's steps: ``_review.jsonl`` holds every item put, in
order, and ``_review.taken`` how many were taken, so a restarted host hands out each item
once. Bounded: an item is at most 64 KiB of JSON, a queue at most 1000 items."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from wbcore_runtime.dispatch.dock import refuse
from wbcore_runtime.contract.errors import InvalidArgs

MAX_ITEM = 64 << 10
MAX_ITEMS = 1000


class ReviewQueue:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._taken_path = path.with_suffix(".taken")
        self._lock = threading.Lock()

    def _items(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line torn by a crash mid-write is not an item
        return out

    def _taken(self) -> int:
        try:
            return int(self._taken_path.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def put(self, item: dict[str, Any]) -> int:
        """Append one item; returns its position (0-based)."""
        line = json.dumps({**item, "t": time.time()}, ensure_ascii=False)
        if len(line.encode()) > MAX_ITEM:
            raise refuse(InvalidArgs, "too-large", f"review item of {len(line.encode())} bytes is over {MAX_ITEM}")
        with self._lock:
            n = len(self._items())
            if n >= MAX_ITEMS:
                raise refuse(InvalidArgs, "quota", f"the review queue holds {MAX_ITEMS} items; take some first")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())
            return n

    def take(self) -> dict[str, Any] | None:
        """The oldest item not yet taken, or ``None``."""
        with self._lock:
            items, taken = self._items(), self._taken()
            if taken >= len(items):
                return None
            tmp = self._taken_path.with_suffix(".tmp")
            tmp.write_text(str(taken + 1))
            os.replace(tmp, self._taken_path)
            return items[taken]

    def pending(self) -> list[dict[str, Any]]:
        with self._lock:
            return self._items()[self._taken():]
