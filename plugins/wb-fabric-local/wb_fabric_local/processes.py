"""The ``local`` fabric engine: ``width`` worker processes on this machine.

Short calls on threads share one GIL (the call path is Python), so a pool of processes is
what scales them with cores. Workers start with ``spawn`` — never plain ``fork``: a child
forked after wasmtime compiled a module can inherit its compile thread pool mid-lock and
block forever in ``wasmtime_module_new``. (``WB_FABRIC_START=forkserver`` selects the fork
server, whose server process is itself started fresh.)

Scheduling, all in the consumer's thread (nothing runs unless the caller iterates):

- inputs are taken from the iterable only while fewer than ``width × K × MAX_BATCH`` are in
  flight (taken and not yet yielded): a slow consumer holds the producer back;
- each worker has at most ``K`` batches outstanding (one running, one queued, so it never
  idles waiting for the parent); a batch's size adapts so that it takes about
  ``TARGET_S`` (one input for long calls, up to ``MAX_BATCH`` for microsecond kernels);
- results are buffered only until the earlier ones arrive, then yielded in input order;
- a worker that dies (killed, out of memory) fails only the inputs it held, and is replaced;
- ``cancel`` or the batch deadline kills the workers at once (their calls may be running).

Calls granted caps are refused here: their brokers keep per-process state (rate limits,
concurrency slots) that ``width`` workers would each hold separately. Run them on the
``threads`` engine, in the process whose Dock owns that state.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any

from wbcore import fabric
from wbcore.errors import CapabilityDenied, Internal, InvalidArgs, Timeout, WbError

K = 2
MAX_BATCH = 512
TARGET_S = 0.02
#: Workers may be replaced this many times per batch (a guest that kills its worker every
#: time must not respawn processes forever).
MAX_RESTARTS = 16
START_TIMEOUT_S = 120.0
START_METHODS = ("spawn", "forkserver")


def start_method() -> str:
    method = os.environ.get("WB_FABRIC_START", "spawn")
    if method not in START_METHODS:
        raise InvalidArgs(f"WB_FABRIC_START={method!r}: the local fabric starts workers with one of "
                          f"{', '.join(START_METHODS)} (never fork: it can deadlock after wasmtime compiled a module)")
    return method


@dataclass
class _Worker:
    proc: Any
    conn: Any
    out: deque[list[int]] = field(default_factory=deque)  # indexes of the batches it holds
    started: float = field(default_factory=time.monotonic)
    ready: bool = False

    def send(self, items: list[tuple[int, Any]]) -> None:
        self.out.append([i for i, _ in items])  # held from now on: if the send fails, they fail with it
        self.conn.send(items)


class ProcessEngine:
    """``FabricDriver`` over worker processes (one pool per ``map``)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def map(self, job: fabric.Job, work: Iterator[tuple[int, Any]], *, cancel: Any = None) -> Iterator[fabric.Result]:
        if job.caps:
            raise CapabilityDenied(
                f"fabric engine 'local': {job.kind} {job.name!r} is granted caps ({' '.join(sorted(job.caps))}); "
                f"their brokers keep per-process limits that worker processes would multiply; "
                f"use the threads engine (--engine threads)")
        ctx = multiprocessing.get_context(start_method())
        return _Batch(job, work, cancel, ctx).results()


