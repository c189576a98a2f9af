"""One fabric worker process: opens a runtime on the parent's home, builds the target of the
parent's resolution once (the tier's driver, or the shape's runner for ``instance``), and runs
batches of inputs until the parent says stop.

Started with ``spawn`` (a fresh interpreter): it never inherits a wasmtime engine that the
parent may have used, so no lock of wasmtime's compile thread pool is copied mid-held.
Compiled modules come from the artifact store's compiled cache on disk and stay loaded in the
worker (``wbcore_wasmtime.engine.modules``) for every batch; a kernel is instantiated once and
reused across inputs (seed 004's instantiate-once loop).

Messages (pickled over one duplex pipe), one per chunk of consecutive inputs: parent →
worker ``(seq, body, skip)`` — ``body`` is the list of input bytes for a kernel, or of
``(argv, stdin)`` for a command; ``skip`` the offsets of inputs the parent already failed —
or ``None`` (stop); worker → parent ``("ready", pid)``, ``("fatal", kind, message)``,
``("done", seq, out, errors, seconds)`` — ``out`` lists the outputs (kernel bytes, or wire
results of a command; ``b""``/``None`` for a failed input; a kernel's joined into one
``fabric.Outputs`` when the job is ``joined``: ``map_chunks``), ``errors`` the ``(offset, kind,
message)`` of the inputs that failed. A reader thread
drains the pipe into a queue, so the parent's sends never wait on the worker's replies (no
pipe deadlock).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any

from wbcore_runtime.dispatch import batch, fabric
from wbcore_runtime.contract.errors import WbError


def main(conn: Any, job: fabric.Job) -> None:
    try:
        runtime = _open(job)
        run = batch.runner(runtime, job)
    except WbError as exc:
        conn.send(("fatal", *batch.error_wire(exc)))
        return
    except Exception as exc:  # noqa: BLE001 - a worker that cannot start says why, in one line
        conn.send(("fatal", "internal", f"fabric worker could not start: {type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", os.getpid()))
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    threading.Thread(target=_read, args=(conn, inbox), name="wb-fabric-inbox", daemon=True).start()
    clock = time.perf_counter
    chunk = batch.run_chunk
    while True:
        msg = inbox.get()
        if msg is None:
            _exit(runtime)
        seq, body, skip = msg
        t0 = clock()
        out, errors = chunk(job.kind, run, body, frozenset(skip), job.joined)
        conn.send(("done", seq, out, errors, clock() - t0))


def _read(conn: Any, inbox: queue.SimpleQueue[Any]) -> None:
    try:
        while True:
            msg = conn.recv()
            inbox.put(msg)
            if msg is None:
                return
    except (EOFError, OSError):
        inbox.put(None)  # the parent went away: stop


def _open(job: fabric.Job) -> Any:
    from wbcore_runtime.runtime import Runtime

    return Runtime.open(home=job.home, roots=list(job.roots), env=job.env, cwd=job.cwd)


def _exit(runtime: Any) -> None:
    """End the worker now: its results are sent, and the interpreter's teardown would only
    run wasmtime's finalizers after the modules they call are gone (``Exception ignored``
    noise on stderr, once per object). Spans buffered for telemetry go out first (``os._exit``
    skips the exporter's atexit flush)."""
    import sys

    from wbcore_runtime.contract import telemetry

    telemetry.flush(runtime)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
