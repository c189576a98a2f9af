"""What both fabric engines (``wbcore-fabric-local``, ``wbcore-ray``: neither may import the other)
run a job in chunks with: :class:`Sizer`, the :class:`Batch` scheduler, a worker's :func:`runner`
and :func:`run_chunk`, the answers as ``ResultChunk`` records and the wire codecs. The records and
``map`` are :mod:`wbcore_runtime.dispatch.fabric`'s."""

from __future__ import annotations

import dataclasses
import time
from array import array
from collections.abc import Iterator
from itertools import islice
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.calls import CallRecord, CallResult, CommandRequest, Usage
from wbcore_runtime.contract.errors import Timeout, WbError, of_kind
from wbcore_runtime.contract.kernel_calls import KernelRequest
from wbcore_runtime.dispatch import tiers
from wbcore_runtime.dispatch.dispatcher import audited
from wbcore_runtime.dispatch.fabric import Chunk, CommandInput, Job, Outputs, ResultChunk, Work

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices


class Sizer:
    """How many inputs an engine's next chunk takes: about ``target_s`` of work (learnt from
    the chunks answered: one input for a long call, up to ``max_batch`` for a microsecond
    kernel) and about ``chunk_bytes`` of input or of output (learnt from a sample of each chunk
    sent and answered: a kernel's bytes, a command's stdin, stdout and stderr), or the job's fixed
    ``batch``. One per batch; the
    first chunk holds one input."""

    __slots__ = ("batch", "chunk_bytes", "item_bytes", "max_batch", "out_bytes", "per_item", "target_s")

    #: Inputs whose sizes are read per chunk sent: a sum over every input costs ~25 ns each.
    SAMPLE = 32

    def __init__(self, job: Job, *, target_s: float, max_batch: int, chunk_bytes: int) -> None:
        self.batch = job.batch
        self.target_s = target_s
        self.max_batch = max_batch
        self.chunk_bytes = chunk_bytes
        self.per_item: float | None = None  # seconds per input, a running mean
        self.item_bytes = 0.0  # bytes per input, a running mean
        self.out_bytes = 0.0  # bytes per output (a command's: stdout and stderr), a running mean

    def size(self) -> int:
        if self.batch is not None:
            return self.batch
        if self.per_item is None:
            return 1
        n = int(self.target_s / max(self.per_item, 1e-7))
        if self.item_bytes or self.out_bytes:
            n = min(n, int(self.chunk_bytes / max(self.item_bytes, self.out_bytes)))
        return max(1, min(self.max_batch, n))

    def sent(self, kind: str, chunk: Chunk) -> None:
        sample = [x for x in chunk.items[:self.SAMPLE] if x is not None]  # None: a malformed input
        if self.batch is not None or not sample:
            return
        size = sum(map(len, sample) if kind == "kernel" else (len(x.stdin) for x in sample)) / len(sample)
        self.item_bytes = size if not self.item_bytes else 0.5 * (self.item_bytes + size)

    def answered(self, n: int, seconds: float, outputs: Any = ()) -> None:
        if n:
            now = seconds / n
            self.per_item = now if self.per_item is None else 0.5 * (self.per_item + now)
        # what comes back is held as input is: a kernel's outputs, a command's stdout and stderr
        if isinstance(outputs, Outputs):
            size = len(outputs.data) / max(1, len(outputs))
        else:
            sample = [x for x in islice(outputs, self.SAMPLE) if x is not None]
            size = (sum(len(x) if isinstance(x, bytes) else len(x[1]) + len(x[2]) for x in sample)
                    / max(1, len(sample)))
        self.out_bytes = size if not self.out_bytes else 0.5 * (self.out_bytes + size)



# --- running one input of a job (engines call this; worker processes too) -------------------