class _Batch:
    def __init__(self, job: fabric.Job, work: Iterator[tuple[int, Any]], cancel: Any, ctx: Any) -> None:
        self.job = job
        self.work = work
        self.cancel = cancel
        self.ctx = ctx
        self.per_item: float | None = None
        self.restarts = 0
        self.workers: list[_Worker] = []

    def _start(self) -> _Worker:
        from wb_fabric_local import worker

        parent, child = self.ctx.Pipe(duplex=True)
        proc = self.ctx.Process(target=worker.main, args=(child, self.job), name="wb-fabric-worker", daemon=True)
        proc.start()
        child.close()
        return _Worker(proc, parent)

    def _batch_size(self) -> int:
        if self.job.batch is not None:
            return self.job.batch
        if self.per_item is None:
            return 1
        return max(1, min(MAX_BATCH, int(TARGET_S / max(self.per_item, 1e-7))))

    def results(self) -> Iterator[fabric.Result]:
        job, command = self.job, self.job.kind == "command"
        window = job.width * K * (job.batch or MAX_BATCH)
        pending: dict[int, fabric.Result] = {}
        taken = done = 0
        exhausted = clean = False
        try:
            self.workers = [self._start() for _ in range(job.width)]
            while True:
                while not exhausted:  # fill: the least busy worker with room, while the window allows
                    w = min((w for w in self.workers if len(w.out) < K), key=lambda w: len(w.out), default=None)
                    room = window - (taken - done)
                    if w is None or room <= 0:
                        break
                    items: list[tuple[int, Any]] = []
                    want = min(room, self._batch_size())
                    while len(items) < want:
                        try:
                            i, payload = next(self.work)
                        except StopIteration:
                            exhausted = True
                            break
                        taken += 1
                        if isinstance(payload, WbError):
                            pending[i] = fabric.Result(i, error=payload)
                        else:
                            items.append((i, (payload.argv, payload.stdin) if command else payload))
                    if items:
                        try:
                            w.send(items)
                        except OSError:  # the worker died since its last answer
                            self._replace(w, pending)
                    elif exhausted or not want:
                        break
                while (ready_result := pending.pop(done, None)) is not None:
                    yield ready_result
                    done += 1
                if exhausted and done == taken:
                    clean = True
                    return
                busy = [w for w in self.workers if w.out]
                if not busy:
                    continue
                ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], self._wait_s())
                if self.cancel is not None and self.cancel.is_set():
                    return
                left = job.remaining()
                if left is not None and left <= 0:
                    raise Timeout(f"fabric: {job.kind} {job.name!r}: the batch deadline passed with {done} of "
                                  f"{taken}+ results yielded")
                for w in busy:
                    if w.conn in ready or w.proc.sentinel in ready:
                        self._receive(w, pending)
                    elif not w.ready and time.monotonic() - w.started > START_TIMEOUT_S:
                        raise Internal(f"fabric: a worker did not start within {START_TIMEOUT_S:g} s "
                                       f"(start method {self.ctx.get_start_method()}); is the machine overloaded?")
        finally:
            self._stop(graceful=clean)

    def _wait_s(self) -> float | None:
        starting = 1.0 if any(not w.ready for w in self.workers) else None  # bounds a start-up that hangs
        waits = [w for w in (self.job.remaining(), 0.05 if self.cancel is not None else None, starting)
                 if w is not None]
        return max(0.0, min(waits)) if waits else None

    def _receive(self, w: _Worker, pending: dict[int, fabric.Result]) -> None:
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                if msg[0] == "done":
                    _, out, seconds = msg
                    w.out.popleft()
                    Result = fabric.Result  # a local name on the per-input path
                    for index, failed, value in out:
                        if failed:
                            pending[index] = fabric.Result(index, error=fabric.error_from_wire(*value))
                        elif self.job.kind == "command":
                            pending[index] = Result(index, fabric.result_from_wire(value))
                        else:
                            pending[index] = Result(index, value)
                    if out:
                        now = seconds / len(out)
                        self.per_item = now if self.per_item is None else 0.7 * self.per_item + 0.3 * now
                elif msg[0] == "ready":
                    w.ready = True
                elif msg[0] == "fatal":
                    raise fabric.error_from_wire(msg[1], msg[2])
        except (EOFError, OSError):
            pass
        if w.out and not w.proc.is_alive():
            self._replace(w, pending)

    def _replace(self, w: _Worker, pending: dict[int, fabric.Result]) -> None:
        w.proc.join(1)
        code = w.proc.exitcode
        for batch in w.out:
            for index in batch:
                pending[index] = fabric.Result(index, error=Internal(
                    f"fabric: worker {w.proc.pid} exited (code {code}) while it held this input"))
        w.out.clear()
        w.conn.close()
        self.restarts += 1
        if self.restarts > MAX_RESTARTS:
            raise Internal(f"fabric: {self.job.kind} {self.job.name!r}: workers exited {self.restarts} times; stopped")
        self.workers[self.workers.index(w)] = self._start()

    def _stop(self, *, graceful: bool) -> None:
        for w in self.workers:
            if graceful:
                try:
                    w.conn.send(None)
                except OSError:
                    pass
            else:
                w.proc.kill()  # calls may be running: end them now
        for w in self.workers:
            w.proc.join(2 if graceful else 5)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(5)
            w.conn.close()
        self.workers = []
