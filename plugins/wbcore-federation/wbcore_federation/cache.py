"""The page cache of a source: ``#+CACHE_TTL`` seconds fresh, then revalidated with its ETag.

One file per page URL under ``$WB_HOME/federation/cache/<tenant>/<toolkit>/`` (mode 0600,
written atomically), named by the sha256 of the URL and the auth *scheme and name* — never
of a secret's value, which this code does not hold. A page is stored only as the bytes the
source sent (already capped while they streamed), with its ``ETag`` and ``Link``.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from wbcore_runtime.store.artifacts import atomic_write

MAX_ENTRY = 16 << 20


@dataclass(frozen=True, slots=True)
class Entry:
    etag: str
    link: str
    stored_at: float
    body: bytes


class PageCache:
    def __init__(self, root: Path, ttl: int, identity: str) -> None:
        self.root = root
        self.ttl = ttl
        self.identity = identity

    def _path(self, url: str) -> Path:
        return self.root / (hashlib.sha256(f"{self.identity}\n{url}".encode()).hexdigest() + ".json")

    def get(self, url: str) -> Entry | None:
        p = self._path(url)
        try:
            if p.is_symlink() or p.stat().st_size > MAX_ENTRY:
                return None
            doc = json.loads(p.read_bytes())
            return Entry(
                str(doc["etag"]), str(doc["link"]), float(doc["stored_at"]), doc["body"].encode("utf-8")
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError, UnicodeError):
            return None  # absent or unreadable: fetched again, and rewritten

    def fresh(self, entry: Entry) -> bool:
        return 0 <= time.time() - entry.stored_at < self.ttl

    def put(self, url: str, *, etag: str, link: str, body: bytes) -> None:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = json.dumps({"etag": etag, "link": link, "stored_at": time.time(), "body": text}).encode()
        atomic_write(self._path(url), data, mode=0o600, tmp_dir=self.root)

    def refresh(self, url: str, entry: Entry) -> None:
        self.put(url, etag=entry.etag, link=entry.link, body=entry.body)