def run_command(runtime: RuntimeServices, job: Job, target: Any, item: CommandInput, *,
                cancel: Any = None) -> CallResult:
    """Run ``job``'s resolved command request on one input with ``target`` (the tier that
    runs it, :func:`wbcore_runtime.dispatch.tiers.target_for`), inside the batch deadline, with the
    runtime's call hooks (audit) around it — as ``dispatch.call_command`` does."""
    req = job.request
    assert isinstance(req, CommandRequest)
    req = dataclasses.replace(req, argv=item.argv, stdin=item.stdin, timeout_s=_within(job, req.timeout_s),
                              cancel=cancel)
    hook = runtime.call_hooks
    if hook is None:
        return target.call(req)
    record = CallRecord(name=job.name, shape=job.entry.shape, principal=req.principal, argv=req.argv,
                        toolkit=req.toolkit, tier=job.tier, caps=job.caps)
    return audited(hook, record, target.call, req)


def kernel_request(job: Job) -> KernelRequest:
    """``job``'s kernel request with its per-call deadline shortened to the batch's."""
    req = job.request
    assert isinstance(req, KernelRequest)
    return dataclasses.replace(req, spec=dataclasses.replace(req.spec,
                                                             timeout_s=_within(job, req.spec.timeout_s)))


def run_kernel(runtime: RuntimeServices, job: Job, inst: Any, data: bytes) -> bytes:
    """One kernel call on an open instance, with the call hooks (as ``KernelCalls``)."""
    if job.deadline is not None and time.monotonic() >= job.deadline:
        raise Timeout(f"fabric: the batch deadline passed before this input of {job.name!r} ran")
    hook = runtime.call_hooks
    if hook is None:
        return inst.call(data)
    req = job.request
    record = CallRecord(name=job.name, shape="kernel", principal=req.principal, toolkit=req.toolkit,
                        tier=job.tier, caps=job.caps)
    return audited(hook, record, inst.call, data)


def _within(job: Job, timeout_s: float) -> float:
    left = job.remaining()
    if left is None:
        return timeout_s
    if left <= 0:
        raise Timeout(f"fabric: the batch deadline passed before this input of {job.name!r} ran")
    return min(timeout_s, left)



# --- results in input order, cheaply (engines that ship chunks) -----------------------------


