"""One fabric worker process: opens a runtime on the parent's home, builds the target of the
parent's resolution once (the tier's driver, or the shape's runner for ``instance``), and runs
batches of inputs until the parent says stop.

Started with ``spawn`` (a fresh interpreter): it never inherits a wasmtime engine that the
parent may have used, so no lock of wasmtime's compile thread pool is copied mid-held.
Compiled modules come from the artifact store's compiled cache on disk and stay loaded in the
worker (``wb_wasmtime.engine.modules``) for every batch; a kernel is instantiated once and
reused across inputs (seed 004's instantiate-once loop).

Messages (pickled over one duplex pipe), one per chunk of consecutive inputs: parent →
worker ``(seq, body, skip)`` — ``body`` is the list of input bytes for a kernel, or of
``(argv, stdin)`` for a command; ``skip`` the offsets of inputs the parent already failed —
or ``None`` (stop); worker → parent ``("ready", pid)``, ``("fatal", kind, message)``,
``("done", seq, out, errors, seconds)`` — ``out`` lists the outputs (kernel bytes, or wire
results of a command; ``b""``/``None`` for a failed input), ``errors`` the ``(offset, kind,
message)`` of the inputs that failed. A reader thread
drains the pipe into a queue, so the parent's sends never wait on the worker's replies (no
pipe deadlock).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from itertools import islice
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
    chunk = _kernel_chunk if job.kind == "kernel" else _command_chunk
    while True:
        msg = inbox.get()
        if msg is None:
            return
        seq, body, skip = msg
        t0 = clock()
        out, errors = chunk(run, body, frozenset(skip))
        conn.send(("done", seq, out, errors, clock() - t0))


def _failure(k: int, exc: BaseException) -> tuple[int, str, str]:
    if isinstance(exc, WbError):
        return (k, *fabric.error_wire(exc))
    return k, "internal", f"{type(exc).__name__}: {exc}"  # an engine bug: this input's error, not the worker's end


def _kernel_chunk(run: Any, body: list[bytes], skip: frozenset[int]) -> tuple[list[bytes], list[Any]]:
    """Run each input once, in order: ``list.extend(map(run, ...))`` is one C-level loop, and
    when an input raises, the outputs before it are already in ``outs`` (CPython's extend
    appends as it goes), so the loop goes on after the failed input."""
    outs: list[bytes] = []
    errors: list[tuple[int, str, str]] = []
    k, n = 0, len(body)
    while k < n:
        if k in skip:
            outs.append(b"")
            k += 1
            continue
        stop = min((s for s in skip if s > k), default=n)
        try:
            outs.extend(map(run, islice(body, k, stop)))
            k = stop
        except Exception as exc:  # noqa: BLE001 - one input's failure, reported as its result
            k = len(outs)  # the input that raised
            outs.append(b"")
            errors.append(_failure(k, exc))
            k += 1
    return outs, errors


def _command_chunk(run: Any, body: list[Any], skip: frozenset[int]) -> tuple[list[Any], list[Any]]:
    outs: list[Any] = []
    errors: list[tuple[int, str, str]] = []
    for k, payload in enumerate(body):
        if payload is None or k in skip:
            outs.append(None)
            continue
        try:
            outs.append(run(payload))
        except Exception as exc:  # noqa: BLE001 - one input's failure, reported as its result
            outs.append(None)
            errors.append(_failure(k, exc))
    return outs, errors


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
    if runtime.call_hooks is None and job.deadline is None:
        return runtime, inst.call  # the bare call: no hook to fire, no batch deadline to check per input

    def run_kernel(data: bytes) -> bytes:
        return fabric.run_kernel(runtime, job, inst, data)

    return runtime, run_kernel
