"""The Dock's audit trail: append-only, hash-chained JSON lines under ``$WB_HOME/audit``.

Every broker decision (allowed or denied) is one line::

    {"seq": 7, "ts": 1763780000.123, "principal": "default/notes", "cap": "kv", "op": "get",
     "args": "sha256:…", "outcome": "allowed", "kind": null, "reason": null, "target": null,
     "bytes": 42, "ms": 0.08, "prev": "<hash of line 6>", "hash": "<sha256 of this line>"}

``hash = sha256(prev + canonical-json(line without "hash"))``, so editing any line breaks
its own hash and deleting one breaks the next line's ``prev`` and the ``seq`` run; a
``head`` file beside the log remembers the last ``(seq, hash)`` so deleting the *tail*
is caught as well. Arguments are never written, only their digest; ``target`` (a URL,
a host) is stripped of user-info, query and fragment first, so secrets stay out.

Appends hold an ``flock`` on the log, so several processes share one chain. The live
segment rotates at ``WB_AUDIT_MAX_BYTES`` (default 64 MiB) into ``audit-<seq>.jsonl``;
the chain runs on across segments and ``verify`` walks them in order. At most
``WB_AUDIT_KEEP`` (default 16) rotated segments are kept; pruning the oldest writes
``audit.anchor`` (its last seq and hash), where ``verify`` then starts the chain.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

GENESIS = "0" * 64
LOG_NAME = "audit.jsonl"
HEAD_NAME = "audit.head"
DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_KEEP = 16  # rotated segments kept: the trail is bounded at ~(keep + 1) x max_bytes
ANCHOR_NAME = "audit.anchor"
_HEAD_WIDTH = 96  # fixed-width head record, rewritten in place (one pwrite)


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def redact_target(target: str | None) -> str | None:
    """Keep scheme://host:port/path of a URL; drop user-info, query and fragment."""
    if not target:
        return target
    if "://" not in target:
        return target[:256]
    try:
        parts = urlsplit(target)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))[:256]
    except ValueError:
        return "<unparseable target>"


def _canonical(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _chain(prev: str, body: dict[str, Any]) -> str:
    return hashlib.sha256(prev.encode() + _canonical(body)).hexdigest()


@dataclass(frozen=True, slots=True)
class Problem:
    """One place where the chain does not hold."""

    segment: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.segment}:{self.line}: {self.message}"