class Batch:
    """One map on an engine that ships chunks to workers (a process, a Ray actor): the
    scheduling they share. :meth:`chunks_in_order` fills each worker up to ``k`` chunks while
    fewer than ``width × k`` chunks (of at most ``max_batch`` inputs, ~``chunk_bytes``) are in
    flight (taken and not yet yielded: a chunk answered behind a slower one counts),
    yields the answered chunks in input order, waits, and honours ``cancel`` and the batch
    deadline; it runs in the consumer's thread, once per chunk.

    A subclass keeps ``workers`` (each with ``out``: the sequence numbers of the chunks it
    holds) and provides :meth:`begin`, :meth:`ship`, :meth:`wait`, :meth:`collect` and
    :meth:`stop`; it reports answers with :meth:`answered` and lost chunks with :meth:`lost`."""

    #: Seconds between looks at ``cancel`` while waiting for answers.
    POLL_S = 0.05

    def __init__(self, job: Job, work: Work, cancel: Any, *, k: int, target_s: float, max_batch: int,
                 chunk_bytes: int) -> None:
        self.job = job
        self.work = work
        self.cancel = cancel
        self.k = k
        self.window = job.width * k * (job.batch or max_batch)
        self.max_chunks = job.width * k  # in flight: shipped, or answered and waiting for earlier ones
        self.sizer = Sizer(job, target_s=target_s, max_batch=max_batch, chunk_bytes=chunk_bytes)
        self.workers: list[Any] = []
        self.chunks: dict[int, Chunk] = {}  # in flight, by sequence number
        self.pending: dict[int, ResultChunk] = {}  # answered, waiting for the earlier ones

    # --- what an engine provides ------------------------------------------------------------

    def begin(self) -> None:
        """Start the workers."""
        raise NotImplementedError

    def ship(self, worker: Any, seq: int, chunk: Chunk) -> None:
        """Send ``chunk`` (``chunk.body(kind)``) to ``worker`` and append ``seq`` to its ``out``."""
        raise NotImplementedError

    def wait(self, timeout: float | None) -> Any:
        """Wait up to ``timeout`` seconds (``None``: until something happens) for answers."""
        raise NotImplementedError

    def collect(self, ready: Any) -> None:
        """Take what :meth:`wait` found: :meth:`answered` per answer, :meth:`lost` per lost worker."""
        raise NotImplementedError

    def stop(self, *, graceful: bool) -> None:
        """End the workers: ``graceful`` once every result is out, else at once (calls may run)."""
        raise NotImplementedError

    def wait_bound(self) -> float | None:
        """The longest :meth:`wait` may take besides the deadline and ``cancel`` (e.g. while starting)."""
        return None

    # --- shared -------------------------------------------------------------------------------

    def answered(self, worker: Any, seq: int, outputs: Any, errors: list[tuple[int, str, str]],
                 seconds: float) -> None:
        worker.out.remove(seq)
        self.pending[seq] = chunk_results(self.job, self.chunks[seq], outputs, errors)
        self.sizer.answered(len(outputs), seconds, outputs)

    def lost(self, worker: Any, error: WbError, seq: int | None = None) -> None:
        """The chunk ``seq`` of ``worker`` (every chunk it holds when ``None``) fails with ``error``."""
        for s in list(worker.out) if seq is None else [seq]:
            worker.out.remove(s)
            self.pending[s] = failed_results(self.job, self.chunks[s], error)

    def chunks_in_order(self) -> Iterator[ResultChunk]:
        job, work, pending, k = self.job, self.work, self.pending, self.k
        seq = done_seq = done = 0
        exhausted = clean = False
        try:
            self.begin()
            while True:
                if self.cancel is not None and self.cancel.is_set():
                    return
                left = job.remaining()
                if left is not None and left <= 0:
                    raise Timeout(f"fabric: {job.kind} {job.name!r}: the batch deadline passed "
                                  f"with {done} of {work.taken}+ results yielded")
                while not exhausted:  # fill: the least busy worker with room, while the window allows
                    w = min((w for w in self.workers if len(w.out) < k), key=lambda w: len(w.out),
                            default=None)
                    room = self.window - (work.taken - done)
                    if w is None or room <= 0 or len(self.chunks) >= self.max_chunks:
                        break  # answers held behind a slow chunk count too: chunks, not only inputs
                    chunk = work.take(min(room, self.sizer.size()))
                    if not chunk.items:
                        exhausted = True
                        break
                    self.chunks[seq] = chunk
                    if len(chunk.errors) == len(chunk.items):  # nothing to run: every input was malformed
                        pending[seq] = failed_results(job, chunk, None)
                    else:
                        self.sizer.sent(job.kind, chunk)
                        self.ship(w, seq, chunk)
                    seq += 1
                while (ready := pending.pop(done_seq, None)) is not None:
                    del self.chunks[done_seq]
                    done_seq += 1
                    done += len(ready.values)
                    yield ready
                if exhausted and done_seq == seq:
                    clean = True
                    return
                if any(w.out for w in self.workers):
                    found = self.wait(self._wait_s())
                    if not (self.cancel is not None and self.cancel.is_set()):
                        self.collect(found)
        finally:
            self.stop(graceful=clean)

    def _wait_s(self) -> float | None:
        waits = [w for w in (self.job.remaining(), self.POLL_S if self.cancel is not None else None,
                             self.wait_bound()) if w is not None]
        return max(0.0, min(waits)) if waits else None



def chunk_results(job: Job, chunk: Chunk, outputs: Any, errors: list[tuple[int, str, str]]) -> ResultChunk:
    """What any engine hands back for one answered chunk: the worker's outputs (kernel bytes
    as they came — a list, or :class:`Outputs` — command result wires as ``CallResult``) with
    the per-input errors the worker reported and the ones found while the chunk was read
    (``chunk.errors``), by input index."""
    start = chunk.start
    values = (outputs if job.kind == "kernel"
              else [None if v is None else result_from_wire(v) for v in outputs])
    if not errors and not chunk.errors:
        return ResultChunk(start, values)
    failed = {start + k: error_from_wire(err_kind, message) for k, err_kind, message in errors}
    failed.update({start + k: exc for k, exc in chunk.errors.items()})
    return ResultChunk(start, values, dict(sorted(failed.items())))


