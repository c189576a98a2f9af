"""One deadline over an HTTP exchange, whatever it waits on (:func:`cut_at`).

httpx's timeouts bound each connect and each read; a server that drips its headers or body a
byte at a time passes every one of them for as long as it likes. :func:`cut_at` shuts the
exchange's socket at the deadline instead, from one thread that holds every exchange's deadline
(:class:`_Cuts`), so the read in progress ends and the caller reports a timeout. The one fetcher
(:mod:`wbcore_runtime.guard.fetch`), the ``net`` broker and ``llm.complete`` use it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


class _Cuts:
    """Every exchange's deadline on one thread (a timer thread per request cost ~0.2 ms of CPU
    each): a heap of (when, key, cut); a cancelled key is dropped when it reaches the top, and the
    heap is rebuilt once most of it is cancelled, so it stays the size of what is in flight."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._live: set[int] = set()
        self._keys = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, when: float, cut: Callable[[], None]) -> int:
        if when != when:  # NaN compares false with every deadline: in the heap it would disorder the rest
            raise ValueError("a deadline must be a number, not NaN")
        with self._cond:
            key = next(self._keys)
            heapq.heappush(self._heap, (when, key, cut))
            self._live.add(key)
            if self._thread is None or not self._thread.is_alive():  # first use, or a forked child
                self._thread = threading.Thread(target=self._run, name="wb-fetch-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()
            return key

    def cancel(self, key: int) -> None:
        with self._cond:
            self._live.discard(key)
            if len(self._heap) > 64 and len(self._heap) > 2 * len(self._live):
                self._heap = [e for e in self._heap if e[1] in self._live]
                heapq.heapify(self._heap)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][1] not in self._live:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                when, key, cut = self._heap[0]
                if when > time.monotonic():
                    self._cond.wait(when - time.monotonic())
                    continue
                heapq.heappop(self._heap)
                self._live.discard(key)
            cut()


_cuts = _Cuts()


class Cut:
    """What :func:`cut_at` yields: the request's ``extensions``, and ``fired``, set by the deadline
    thread before it shuts the socket: a read that ended while it is set was cut (a timeout, never
    a short answer); one that ended while it is not was ended by the server."""

    def __init__(self) -> None:
        self.fired = False
        self._socks: list[socket.socket] = []
        self.extensions: dict[str, Any] = {"trace": self._trace}

    def _cut(self) -> None:
        self.fired = True  # first: a read the shutdown ends must find it set
        for sock in self._socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        if event.endswith((".connect_tcp.complete", ".start_tls.complete")):
            self._socks.append(info["return_value"].get_extra_info("socket"))
            if self.fired:  # connected after the deadline thread cut: this socket is cut too
                self._cut()


@contextlib.contextmanager
def cut_at(deadline: float) -> Iterator[Cut]:
    """A :class:`Cut` that ends an exchange at ``deadline`` (``time.monotonic()``) whatever it waits
    on: its httpcore ``trace`` notes the connection's socket, which the deadline thread shuts then,
    so a read in progress ends (a server dripping its headers a byte at a time passes every
    per-read timeout). Leaving the block cancels the cut."""
    cut = Cut()
    key = _cuts.add(deadline, cut._cut)
    try:
        yield cut
    finally:
        _cuts.cancel(key)