class AuditLog:
    """One hash-chained log directory. Thread- and process-safe appends."""

    def __init__(self, directory: Path, *, max_bytes: int | None = None, keep: int | None = None, fsync: bool = False) -> None:
        self.dir = Path(directory)
        self.path = self.dir / LOG_NAME
        self.head_path = self.dir / HEAD_NAME
        self.anchor_path = self.dir / ANCHOR_NAME
        self.max_bytes = max_bytes or DEFAULT_MAX_BYTES
        self.keep = keep or DEFAULT_KEEP
        self.fsync = fsync
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._head_fd: int | None = None
        # What this process last wrote: lets it skip re-reading the head when alone.
        self._known: tuple[int, int, str] | None = None  # (file size, seq, hash)

    @classmethod
    def for_home(cls, home: Path, env: dict[str, str] | None = None) -> AuditLog:
        env = env if env is not None else dict(os.environ)
        max_bytes = int(env.get("WB_AUDIT_MAX_BYTES", "0") or 0) or None
        keep = int(env.get("WB_AUDIT_KEEP", "0") or 0) or None
        return cls(Path(home) / "audit", max_bytes=max_bytes, keep=keep, fsync=env.get("WB_AUDIT_FSYNC") == "1")

    # --- writing ------------------------------------------------------------------------

    def _open(self) -> int:
        if self._fd is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._head_fd = os.open(self.head_path, os.O_RDWR | os.O_CREAT, 0o600)
        return self._fd

    def _read_head(self) -> tuple[int, str]:
        assert self._head_fd is not None
        raw = os.pread(self._head_fd, _HEAD_WIDTH, 0).decode(errors="replace").split()
        if len(raw) >= 2:
            return int(raw[0]), raw[1]
        return 0, GENESIS

    def record(
        self,
        *,
        principal: str,
        cap: str,
        op: str,
        args_digest: str,
        outcome: str,
        kind: str | None = None,
        reason: str | None = None,
        target: str | None = None,
        nbytes: int = 0,
        ms: float = 0.0,
    ) -> int:
        """Append one decision; returns its sequence number."""
        with self._lock:
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_EX)
            # Another process may have rotated the log under us: follow the live file. A file
            # still at the size this process left it, below the rotation size, cannot have been.
            while not self._unchanged(fd) and not self._is_live(fd):
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                self._fd, self._known = None, None
                os.close(self._head_fd)  # type: ignore[arg-type]
                fd = self._open()
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                size = os.fstat(fd).st_size
                if self._known is not None and self._known[0] == size:
                    seq, prev = self._known[1], self._known[2]
                else:
                    seq, prev = self._read_head()
                if size >= self.max_bytes:
                    fd = self._rotate(seq)
                    size = 0
                body = {
                    "seq": seq + 1, "ts": round(time.time(), 6), "principal": principal, "cap": cap,
                    "op": op, "args": args_digest, "outcome": outcome, "kind": kind,
                    "reason": reason, "target": redact_target(target), "bytes": nbytes,
                    "ms": round(ms, 3), "prev": prev,
                }
                canon = _canonical(body)
                h = hashlib.sha256(prev.encode() + canon).hexdigest()
                # verify() re-canonicalises without "hash", so appending it keeps one encode
                line = canon[:-1] + b',"hash":"' + h.encode() + b'"}\n'
                os.write(fd, line)
                assert self._head_fd is not None
                os.pwrite(self._head_fd, f"{seq + 1} {h}".ljust(_HEAD_WIDTH - 1).encode() + b"\n", 0)
                if self.fsync:
                    os.fsync(fd)
                    os.fsync(self._head_fd)
                self._known = (size + len(line), seq + 1, h)
                return seq + 1
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _unchanged(self, fd: int) -> bool:
        return self._known is not None and self._known[0] < self.max_bytes and os.fstat(fd).st_size == self._known[0]

    def _is_live(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def _rotate(self, seq: int) -> int:
        assert self._fd is not None
        os.rename(self.path, self.dir / f"audit-{seq:012d}.jsonl")
        old = self._fd
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        fcntl.flock(old, fcntl.LOCK_UN)
        os.close(old)
        self._prune()
        return self._fd

    def _prune(self) -> None:
        """Drop the oldest rotated segments beyond ``keep``; the anchor file records where
        the retained chain starts (the last seq and hash of what was dropped)."""
        rotated = sorted(self.dir.glob("audit-*.jsonl"))
        for seg in rotated[: max(0, len(rotated) - self.keep)]:
            last = b""
            with seg.open("rb") as fh:
                for last in fh:  # noqa: B007 - the last line anchors the chain
                    pass
            try:
                entry = json.loads(last)
                anchor = f"{entry['seq']} {entry['hash']}\n"
            except (ValueError, KeyError):
                return  # an unreadable segment is evidence: keep it for verify to report
            tmp = self.anchor_path.with_suffix(".tmp")
            tmp.write_text(anchor)
            os.replace(tmp, self.anchor_path)
            seg.unlink()

    def close(self) -> None:
        with self._lock:
            for fd in (self._fd, self._head_fd):
                if fd is not None:
                    os.close(fd)
            self._fd = self._head_fd = None
            self._known = None

    # --- reading ------------------------------------------------------------------------

    def segments(self) -> list[Path]:
        rotated = sorted(self.dir.glob("audit-*.jsonl"))
        return rotated + ([self.path] if self.path.exists() else [])

    def entries(self) -> Iterator[dict[str, Any]]:
        for seg in self.segments():
            with seg.open("rb") as fh:
                for raw in fh:
                    try:
                        yield json.loads(raw)
                    except ValueError:
                        yield {"seq": None, "unparseable": raw[:120].decode(errors="replace")}

    def verify(self) -> list[Problem]:
        """Check the whole chain; an empty list means it holds."""
        problems: list[Problem] = []
        prev, seq = GENESIS, 0
        if self.anchor_path.exists():  # older segments were pruned by policy (WB_AUDIT_KEEP)
            raw = self.anchor_path.read_text().split()
            if len(raw) >= 2 and raw[0].isdigit():
                seq, prev = int(raw[0]), raw[1]
        for seg in self.segments():
            with seg.open("rb") as fh:
                for n, raw in enumerate(fh, 1):
                    where = seg.name
                    try:
                        entry = json.loads(raw)
                        claimed = entry.pop("hash")
                    except (ValueError, KeyError, AttributeError):
                        problems.append(Problem(where, n, "unparseable line"))
                        continue
                    if entry.get("seq") != seq + 1:
                        problems.append(Problem(where, n, f"sequence jumps from {seq} to {entry.get('seq')} (line(s) deleted or reordered)"))
                    if entry.get("prev") != prev:
                        problems.append(Problem(where, n, "prev does not match the preceding line's hash (a line was deleted or edited)"))
                    if _chain(entry.get("prev", ""), entry) != claimed:
                        problems.append(Problem(where, n, "hash does not match the line's content (the line was edited)"))
                    prev, seq = claimed, entry.get("seq") if isinstance(entry.get("seq"), int) else seq + 1
        if self.head_path.exists():
            raw = self.head_path.read_text().split()
            if len(raw) >= 2 and (int(raw[0]) != seq or raw[1] != prev):
                problems.append(Problem(HEAD_NAME, 1, f"head records seq {raw[0]} but the log ends at seq {seq} (the tail was deleted or edited)"))
        return problems