def failed_results(job: Job, chunk: Chunk, error: WbError | None) -> ResultChunk:
    """A chunk whose worker was lost: every input fails with ``error`` (or its own read error)."""
    start, n = chunk.start, len(chunk.items)
    failed = {start + k: e for k in range(n) if (e := chunk.errors.get(k, error)) is not None}
    if job.kind != "kernel":
        return ResultChunk(start, [None] * n, failed)
    return ResultChunk(start, Outputs(b"", array("I", [0]) * n) if job.joined else [b""] * n, failed)



# --- running a chunk of a job in a worker (any engine's: a spawned process, a Ray actor) ------


def runner(runtime: RuntimeServices, job: Job, *, tier: str | None = None) -> Any:
    """The function a worker calls per input: for a kernel, ``data -> bytes`` on one instance
    opened here and kept (seed 004's instantiate-once loop); for a command, ``(argv, stdin)
    -> result_wire``. ``tier`` overrides the job's (a node runs a ``node``-tier job at
    ``instance``: it *is* the other node)."""
    target = tiers.target_for(runtime, job.entry, tier or job.tier)
    if job.kind == "command":
        def run_one(payload: tuple[tuple[str, ...], bytes]) -> Any:
            argv, stdin = payload
            return result_wire(run_command(runtime, job, target, CommandInput(argv, stdin)))

        return run_one
    inst = target.open(kernel_request(job))
    if runtime.call_hooks is None and job.deadline is None:
        return inst.call  # the bare call: no hook to fire, no batch deadline to check per input

    def run_kernel_one(data: bytes) -> bytes:
        return run_kernel(runtime, job, inst, data)

    return run_kernel_one


def run_chunk(kind: str, run: Any, body: list[Any], skip: frozenset[int] = frozenset(),
              joined: bool = False) -> tuple[Any, list[tuple[int, str, str]]]:
    """Run one chunk (:meth:`Work.take`'s payloads, ``None`` or an offset in ``skip`` for an
    input already failed): ``(outputs, errors)``, one output per input (``b""``/``None`` for a
    failed one; a kernel's joined into :class:`Outputs` when ``joined``) and ``(offset, kind,
    message)`` per failure. Each input runs exactly once."""
    if kind == "kernel":
        outs, errors = _kernel_chunk(run, body, skip)
        return (Outputs.join(outs) if joined else outs), errors
    return _command_chunk(run, body, skip)


def _failure(k: int, exc: BaseException) -> tuple[int, str, str]:
    if isinstance(exc, WbError):
        return (k, *error_wire(exc))
    return k, "internal", f"{type(exc).__name__}: {exc}"  # an engine bug fails this input, not the worker


def _kernel_chunk(run: Any, body: list[bytes],
                  skip: frozenset[int]) -> tuple[list[Any], list[tuple[int, str, str]]]:
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


def _command_chunk(run: Any, body: list[Any],
                   skip: frozenset[int]) -> tuple[list[Any], list[tuple[int, str, str]]]:
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


# --- results across a process boundary ----------------------------------------------------------


def error_wire(exc: WbError) -> tuple[str, str]:
    """An error as plain data (its kind and message): pickles, and reads the same anywhere."""
    return exc.kind.value, exc.message


def error_from_wire(kind: str, message: str) -> WbError:
    return of_kind(kind, message)


def result_wire(result: CallResult) -> tuple[int, bytes, bytes, dict[str, Any]]:
    return result.exit_code, result.stdout, result.stderr, result.usage.as_dict()


def result_from_wire(data: tuple[int, bytes, bytes, dict[str, Any]]) -> CallResult:
    code, out, err, usage = data
    return CallResult(stdout=out, stderr=err, exit_code=code, usage=Usage(**usage))
