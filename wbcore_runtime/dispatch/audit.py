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

**Writing is batched** (the guarantee and the crash rule: docs/dock.md). :meth:`AuditLog.record`
queues the decision; one writer per log and process appends the queue as one ``write``, under the
log's ``flock`` (several processes share one chain), at ``batch`` lines or ``window`` seconds
after the first (a daemon thread), before any read (the reader, ``contract.audit_trail``), at
exit, before ``fork``, and before ``record`` returns when the log is ``durable``
(``WB_AUDIT_DURABLE=1``, implied by ``WB_AUDIT_FSYNC=1``). A writer re-reads the chain head only
when the file is not as it left it. A process killed *mid-write* may leave an unterminated last
line, never acknowledged: ``verify`` ignores it and the next writer cuts it off; complete lines
past the head (killed between the two writes) are valid: the head may name an earlier line.

**Signed heads.** The head and the anchor also carry the tenant key's Ed25519 signature of
``(seq, hash)`` (:func:`signed_message`; :meth:`AuditLog.for_home` logs are signed), so a
recomputed chain, a cut tail with a rewritten head, a missing head or a forged anchor fail
``verify``; what that proves, and what it does not, is in docs/security.md.

The live segment rotates at ``WB_AUDIT_MAX_BYTES`` (default 64 MiB) into
``audit-<seq>.jsonl``; the chain runs on across segments and ``verify`` walks them in
order. At most ``WB_AUDIT_KEEP`` (default 16) rotated segments are kept; pruning the
oldest writes ``audit.anchor`` (its last seq and hash), where ``verify`` then starts.
This module writes the trail; reading it and ``verify`` are a service (``contract.audit_trail``,
wbcore-audit-trail's) that reads it by this module's names, rules and :func:`chain_hash`.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import threading
import time
import weakref
from collections.abc import Callable
from json.encoder import encode_basestring_ascii as _json_str
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from wbcore_runtime.contract.canonical import canonical_json
from wbcore_runtime.trust import identity

GENESIS = "0" * 64
LOG_NAME = "audit.jsonl"
HEAD_NAME = "audit.head"
DEFAULT_MAX_BYTES = 64 << 20
#: Decisions kept in memory while the trail cannot be written; older ones are counted as lost.
MAX_PENDING = 100_000
DEFAULT_KEEP = 16  # rotated segments kept: the trail is bounded at ~(keep + 1) x max_bytes
ANCHOR_NAME = "audit.anchor"
_HEAD_WIDTH = 256  # fixed-width head record "seq hash [signature]", rewritten in place (one pwrite)
#: What a head and an anchor signature cover (domain-separated: one is never the other).
HEAD_DOMAIN = b"wbcore-audit-head\n"
ANCHOR_DOMAIN = b"wbcore-audit-anchor\n"
#: A batch is written at most this long after its first line ...
DEFAULT_WINDOW_S = 0.005
#: ... or as soon as it holds this many lines.
DEFAULT_BATCH = 256
_TAIL_READ = 8192  # bytes read back from the end of the log to find the chain head


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def redact_target(target: str | None) -> str | None:
    """Keep scheme://host:port/path of a URL, and a label before it (``openai:https://…``)."""
    if not target or "://" not in target:
        return target[:256] if target else target
    label, _, scheme = target[:target.find("://")].rpartition(":")  # user-info, query, fragment go
    label, target = label + ":" if label else "", scheme + target[target.find("://"):]
    try:
        parts = urlsplit(target)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
        return (label + urlunsplit((parts.scheme, netloc, parts.path, "", "")))[:256]
    except ValueError:
        return "<unparseable target>"


def chain_hash(prev: str, body: dict[str, Any]) -> str:
    """A line's hash: the chain's definition (:func:`_encode` computes the same, faster)."""
    return hashlib.sha256(prev.encode() + canonical_json(body)).hexdigest()


def signed_message(domain: bytes, seq: int | str, hash_: str) -> bytes:
    """What a head's or an anchor's signature covers: ``domain`` then ``"seq hash"``."""
    return domain + f"{seq} {hash_}".encode()


def segment_seq(path: Path) -> int | None:
    """A rotated segment's last seq: it is named after it (``None``: not a rotated segment's name)."""
    seq = path.stem.partition("-")[2]
    return int(seq) if seq.isascii() and seq.isdigit() else None


#: A queued decision: (ts, principal, cap, op, args, outcome, kind, reason, target, bytes, ms).
_Entry = tuple[float, str, str, str, str, str, "str | None", "str | None", "str | None", int, float]

_LINE = ('{"args":%s,"bytes":%d,"cap":%s,"kind":%s,"ms":%r,"op":%s,"outcome":%s,"prev":"%s",'
         '"principal":%s,"reason":%s,"seq":%d,"target":%s,"ts":%r}')


def _encode(seq: int, prev: str, e: _Entry) -> tuple[bytes, str]:
    """The line for ``e`` (with its hash) and that hash: ``_canonical`` of the same fields,
    formatted by hand in sorted-key order — the writer's hot loop (a test pins them equal:
    JSON strings by json's own C encoder, floats by ``repr`` as json writes them)."""
    ts, principal, cap, op, args, outcome, kind, reason, target, nbytes, ms = e
    q = _json_str
    canon = (_LINE % (q(args), nbytes, q(cap), "null" if kind is None else q(kind), float(ms), q(op),
                      q(outcome), prev, q(principal), "null" if reason is None else q(reason), seq,
                      "null" if target is None else q(target), float(ts))).encode()
    h = hashlib.sha256(prev.encode() + canon).hexdigest()
    # verify() re-canonicalises without "hash", so appending it keeps one encode
    return canon[:-1] + b',"hash":"' + h.encode() + b'"}\n', h


class AuditLog:
    """One hash-chained log directory. Thread- and process-safe, batched appends."""

    def __init__(self, directory: Path, *, max_bytes: int | None = None, keep: int | None = None,
                 fsync: bool = False, durable: bool = False, window: float = DEFAULT_WINDOW_S,
                 batch: int = DEFAULT_BATCH, signer: Callable[[], Any] | None = None) -> None:
        """``signer`` returns the :class:`wbcore_runtime.trust.identity.Identity` whose key signs the
        head and the anchor (called once, at the first write or verify: no key is read at start);
        without one, heads are unsigned and :meth:`verify` says so."""
        self.dir = Path(directory)
        self._signer_of = signer
        self._signer: Any = None
        self.path = self.dir / LOG_NAME
        self.head_path = self.dir / HEAD_NAME
        self.anchor_path = self.dir / ANCHOR_NAME
        self.max_bytes = max_bytes or DEFAULT_MAX_BYTES
        self.keep = keep or DEFAULT_KEEP
        self.fsync = fsync
        self.durable = durable or fsync
        self.window = window
        self.batch = max(1, batch)
        self._queue: list[_Entry] = []
        self._queue_lock = threading.Lock()  # held for a list append: never across I/O
        self._write_lock = threading.Lock()  # one batch written at a time by this process
        self._failed: BaseException | None = None
        #: (lines dropped, first ts, last ts) while writing failed (a full disk): written as
        #: one ``lost`` line when writing works again.
        self._lost: tuple[int, float, float] | None = None
        self._fd: int | None = None
        self._head_fd: int | None = None
        # What this process last wrote: lets it skip re-reading the chain head when alone.
        self._known: tuple[int, int, int, str] | None = None  # (inode, file size, seq, hash)
        _all_logs.add(self)

    @classmethod
    def for_home(cls, home: Path, env: dict[str, str] | None = None) -> AuditLog:
        """The process's one writer for ``$home/audit`` (shared by every Dock on that home)."""
        env = env if env is not None else dict(os.environ)
        max_bytes = int(env.get("WB_AUDIT_MAX_BYTES", "0") or 0) or None
        keep = int(env.get("WB_AUDIT_KEEP", "0") or 0) or None
        fsync = env.get("WB_AUDIT_FSYNC") == "1"
        durable = env.get("WB_AUDIT_DURABLE") == "1"
        key = (str(Path(home).resolve() / "audit"), max_bytes, keep, fsync, durable)
        with _shared_lock:
            log = _shared.get(key)
            if log is None:
                home_path = Path(home)

                def tenant_key() -> Any:
                    return identity.load(home_path, env)

                log = _shared[key] = cls(home_path / "audit", max_bytes=max_bytes, keep=keep, fsync=fsync,
                                         durable=durable, signer=tenant_key)
        return log

    # --- writing ------------------------------------------------------------------------

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
    ) -> None:
        """Queue one decision; it is written within the batch window (at once when durable).

        Raises ``OSError`` when the log could not be written (a failed batch is retried
        here first): a call is never answered while its audit trail is failing. The
        decision stays queued even then (bounded by :data:`MAX_PENDING`, the excess
        counted in a ``lost`` line), so a full disk loses no line it has room to keep.
        """
        # the clock in whole microseconds (what round(time.time(), 6) kept), at a quarter of its cost
        entry = (time.time_ns() // 1000 / 1e6, principal, cap, op, args_digest, outcome, kind, reason,
                 redact_target(target), nbytes, round(ms, 3))
        with self._queue_lock:
            self._queue.append(entry)
            n = len(self._queue)
        if self._failed is not None or self.durable or n >= self.batch:
            self.flush()
        elif n == 1:
            _flusher.schedule(self)

    def flush(self) -> None:
        """Write every queued decision now (one locked append for the whole batch)."""
        with self._write_lock:
            with self._queue_lock:
                batch, self._queue = self._queue, []
            if not batch:
                return
            lost = self._lost
            if lost:  # the trail says how many lines a full disk cost, and when
                batch.insert(0, (round(time.time(), 6), "-", "audit", "lost", "", "lost", "internal",
                                 "disk-full", f"{lost[0]} lines from {lost[1]:.3f} to {lost[2]:.3f}", 0, 0.0))
            try:
                self._append(batch)
            except BaseException as exc:
                if lost:
                    batch.pop(0)
                with self._queue_lock:
                    self._queue[:0] = batch  # kept, in order, for the next attempt
                    over = len(self._queue) - MAX_PENDING
                    if over > 0:  # bounded while the disk stays full: the oldest go, counted
                        first = self._lost[1] if self._lost else self._queue[0][0]
                        n = self._lost[0] if self._lost else 0
                        self._lost = (n + over, first, self._queue[over - 1][0])
                        del self._queue[:over]
                self._failed = exc
                raise
            self._lost = None
            self._failed = None

    def _append(self, batch: list[_Entry]) -> None:
        fd = self._open()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            fd, size, seq, prev = self._sync(fd)
            out: list[bytes] = []
            for entry in batch:
                if size >= self.max_bytes:
                    if out:
                        os.write(fd, b"".join(out))
                        out = []
                    fd = self._rotate(seq)
                    size = 0
                seq += 1
                line, prev = _encode(seq, prev, entry)
                out.append(line)
                size += len(line)
            if out:
                data = b"".join(out)
                view = memoryview(data)
                while view:  # a regular file takes it whole; a short write (disk full) is finished
                    view = view[os.write(fd, view):]
            assert self._head_fd is not None
            os.pwrite(self._head_fd,
                      self._signed(HEAD_DOMAIN, seq, prev).ljust(_HEAD_WIDTH - 1).encode() + b"\n", 0)
            if self.fsync:
                os.fsync(fd)
                os.fsync(self._head_fd)
            assert self._known is not None  # set by _sync / _rotate
            self._known = (self._known[0], size, seq, prev)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def identity(self) -> Any:
        """The key that signs this log's head (``None``: an unsigned log)."""
        if self._signer is None and self._signer_of is not None:
            self._signer = self._signer_of()
        return self._signer

    def _signed(self, domain: bytes, seq: int, hash_: str) -> str:
        """``"seq hash signature"`` (hex), or ``"seq hash"`` for an unsigned log."""
        key = self.identity()
        if key is None:
            return f"{seq} {hash_}"
        return f"{seq} {hash_} {key.sign(signed_message(domain, seq, hash_)).hex()}"

    def _open(self) -> int:
        if self._fd is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            self._head_fd = os.open(self.head_path, os.O_RDWR | os.O_CREAT, 0o600)
            self._known = None
        return self._fd

    def _sync(self, fd: int) -> tuple[int, int, int, str]:
        """Under the lock: the live fd, its size and the chain head (seq, hash) to append to.

        Alone, the file is as this process left it (same inode, same size): the remembered
        head holds. Otherwise another process appended or rotated: follow the live file and
        read the head back from its last complete line (cutting off a torn one)."""
        while True:
            st = os.fstat(fd)
            try:
                live = os.stat(self.path).st_ino == st.st_ino
            except FileNotFoundError:
                live = False
            if live:
                break
            fcntl.flock(fd, fcntl.LOCK_UN)  # rotated by another process: reopen the live file
            os.close(fd)
            os.close(self._head_fd)  # type: ignore[arg-type]
            self._fd = None
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_EX)
        known = self._known
        if known is not None and known[0] == st.st_ino and known[1] == st.st_size:
            return fd, st.st_size, known[2], known[3]
        size = st.st_size
        seq, prev, size = self._tail(fd, size)
        self._known = (st.st_ino, size, seq, prev)
        return fd, size, seq, prev

    def _tail(self, fd: int, size: int) -> tuple[int, str, int]:
        """The chain head from the live file's last complete line: ``(seq, hash, size)``,
        after cutting off an unterminated last line (a writer killed mid-write)."""
        buf, start = b"", size
        while start > 0 and buf.count(b"\n") < 2:  # back to the line before the last complete one
            begin = max(0, start - _TAIL_READ)
            buf = os.pread(fd, start - begin, begin) + buf
            start = begin
        if not buf.endswith(b"\n"):
            cut = buf.rfind(b"\n") + 1
            size = start + cut
            os.ftruncate(fd, size)  # the torn append was never acknowledged: drop it
            buf = buf[:cut]
        if not buf:
            seq, prev = self._head_before_live()
            return seq, prev, size
        last = buf[buf.rfind(b"\n", 0, len(buf) - 1) + 1:]
        try:
            entry = json.loads(last)
            return int(entry["seq"]), str(entry["hash"]), size
        except (ValueError, KeyError, TypeError):
            seq, prev = self._read_head()  # a damaged last line: verify reports it; chain on from the head
            return seq, prev, size

    def _head_before_live(self) -> tuple[int, str]:
        """The chain head for an empty live file: the newest rotated segment's last line,
        else the head file, else the start of the chain."""
        rotated = sorted(self.dir.glob("audit-*.jsonl"))
        if rotated:
            last = b""
            with rotated[-1].open("rb") as fh:
                for last in fh:  # noqa: B007 - the last line carries the head
                    pass
            try:
                entry = json.loads(last)
                return int(entry["seq"]), str(entry["hash"])
            except (ValueError, KeyError, TypeError):
                pass
        return self._read_head()

    def _read_head(self) -> tuple[int, str]:
        assert self._head_fd is not None
        raw = os.pread(self._head_fd, _HEAD_WIDTH, 0).decode(errors="replace").split()
        if len(raw) >= 2 and raw[0].isdigit():
            return int(raw[0]), raw[1]
        return 0, GENESIS

    def _rotate(self, seq: int) -> int:
        assert self._fd is not None
        os.rename(self.path, self.dir / f"audit-{seq:012d}.jsonl")  # see segment_seq
        old = self._fd
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        fcntl.flock(old, fcntl.LOCK_UN)
        os.close(old)
        self._known = (os.fstat(self._fd).st_ino, 0, seq, "")
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
                anchor = self._signed(ANCHOR_DOMAIN, int(entry["seq"]), str(entry["hash"])) + "\n"
            except (ValueError, KeyError, TypeError):
                return  # an unreadable segment is evidence: keep it for verify to report
            tmp = self.anchor_path.with_suffix(".tmp")
            tmp.write_text(anchor)
            os.replace(tmp, self.anchor_path)
            seg.unlink()

    def close(self) -> None:
        self.flush()
        with self._write_lock:
            for fd in (self._fd, self._head_fd):
                if fd is not None:
                    os.close(fd)
            self._fd = self._head_fd = None
            self._known = None

    def _after_fork_in_child(self) -> None:
        # The child inherits the parent's descriptors, whose flock is shared with the
        # parent's (one open file description): it must open its own.
        self._queue = []
        self._queue_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._fd = self._head_fd = None
        self._known = None

    def segments(self) -> list[Path]:
        """The trail's files, oldest first (what a reader walks)."""
        rotated = sorted(self.dir.glob("audit-*.jsonl"))
        return rotated + ([self.path] if self.path.exists() else [])

