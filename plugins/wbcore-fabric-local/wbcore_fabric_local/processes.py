"""The ``local`` fabric engine: ``width`` worker processes on this machine.

Short calls on threads share one GIL (the call path is Python), so a pool of processes is
what scales them with cores. Workers are forked from a **fork server** — never forked from
this process: a child forked after wasmtime compiled a module can inherit its compile
thread pool mid-lock and block forever in ``wasmtime_module_new``. The fork server is a
fresh interpreter started once per process, which only imports (:func:`preload`: the call
path and the wasm engine's modules, no engine, no thread), so a worker forked from it
starts in ~0.18 s instead of ~0.45 s for a ``spawn``ed one (measured, loaded machine).
``WB_FABRIC_START=spawn`` starts each worker as a fresh interpreter instead.

Scheduling, all in the consumer's thread (nothing runs unless the caller iterates; the loop
is the core's ``batch.Batch``, shared with the Ray engine — this module starts, feeds, waits
for and stops the processes):

- inputs travel in **chunks** of consecutive inputs, one message (one pickled frame) each way
  per chunk. A kernel chunk is its list of input bytes and its answer the list of outputs:
  pickle writes and reads a list of bytes in C (see ``fabric.Chunk.body``), and the answer
  becomes one ``fabric.ResultChunk`` holding that list as it came — no Python-level step and
  no object per input in the parent, which on 2 cores shares a core with the workers: every
  nanosecond it spends per input is taken from them (``map`` then builds one ``Result`` per
  input in C; ``map_chunks`` builds none);
- inputs are taken from the iterable only while fewer than ``width × K`` chunks are in
  flight (taken and not yet yielded, answered ones behind a slower chunk included): a slow
  consumer holds the producer back, and so does a slow input;
- each worker has at most ``K`` chunks outstanding (one running, two queued, so it never
  idles waiting for the parent or for an earlier chunk of the other worker); a chunk's size adapts so that it
  takes about ``TARGET_S`` (one input for long calls, up to ``MAX_BATCH`` for microsecond kernels) and
  holds at most about ``CHUNK_BYTES`` of input;
- results are buffered only until the earlier chunks arrive, then yielded in input order;
- a worker that dies (killed, out of memory) fails only the inputs it held, and is replaced;
- ``cancel`` or the batch deadline kills the workers at once (their calls may be running).

Calls granted caps are refused here: their brokers keep per-process state (rate limits,
concurrency slots) that ``width`` workers would each hold separately. Run them on the
``threads`` engine, in the process whose Dock owns that state.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any

from wbcore_runtime.dispatch import batch, fabric
from wbcore_runtime.contract.errors import CapabilityDenied, Internal, InvalidArgs

#: Chunks outstanding per worker: one running and two queued, so that a worker whose chunk
#: waits behind a slower one's (results go out in input order) still has work.
K = 3
MAX_BATCH = 4096
TARGET_S = 0.02
#: Input (and output) bytes per chunk, roughly (learnt from the chunks sent and answered): bounds the
#: parent's memory for large inputs (``width × K`` chunks in flight, and their answers).
CHUNK_BYTES = 1 << 20
#: Workers may be replaced this many times per batch (a guest that kills its worker every
#: time must not respawn processes forever).
MAX_RESTARTS = 16
START_TIMEOUT_S = 120.0
START_METHODS = ("spawn", "forkserver")


def start_method() -> str:
    method = os.environ.get("WB_FABRIC_START", "forkserver")
    if method not in START_METHODS:
        raise InvalidArgs(f"WB_FABRIC_START={method!r}: the local fabric starts workers with one of "
                          f"{', '.join(START_METHODS)} (never fork: it can deadlock after wasmtime compiled "
                          "a module)")
    return method


#: Imported once by the fork server, so a worker forked from it starts with them loaded.
PRELOAD = ("wbcore_runtime.runtime", "wbcore_runtime.dispatch.dispatcher", "wbcore_runtime.dispatch.fabric",
           "wbcore_fabric_local.worker")


@functools.cache
def preload() -> list[str]:
    """What the fork server imports before it forks workers: the core's call path, every
    installed plugin's entry module (a worker's ``Runtime.open`` loads them all), and the
    wasm engine's modules when this process has loaded them. Importing creates no engine
    and no thread (wasmtime's compile pool and the epoch ticker start with the first
    engine, in each worker), so a fork of the server copies no lock mid-held. Measured (a
    4-input map after the first, load 3): width 1 in 0.07–0.10 s with the plugins preloaded,
    0.15–0.17 s without; width 2 in 0.12–0.16 s against 0.22–0.39 s. Read once per process:
    the fork server starts once."""
    from importlib.metadata import entry_points

    from wbcore_runtime.contract import hookspecs

    plugins = sorted({ep.module for ep in entry_points(group=hookspecs.ENTRY_POINT_GROUP)})
    loaded = [m for m in sys.modules if m == "wasmtime" or m.startswith(("wbcore_wasmtime.", "wasmtime."))]
    extra = [m for m in os.environ.get("WB_FABRIC_PRELOAD", "").split(",") if m]
    return [*PRELOAD, *plugins, *sorted(loaded), *extra]


@dataclass
class _Worker:
    proc: Any
    conn: Any
    out: deque[int] = field(default_factory=deque)  # sequence numbers of the chunks it holds
    started: float = field(default_factory=time.monotonic)
    ready: bool = False


class ProcessEngine:
    """``FabricDriver`` over worker processes (one pool per ``map``)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def chunks(self, job: fabric.Job, work: fabric.Work, *,
               cancel: Any = None) -> Iterator[fabric.ResultChunk]:
        if job.caps:
            raise CapabilityDenied(
                f"fabric engine 'local': {job.kind} {job.name!r} is granted caps "
                f"({' '.join(sorted(job.caps))}); their brokers keep per-process limits that worker "
                f"processes would multiply; use the threads engine (--engine threads)")
        method = start_method()
        ctx = multiprocessing.get_context(method)
        if method == "forkserver":
            ctx.set_forkserver_preload(preload())  # read once, when this process's fork server starts
        return _Batch(job, work, cancel, ctx).chunks_in_order()


