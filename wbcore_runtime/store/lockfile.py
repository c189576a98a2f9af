"""``wbx.lock``: one entry per installed toolkit (id, version, pinned source, content digest
per ``trust.signing``, trust, signer); written by ``store.journal.land``, read by ``store.install``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from wbcore_runtime.contract.errors import InvalidArgs

LOCKFILE = "wbx.lock"
LOCK_FORMAT = 1


@dataclass(frozen=True, slots=True)
class LockEntry:
    id: str
    version: str
    source: str
    digest: str
    trust: str
    signer: str | None = None
    sha256: str | None = None  # the archive's pin, for archive sources
    path: str = ""  # where inside the fetched tree the toolkit sat ("" = its root)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, "")}


def read_lock(path: Path) -> dict[str, LockEntry]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(raw)
        if data.get("format") != LOCK_FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {LOCK_FORMAT}")
        return {tid: LockEntry(id=tid, **{k: v for k, v in e.items() if k != "id"})
                for tid, e in data["toolkits"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidArgs(f"{path} is not a wbx lockfile ({exc})") from None


def lock_bytes(entries: Mapping[str, LockEntry]) -> bytes:
    data = {"format": LOCK_FORMAT, "toolkits": {tid: entries[tid].as_dict() for tid in sorted(entries)}}
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")
