"""The human review queue of a run (seed 004 "Sessions": ``put_review`` / ``take_review``),
persisted as JSONL beside the run's steps: ``_review.jsonl`` holds every item put, in
order, and ``_review.taken`` how many were taken, so a restarted host hands out each item
once. Bounded: an item is at most 64 KiB of JSON, a queue at most 1000 items.

A person decides an item (``decide``: approve or reject, with a note of at most 4 KiB);
``_review.decisions.jsonl`` keeps each decision, once per item, and the agent reads them
with its ``review_decisions`` tool (the session also announces each as a ``review-decision``
event)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from wbcore_runtime.dispatch.dock import refuse
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.store.artifacts import atomic_write

MAX_ITEM = 64 << 10
MAX_ITEMS = 1000
MAX_NOTE = 4 << 10
DECISIONS = ("approved", "rejected")


class ReviewQueue:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._taken_path = path.with_suffix(".taken")
        self._decided_path = path.with_suffix(".decisions.jsonl")
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
            raise refuse(
                InvalidArgs, "too-large", f"review item of {len(line.encode())} bytes is over {MAX_ITEM}"
            )
        with self._lock:
            n = len(self._items())
            if n >= MAX_ITEMS:
                raise refuse(
                    InvalidArgs, "quota", f"the review queue holds {MAX_ITEMS} items; take some first"
                )
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
            atomic_write(self._taken_path, str(taken + 1).encode())
            return items[taken]

    def pending(self) -> list[dict[str, Any]]:
        with self._lock:
            return self._items()[self._taken():]

    def items(self) -> list[dict[str, Any]]:
        """Every item put, in order (a queue holds at most :data:`MAX_ITEMS`)."""
        with self._lock:
            return self._items()

    def decisions(self) -> dict[int, dict[str, Any]]:
        """Each decided item's decision, by position."""
        with self._lock:
            return self._decisions()

    def _decisions(self) -> dict[int, dict[str, Any]]:
        if not self._decided_path.exists():
            return {}
        out: dict[int, dict[str, Any]] = {}
        for line in self._decided_path.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
                out[int(d["position"])] = d
            except (ValueError, KeyError, TypeError):
                continue  # a torn line is not a decision
        return out

    def decide(self, position: int, decision: str, note: str = "", *, by: str = "reviewer") -> dict[str, Any]:
        """Record a person's decision on the item at ``position``: once per item."""
        if decision not in DECISIONS:
            raise InvalidArgs(f"decision {decision!r}: use one of {', '.join(DECISIONS)}")
        if len(note.encode()) > MAX_NOTE:
            raise refuse(
                InvalidArgs, "too-large", f"a review note of {len(note.encode())} bytes is over {MAX_NOTE}"
            )
        with self._lock:
            items = self._items()
            if not 0 <= position < len(items):
                raise InvalidArgs(f"review item {position} does not exist (the queue holds {len(items)})")
            if position in self._decisions():
                raise InvalidArgs(f"review item {position} is already decided")
            d = {"position": position, "title": items[position].get("title", ""), "decision": decision,
                 "note": note, "by": by, "t": time.time()}
            with open(self._decided_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
            return d