class _Batch(batch.Batch):
    def __init__(self, job: fabric.Job, work: fabric.Work, cancel: Any, ctx: Any) -> None:
        super().__init__(job, work, cancel, k=K, target_s=TARGET_S, max_batch=MAX_BATCH,
                         chunk_bytes=CHUNK_BYTES)
        self.ctx = ctx
        self.restarts = 0
        self.workers: list[_Worker] = []

    def _start(self) -> _Worker:
        from wbcore_fabric_local import worker

        parent, child = self.ctx.Pipe(duplex=True)
        proc = self.ctx.Process(target=worker.main, args=(child, self.job), name="wb-fabric-worker",
                                daemon=True)
        proc.start()
        child.close()
        return _Worker(proc, parent)

    def begin(self) -> None:
        self.workers = [self._start() for _ in range(self.job.width)]

    def ship(self, w: _Worker, seq: int, chunk: fabric.Chunk) -> None:
        w.out.append(seq)  # held from now on: if the send fails, its inputs fail with it
        try:
            w.conn.send((seq, chunk.body(self.job.kind), tuple(chunk.errors)))
        except OSError:  # the worker died since its last answer
            self._replace(w)

    def wait_bound(self) -> float | None:
        return 1.0 if any(not w.ready for w in self.workers) else None  # bounds a start-up that hangs

    def wait(self, timeout: float | None) -> Any:
        busy = [w for w in self.workers if w.out]
        return busy, wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout)

    def collect(self, found: Any) -> None:
        busy, ready = found
        for w in busy:
            if w.conn in ready or w.proc.sentinel in ready:
                self._receive(w)
            elif not w.ready and time.monotonic() - w.started > START_TIMEOUT_S:
                raise Internal(f"fabric: a worker did not start within {START_TIMEOUT_S:g} s "
                               f"(start method {self.ctx.get_start_method()}); is the machine overloaded?")

    def _receive(self, w: _Worker) -> None:
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                if msg[0] == "done":
                    self.answered(w, *msg[1:])
                elif msg[0] == "ready":
                    w.ready = True
                elif msg[0] == "fatal":
                    raise batch.error_from_wire(msg[1], msg[2])
        except (EOFError, OSError):
            pass
        if w.out and not w.proc.is_alive():
            self._replace(w)

    def _replace(self, w: _Worker) -> None:
        w.proc.join(1)
        self.lost(w, Internal(f"fabric: worker {w.proc.pid} exited (code {w.proc.exitcode}) while it held "
                              "this input"))
        w.conn.close()
        self.restarts += 1
        if self.restarts > MAX_RESTARTS:
            raise Internal(f"fabric: {self.job.kind} {self.job.name!r}: workers exited {self.restarts} "
                           "times; stopped")
        self.workers[self.workers.index(w)] = self._start()

    def stop(self, *, graceful: bool) -> None:
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
