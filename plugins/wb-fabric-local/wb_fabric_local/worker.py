"""One fabric worker process: opens a runtime on the parent's home, builds the target of the
parent's resolution once (the tier's driver, or the shape's runner for ``instance``), and runs
batches of inputs until the parent says stop.

Started with ``spawn`` (a fresh interpreter): it never inherits a wasmtime engine that the
parent may have used, so no lock of wasmtime's compile thread pool is copied mid-held.
Compiled modules come from the artifact store's compiled cache on disk and stay loaded in the
worker (``wb_wasmtime.engine.modules``) for every batch; a kernel is instantiated once and
reused across inputs (seed 004's instantiate-once loop).

Messages (pickled over one duplex pipe): parent → worker ``[(index, payload), ...]`` or
``None`` (stop); worker → parent ``("ready", pid)``, ``("fatal", kind, message)``,
``("done", [(index, failed, value), ...], seconds)``. A reader thread drains the pipe into a
queue, so the parent's sends never wait on the worker's replies (no pipe deadlock).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any

from wbcore import fabric
from wbcore.errors import WbError


def main(conn: Any, job: fabric.Job) -> None:
    try:
        _runtime, run = _prepare(job)
    except WbError as exc:
        conn.send(("fatal", *fabric.error_wire(exc)))
        return
    except Exception as exc:  # noqa: BLE001 - a worker that cannot start says why, in one line
        conn.send(("fatal", "internal", f"fabric worker could not start: {type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", os.getpid()))
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    threading.Thread(target=_read, args=(conn, inbox), name="wb-fabric-inbox", daemon=True).start()
    clock = time.perf_counter
    while True:
        batch = inbox.get()
        if batch is None:
            return
        t0 = clock()
        out = []
        for index, payload in batch:
            try:
                out.append((index, False, run(payload)))
            except WbError as exc:
                out.append((index, True, fabric.error_wire(exc)))
            except Exception as exc:  # noqa: BLE001 - an engine bug is this input's internal error, not the worker's end
                out.append((index, True, ("internal", f"{type(exc).__name__}: {exc}")))
        conn.send(("done", out, clock() - t0))


def _read(conn: Any, inbox: queue.SimpleQueue[Any]) -> None:
    try:
        while True:
            msg = conn.recv()
            inbox.put(msg)
            if msg is None:
                return
    except (EOFError, OSError):
        inbox.put(None)  # the parent went away: stop


def _prepare(job: fabric.Job) -> tuple[Any, Any]:
    from wbcore import dispatch
    from wbcore.runtime import Runtime

    runtime = Runtime.open(home=job.home, roots=list(job.roots), env=job.env, cwd=job.cwd)
    target = dispatch.target_for(runtime, job.entry, job.tier)
    if job.kind == "command":
        def run_command(payload: tuple[tuple[str, ...], bytes]) -> Any:
            argv, stdin = payload
            return fabric.result_wire(fabric.run_command(runtime, job, target, fabric.CommandInput(argv, stdin)))

        return runtime, run_command
    inst = target.open(fabric.kernel_request(job))

    def run_kernel(data: bytes) -> bytes:
        return fabric.run_kernel(runtime, job, inst, data)

    return runtime, run_kernel