# --- one writer per log and process -------------------------------------------------------

_shared: weakref.WeakValueDictionary[tuple[Any, ...], AuditLog] = weakref.WeakValueDictionary()
_shared_lock = threading.Lock()
_all_logs: weakref.WeakSet[AuditLog] = weakref.WeakSet()


class _Flusher:
    """The daemon thread that writes each log's queue ``window`` seconds after its first line."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._due: dict[int, tuple[float, AuditLog]] = {}  # strong refs while a queue waits
        self._thread: threading.Thread | None = None

    def schedule(self, log: AuditLog) -> None:
        with self._cond:
            self._due.setdefault(id(log), (time.monotonic() + log.window, log))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="wb-audit-writer", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due:
                    self._cond.wait()
                now = time.monotonic()
                ready = [log for at, log in self._due.values() if at <= now]
                if not ready:
                    self._cond.wait(min(at for at, _ in self._due.values()) - now)
                    continue
                for log in ready:
                    del self._due[id(log)]
            for log in ready:
                try:
                    log.flush()
                except Exception:  # noqa: BLE001 - kept queued; the next record() retries and raises
                    pass


_flusher = _Flusher()


def flush_all() -> None:
    """Write every queued decision of this process (at exit and before ``fork``)."""
    for log in list(_all_logs):
        try:
            log.flush()
        except Exception:  # noqa: BLE001 - at exit there is no caller left to tell
            pass


def _after_fork_in_child() -> None:
    global _flusher
    _flusher = _Flusher()  # threads do not survive fork
    for log in list(_all_logs):
        log._after_fork_in_child()


atexit.register(flush_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=flush_all, after_in_child=_after_fork_in_child)
