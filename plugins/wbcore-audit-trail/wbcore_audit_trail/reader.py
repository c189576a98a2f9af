"""Reading the audit trail the core writes (``wbcore_runtime.dispatch.audit``): the whole trail,
its tail, a filtered page, a cursor that follows it as it grows, and the check that its chain
holds. Served as ``contract.audit_trail.AuditTrail`` (:func:`service`); the file names, the
signed head's message, a segment's seq and the chain's hash are the writer's own, never a copy.

Every reader first writes this process's queued decisions (``log.flush()``), so a reader
sees what was recorded before it. The trail's live segment may end in an unterminated line
(a writer killed mid-append, never acknowledged): readers skip it and :func:`verify` does
not count it part of the chain. :func:`tail`, :func:`page` and :class:`AuditCursor` read in
blocks from where they need to be (the end, or the offset they reached), so a read of a
trail of any size costs a block plus the lines it returns; :func:`entries` and
:func:`verify` walk the whole trail (export and ``wbx audit --verify``, not servers).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from wbcore_runtime.contract.audit_trail import AuditTrail, Problem
from wbcore_runtime.contract.host import RuntimeServices
from wbcore_runtime.dispatch.audit import (ANCHOR_DOMAIN, ANCHOR_NAME, GENESIS, HEAD_DOMAIN, HEAD_NAME,
                                           AuditLog, chain_hash, segment_seq, signed_message)
from wbcore_runtime.trust import identity

_SEQ = re.compile(rb'"seq":(\d+)')
_READ_BLOCK = 64 << 10
#: A line longer than this is not a decision the Dock wrote: it is reported, not held.
MAX_LINE = 1 << 20


def _parse(raw: bytes) -> dict[str, Any]:
    try:
        entry = json.loads(raw)
    except (ValueError, RecursionError):
        entry = None
    if not isinstance(entry, dict):
        return {"seq": None, "unparseable": raw[:120].decode(errors="replace")}
    return entry


def _line_seq(raw: bytes) -> int | None:
    # The key is written unescaped exactly once per line; inside a string it would read \"seq\"
    m = _SEQ.search(raw)
    return int(m.group(1)) if m else None


def _lines_backward(path: Path, *, live: bool) -> Iterator[bytes]:
    """The complete lines of ``path``, last first, read in blocks from the end (a torn last
    line of the live segment is skipped; a line over :data:`MAX_LINE` is cut to its end)."""
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return
    with fh:
        pos, carry, final = fh.seek(0, os.SEEK_END), b"", True

        def pieces() -> Iterator[bytes]:
            nonlocal pos, carry
            while pos > 0:
                step = min(_READ_BLOCK, pos)
                pos -= step
                fh.seek(pos)
                lines = (fh.read(step) + carry).split(b"\n")
                carry = lines[0][-MAX_LINE:]
                yield from reversed(lines[1:])
            yield carry

        for piece in pieces():
            if final:  # the text after the file's last newline: empty, or a torn append
                final = False
                if not piece or live:
                    continue
            if piece:
                yield piece


class AuditCursor:
    """Follows the trail from a ``seq`` on, reading only what is new: it keeps the file and
    offset it reached and checks with one ``stat`` whether the live segment grew; a rotation
    (the live file's inode changed) is followed by locating its seq again."""

    def __init__(self, log: AuditLog, after: int) -> None:
        self.log = log
        self.last = after
        self._path: Path | None = None
        self._ino = 0
        self._offset = 0
        self._idle: tuple[int, int] = (-1, -1)  # the live file's (inode, size) when nothing was found

    def pending(self) -> bool:
        """Whether there may be decisions past the cursor (one ``stat``; no read)."""
        if self._path is not None and self._path != self.log.path:
            return True  # inside a rotated segment: read on
        try:
            st = os.stat(self.log.path)
        except FileNotFoundError:
            return False
        if self._path is None:  # nothing located yet: only a live file that changed may hold more
            return (st.st_ino, st.st_size) != self._idle
        return st.st_ino != self._ino or st.st_size > self._offset

    def read(self, limit: int, max_bytes: int = 1 << 20) -> list[dict[str, Any]]:
        """Up to ``limit`` decisions past the cursor (at most about ``max_bytes`` read)."""
        self.log.flush()
        out: list[dict[str, Any]] = []
        for _ in range(len(self.log.segments()) + 2):  # at most one move per segment
            if self._path is None and not self._locate():
                return out
            assert self._path is not None
            try:
                fh = self._path.open("rb")
            except FileNotFoundError:
                self._path = None
                continue
            with fh:
                st = os.fstat(fh.fileno())
                if st.st_ino != self._ino:  # rotated or replaced since: find the seq again
                    self._path = None
                    continue
                fh.seek(self._offset)
                buf = fh.read(min(max_bytes, max(0, st.st_size - self._offset)))
            complete = buf[: buf.rfind(b"\n") + 1]
            if not complete and len(buf) >= max_bytes:
                # one line longer than a read: not a line the Dock wrote; report it and move past it
                out.append(_parse(buf))
                self._offset += len(buf)
                return out
            for raw in complete.splitlines():
                self._offset += len(raw) + 1
                if not raw:
                    continue
                entry = _parse(raw)
                seq = entry.get("seq")
                if isinstance(seq, int):
                    if seq <= self.last:
                        continue
                    self.last = seq
                out.append(entry)
                if len(out) >= limit:
                    return out
            if complete or self._path == self.log.path:
                return out
            self._path = None  # the end of a rotated segment: on to the next
        return out

    def _locate(self) -> bool:
        """Point at the first line with ``seq > last``: the first segment that holds one
        (rotated segments are named after their last seq), skipping whole blocks whose last
        line is not past it."""
        for seg in self.log.segments():
            if seg != self.log.path:
                last = segment_seq(seg)
                if last is None or last <= self.last:
                    continue
            try:
                fh = seg.open("rb")
            except FileNotFoundError:
                continue
            with fh:
                self._path, self._ino, self._offset = seg, os.fstat(fh.fileno()).st_ino, 0
                while True:
                    fh.seek(self._offset)
                    buf = fh.read(_READ_BLOCK * 16)
                    cut = buf.rfind(b"\n")
                    if cut < 0:
                        return True
                    last_line = buf[buf.rfind(b"\n", 0, cut) + 1: cut]
                    seq = _line_seq(last_line)
                    if seq is None or seq > self.last:
                        return True  # the next read walks this block line by line
                    self._offset += cut + 1
        self._path = None
        try:
            st = os.stat(self.log.path)
            self._idle = (st.st_ino, st.st_size)
        except FileNotFoundError:
            self._idle = (-1, -1)
        return False


def entries(log: AuditLog) -> Iterator[dict[str, Any]]:  # the whole trail: verify and export, not servers
    """Every written decision, oldest first (this process's queue is written first)."""
    log.flush()
    for seg in log.segments():
        with seg.open("rb") as fh:
            for raw in fh:
                if not raw.endswith(b"\n") and seg == log.path:
                    break  # a torn append (see the module docstring)
                try:
                    yield json.loads(raw)
                except ValueError:
                    yield {"seq": None, "unparseable": raw[:120].decode(errors="replace")}


def tail(log: AuditLog, n: int, *, after: int = -1) -> list[dict[str, Any]]:
    """The last ``n`` decisions with ``seq > after``, oldest first, read backwards from the
    end of the trail in blocks: memory stays at a block plus ``n`` lines, whatever the
    trail's size (``GET /v1/audit?tail=``)."""
    log.flush()
    out: list[dict[str, Any]] = []
    for seg in reversed(log.segments()):
        for raw in _lines_backward(seg, live=seg == log.path):
            entry = _parse(raw)
            seq = entry.get("seq")
            if isinstance(seq, int) and seq <= after:
                return out[::-1]
            out.append(entry)
            if len(out) >= n:
                return out[::-1]
    return out[::-1]


def page(log: AuditLog, n: int, *, before: int | None = None,
         match: Callable[[dict[str, Any]], bool] | None = None, scan: int = 10_000,
         contains: tuple[bytes, ...] = ()) -> tuple[list[dict[str, Any]], int | None]:
    """Up to ``n`` decisions with ``seq < before`` (newest first) that ``match`` keeps,
    read backwards from the end in blocks, looking at no more than ``scan`` lines: a
    filtered page of a trail of any size costs at most ``scan`` lines (the engine
    console's audit page). Returns the page and the ``before`` of the next (older) page,
    or ``None`` when the trail's start was reached. ``contains``: byte strings a line must
    hold to be parsed at all (a cheap first sieve before ``match``)."""
    log.flush()
    out: list[dict[str, Any]] = []
    seen, last = 0, None
    for seg in reversed(log.segments()):
        for raw in _lines_backward(seg, live=seg == log.path):
            if before is not None and (_line_seq(raw) or -1) >= before:
                continue  # newer than the page: its seq alone is read, not the line
            seen += 1
            if contains and not all(c in raw for c in contains):
                last = _line_seq(raw) or last
                if seen >= scan:
                    return out, last
                continue
            entry = _parse(raw)
            seq = entry.get("seq")
            last = seq if isinstance(seq, int) else last
            if match is None or match(entry):
                out.append(entry)
            if len(out) >= n or seen >= scan:
                return out, last
    return out, None


def verify(log: AuditLog) -> list[Problem]:
    """Check the whole chain; an empty list means it holds.

    Runs under a shared lock on the live segment, so another process's batch is seen
    whole or not at all. An unterminated final line of the live segment is a torn,
    unacknowledged append and is not part of the chain; the head file may name an
    earlier line of the chain (a writer killed between the two writes), never a later
    or a different one.
    """
    log.flush()
    lock = None
    try:
        lock = os.open(log.path, os.O_RDONLY)
        fcntl.flock(lock, fcntl.LOCK_SH)
    except FileNotFoundError:
        pass
    try:
        return _verify(log)
    finally:
        if lock is not None:
            os.close(lock)


def _check_signature(log: AuditLog, name: str, domain: bytes, words: list[str],
                     problems: list[Problem]) -> None:
    """A head's or an anchor's signature must be the tenant key's over its ``seq hash``."""
    key = log.identity()
    if key is None:
        return  # an unsigned log (no tenant key): the chain is all verify can check
    what = "head" if domain == HEAD_DOMAIN else "anchor"
    if len(words) < 3:
        problems.append(Problem(name, 1, f"the {what} carries no signature by the tenant key ({key.did}): "
                                         f"written by something other than wbx, or rewritten"))
        return
    try:
        sig = bytes.fromhex(words[2])
    except ValueError:
        sig = b""
    if not identity.verify(key.public_key, signed_message(domain, words[0], words[1]), sig):
        why = ("the chain was recomputed, or its tail cut, and the head rewritten" if what == "head"
               else "the anchor was forged: the pruned segments did not end there")
        problems.append(Problem(name, 1,
                                f"the {what}'s signature is not the tenant key's ({key.did}): {why}"))


def _verify(log: AuditLog) -> list[Problem]:
    problems: list[Problem] = []
    prev, seq = GENESIS, 0
    if log.anchor_path.exists():  # older segments were pruned by policy (WB_AUDIT_KEEP)
        anchor = log.anchor_path.read_text().split()
        if len(anchor) >= 2 and anchor[0].isdigit():
            seq, prev = int(anchor[0]), anchor[1]
            _check_signature(log, ANCHOR_NAME, ANCHOR_DOMAIN, anchor, problems)
        else:
            problems.append(Problem(ANCHOR_NAME, 1, "unreadable anchor record"))
    head: tuple[int, str] | None = None
    if log.head_path.exists():
        words = log.head_path.read_text().split()
        if len(words) >= 2 and words[0].isdigit():
            head = int(words[0]), words[1]
            _check_signature(log, HEAD_NAME, HEAD_DOMAIN, words, problems)
        elif words:
            problems.append(Problem(HEAD_NAME, 1, "unreadable head record"))
    head_seen = head is None or head == (seq, prev)
    for seg in log.segments():
        with seg.open("rb") as fh:
            for n, raw in enumerate(fh, 1):
                where = seg.name
                if not raw.endswith(b"\n") and seg == log.path:
                    break  # a torn append: never acknowledged, not part of the chain
                try:
                    entry = json.loads(raw)
                    claimed = entry.pop("hash")
                except (ValueError, KeyError, AttributeError):
                    problems.append(Problem(where, n, "unparseable line"))
                    continue
                if entry.get("seq") != seq + 1:
                    problems.append(Problem(where, n, f"sequence jumps from {seq} to {entry.get('seq')} "
                                                      "(line(s) deleted or reordered)"))
                if entry.get("prev") != prev:
                    problems.append(Problem(where, n, "prev does not match the preceding line's hash "
                                                      "(a line was deleted or edited)"))
                if chain_hash(entry.get("prev", ""), entry) != claimed:
                    problems.append(Problem(where, n, "hash does not match the line's content "
                                                      "(the line was edited)"))
                prev, seq = claimed, entry.get("seq") if isinstance(entry.get("seq"), int) else seq + 1
                if head is not None and seq == head[0]:
                    head_seen = head[1] == claimed
    if head is not None and not head_seen:
        problems.append(Problem(HEAD_NAME, 1, f"head records seq {head[0]} but the log ends at seq {seq} "
                                              "(the tail was deleted or edited)"))
    if head is None and seq > 0 and log.identity() is not None:
        problems.append(Problem(HEAD_NAME, 1, f"the log holds {seq} entries but no signed head: the head "
                                              "file was deleted (a cut or rewritten log would "
                                              "pass without it)"))
    return problems


class Reader:
    """``contract.audit_trail.AuditTrail``: the functions above, as the service."""

    entries = staticmethod(entries)
    tail = staticmethod(tail)
    page = staticmethod(page)
    verify = staticmethod(verify)

    @staticmethod
    def cursor(log: AuditLog, after: int) -> AuditCursor:
        return AuditCursor(log, after)


def service(_runtime: RuntimeServices) -> AuditTrail:
    """``AuditTrailService.factory``: the reader holds no state (each call takes the log it reads)."""
    return Reader()
