"""The ``threads`` fabric engine: ``width`` threads of this process.

The calls run where the runtime is: the Dock that owns a cap's per-process state (rate
limits, slots) serves them, so calls granted caps may run here. Short calls share the GIL
(the call path is Python): threads scale long guest runs, not microsecond calls (see
docs/fabric.md for the measured numbers). Each thread keeps one kernel instance.
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from wbcore_runtime.dispatch import batch, fabric
from wbcore_runtime.contract.errors import Timeout, WbError

#: Inputs in flight per thread (taken from the iterable, not yet yielded).
K = 4
POLL_S = 0.05


class ThreadEngine:
    """``FabricDriver`` over a thread pool (one pool per ``map``)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def chunks(self, job: fabric.Job, work: Iterator[tuple[int, Any]], *,
               cancel: Any = None) -> Iterator[fabric.ResultChunk]:
        from wbcore_runtime.dispatch import tiers

        target = tiers.target_for(self.runtime, job.entry, job.tier)
        return _results(self.runtime, job, target, work, cancel)


def _results(runtime: Any, job: fabric.Job, target: Any, work: Iterator[tuple[int, Any]],
             cancel: Any) -> Iterator[fabric.ResultChunk]:
    """The outcomes in input order: each chunk is the oldest input's, once it is done, and
    every input after it that is already done too."""
    stop = threading.Event()  # handed to every guest: set, it stops at its next tick
    local = threading.local()
    opened: list[Any] = []
    lock = threading.Lock()
    failed = b"" if job.kind == "kernel" else None  # a failed input's value, as from every engine

    def one(payload: Any) -> tuple[Any, WbError | None]:
        if isinstance(payload, WbError):
            return failed, payload
        if stop.is_set():
            return failed, Timeout("fabric: the batch stopped before this input ran")
        try:
            if job.kind == "command":
                return batch.run_command(runtime, job, target, payload, cancel=stop), None
            inst = getattr(local, "inst", None)
            if inst is None:
                # the batch's stop event ends a running call too (cancel, the deadline)
                inst = local.inst = target.open(dataclasses.replace(batch.kernel_request(job), cancel=stop))
                with lock:
                    opened.append(inst)
            return batch.run_kernel(runtime, job, inst, payload), None
        except WbError as exc:
            return failed, exc

    pool = ThreadPoolExecutor(max_workers=job.width, thread_name_prefix="wb-fabric")
    pending: deque[tuple[int, Future[tuple[Any, WbError | None]]]] = deque()
    exhausted = False
    try:
        while True:
            if cancel is not None and cancel.is_set():  # checked per chunk too: fast calls never wait
                return
            while not exhausted and len(pending) < job.width * K:
                try:
                    i, payload = next(work)
                except StopIteration:
                    exhausted = True
                    break
                # in a copy of this thread's context: a traced map's span is current here
                # (wbcore_runtime.dispatch.fabric), so each call's span is its child
                pending.append((i, pool.submit(contextvars.copy_context().run, one, payload)))
            if not pending:
                return
            i, fut = pending[0]
            while True:
                left = job.remaining()
                try:
                    value, error = fut.result(timeout=_wait(left, cancel))
                    break
                except FutureTimeout:
                    if cancel is not None and cancel.is_set():
                        return
                    if left is not None and job.remaining() <= 0:  # type: ignore[operator]
                        raise Timeout(f"fabric: {job.kind} {job.name!r}: the batch deadline passed") from None
            pending.popleft()
            start, values = i, [value]
            errors: dict[int, WbError] = {} if error is None else {i: error}
            while pending and pending[0][1].done():
                i, fut = pending.popleft()
                value, error = fut.result()
                values.append(value)
                if error is not None:
                    errors[i] = error
            yield fabric.ResultChunk(start, values, errors)
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        for inst in opened:
            inst.close()


def _wait(left: float | None, cancel: Any) -> float | None:
    waits = [w for w in (left, POLL_S if cancel is not None else None) if w is not None]
    return max(0.0, min(waits)) if waits else None
