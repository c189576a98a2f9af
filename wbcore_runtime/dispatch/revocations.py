"""Revoked principals: what the Dock refuses and the running-calls table cuts off.

Its own module so that a call with no caps (``wbx run upper``) reads revocations without
importing the Dock (the brokers' CBOR, the audit writer): one :class:`Revocations` per
runtime (``Runtime.revocations``), shared by the Dock and ``wbcore_runtime.dispatch.running``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from wbcore_runtime.store.artifacts import atomic_write


class Revocations:
    """Revoked principals (or principal+cap pairs), shared with other processes through
    ``$WB_HOME/dock/revoked`` (one ``principal`` or ``principal cap`` per line), written
    only through :meth:`revoke` / :meth:`restore`, which bump the home's change counter:
    a call reads the counter (a stat and a pread) and re-reads the file only when it moved.
    The file is created empty up front, so the per-call ``stat`` does not pay for a
    missing-file exception."""

    def __init__(self, path: Path, generation: Any = None) -> None:
        self.path = path
        self._where = str(path)
        # The home's change counter (wbcore_runtime.store.generation): revoke/restore bump it, so a call
        # checks revocations with a counter read and stats the file only after a change.
        self._gen = generation
        self._seen_gen: int | None = None
        self._lock = threading.Lock()
        self._local: set[tuple[str, str]] = set()
        self._file: frozenset[tuple[str, str]] = frozenset()
        self._stamp: tuple[int, int, int] | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
            if generation is not None:
                generation.ensure()
        except OSError:
            pass  # a read-only home: a missing file is simply no revocations

    def _refresh(self) -> None:
        if self._gen is not None:
            g = self._gen.value()
            if g == self._seen_gen:
                return
            self._seen_gen = g
        try:
            st = os.stat(self._where)
            stamp: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return
        with self._lock:
            entries = set()
            if stamp is not None:
                try:
                    text = self.path.read_text()
                except FileNotFoundError:
                    text = ""
                for line in text.splitlines():
                    words = line.split()
                    if words:
                        entries.add((words[0], words[1] if len(words) > 1 else "*"))
            self._file, self._stamp = frozenset(entries), stamp

    def revoked(self, principal: str, cap: str) -> bool:
        self._refresh()
        local, file = self._local, self._file
        return ((principal, "*") in local or (principal, cap) in local
                or (principal, "*") in file or (principal, cap) in file)

    def revoke(self, principal: str, cap: str = "*", *, persist: bool = False) -> None:
        with self._lock:
            self._local.add((principal, cap))
            if persist:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                lines = set(self.path.read_text().splitlines()) if self.path.exists() else set()
                lines.add(principal if cap == "*" else f"{principal} {cap}")
                atomic_write(self.path, ("\n".join(sorted(lines)) + "\n").encode())
                self._bump()

    def restore(self, principal: str, cap: str = "*") -> None:
        with self._lock:
            self._local.discard((principal, cap))
            if self.path.exists():
                drop = principal if cap == "*" else f"{principal} {cap}"
                lines = [ln for ln in self.path.read_text().splitlines() if ln.strip() != drop]
                atomic_write(self.path, ("\n".join(lines) + ("\n" if lines else "")).encode())
                self._bump()

    def _bump(self) -> None:
        if self._gen is not None:
            self._gen.bump()
