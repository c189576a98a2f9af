"""The fabric: one registered command or kernel mapped over many inputs.

``map(runtime, name, inputs, width=…, tier=…, engine=…)`` resolves the call **once**, here,
through :func:`wbcore_runtime.dispatch.resolve.resolve` (trust, caps, profile, tier), builds a :class:`Job`
from that resolution and hands it to an engine plugin (``wbcore_fabric_engines``), which
runs the job's request over the inputs and never decides anything about it again.

Two ways to take the results: ``map`` yields one :class:`Result` per input; ``map_chunks``
(for throughput: millions of microsecond kernel calls) yields one :class:`ResultChunk` per
chunk of consecutive inputs — their values (a kernel's outputs: one joined buffer), the
failed ones in a sparse dict — so nothing is built per input in this process. ``map`` is
``map_chunks`` flattened: one path.

The contract every engine keeps (``FabricDriver.chunks``):

- results come back as an iterator of :class:`ResultChunk`, **in input order**;
- one input's failure is that input's error (``ResultChunk.errors``); the batch goes on;
- the input iterable is consumed lazily and at most ``width × k`` inputs are in flight
  (taken from the iterable and not yet yielded), so memory stays bounded for any number
  of inputs (backpressure: a slow consumer stops the producer);
- ``cancel`` (a ``threading.Event``) stops the batch: nothing more is started, the
  iterator ends; ``deadline`` (seconds for the whole batch) bounds every call and ends
  the batch with ``Timeout`` once it passes.

A bad input (not a ``{"argv", "stdin"}`` map for a command, not bytes for a kernel) is
its own ``invalid-args`` result: :func:`work` turns each input into a payload or an error,
lazily, before an engine sees it. How engines run a job in chunks: :mod:`wbcore_runtime.dispatch.batch`.
"""

from __future__ import annotations

import base64
import builtins
import dataclasses
import operator
import time
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, count, islice, repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast

from wbcore_runtime.contract.calls import CallResult, CommandRequest, Principal
from wbcore_runtime.contract.kernel_calls import KernelRequest
from wbcore_runtime.dispatch import dispatcher as dispatch
from wbcore_runtime.dispatch import kernels
from wbcore_runtime.dispatch import resolve as resolution
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, WbError, unknown_name
from wbcore_runtime.contract import telemetry

if TYPE_CHECKING:
    from wbcore_runtime.store.registry import Entry
    from wbcore_runtime.contract.host import RuntimeServices

KINDS = ("command", "kernel")
DEFAULT_ENGINE = "local"
MAX_WIDTH = 256
_monotonic = time.monotonic


@dataclass(frozen=True, slots=True)
class CommandInput:
    """One command input: ``argv`` (structural, no shell) and ``stdin``."""

    argv: tuple[str, ...] = ()
    stdin: bytes = b""


class Result(NamedTuple):
    """One input's outcome: ``value`` (a ``CallResult`` for a command, ``bytes`` for a
    kernel) or ``error`` (the ``WbError`` that input ended with).

    A ``NamedTuple`` rather than a frozen dataclass: one is built per input on the parent's
    hot path (a million kernel calls), and a tuple is built in about half the time."""

    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose: the input's position
    value: CallResult | bytes | None = None
    error: WbError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Outputs(Sequence[bytes]):
    """A chunk's kernel outputs in one buffer, as :func:`map_chunks` gives them: ``data`` is
    every output joined, ``lengths`` (``array('I')``: a kernel returns an ``i32`` length) has
    one length per input — 0 for a failed one. Nothing exists per output until you index or
    iterate (each a copy out of ``data``); ``data`` and :meth:`offsets` hand the whole chunk
    on without that (to a file, a socket, ``numpy.frombuffer``).

    The worker joins its outputs (``b"".join`` and the lengths: ~30 ns an input there, where
    pickling the list cost it ~20), so this process reads one buffer and one array per chunk
    instead of building one ``bytes`` per input (~15 ns each, and as much to free them)."""

    __slots__ = ("_offsets", "data", "lengths")

    def __init__(self, data: bytes, lengths: array[int]) -> None:
        self.data = data
        self.lengths = lengths
        self._offsets: list[int] | None = None

    @classmethod
    def join(cls, outputs: list[bytes]) -> Outputs:
        lengths = array("I")
        lengths.fromlist(list(_builtin_map(len, outputs)))  # a list first: ~4 ns an item less than the map
        return cls(b"".join(outputs), lengths)

    def offsets(self) -> list[int]:
        """Where each output starts in ``data``, and the end: ``len(self) + 1`` offsets."""
        if self._offsets is None:
            self._offsets = list(accumulate(self.lengths, initial=0))
        return self._offsets

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return list(self)[k]
        offs = self.offsets()
        k = range(len(self.lengths))[k]  # negative indices, and IndexError past the end
        return self.data[offs[k]:offs[k + 1]]

    def __iter__(self) -> Iterator[bytes]:
        offs = self.offsets()
        return _builtin_map(self.data.__getitem__, _builtin_map(slice, offs, islice(offs, 1, None)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Outputs):
            return self.data == other.data and self.lengths == other.lengths
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and all(_builtin_map(operator.eq, self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return Outputs, (self.data, self.lengths)  # pickled as one bytes and one array: both in C

    def __repr__(self) -> str:
        return f"Outputs({len(self)} outputs, {len(self.data)} bytes)"


@dataclass(frozen=True, slots=True)
class ResultChunk:
    """The outcomes of consecutive inputs ``start, start + 1, …``, in input order: what
    :func:`map_chunks` yields (and every engine produces; :func:`map` flattens them).

    ``values[k]`` is input ``start + k``'s value: a command's ``CallResult`` (``None`` for a
    failed input) or a kernel's output bytes (``b""`` for a failed one) — from ``map_chunks``
    an :class:`Outputs` (one joined buffer), inside ``map`` a list. ``errors`` maps the
    **input index** of each failed input (only those: usually none) to its ``WbError``. One
    record per chunk (up to 4,096 inputs), nothing per input."""

    start: int
    values: Sequence[Any]
    errors: dict[int, WbError] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.values)

    @property
    def stop(self) -> int:
        """The index after the chunk's last input."""
        return self.start + len(self.values)

    @property
    def ok(self) -> bool:
        """Whether every input of the chunk succeeded."""
        return not self.errors

    def results(self) -> Iterator[Result]:
        """One :class:`Result` per input, lazily: ``tuple.__new__`` over ``zip`` builds each in
        C (half the time of calling ``Result``, whose ``__new__`` is Python)."""
        results = _builtin_map(_new, repeat(Result), zip(count(self.start), self.values, repeat(None)))
        if not self.errors:
            return results
        listed = list(results)
        start = self.start
        for i, exc in self.errors.items():
            listed[i - start] = Result(i, None, exc)
        return iter(listed)


@dataclass(frozen=True, slots=True)
class Job:
    """One resolved call, ready for an engine: everything a worker needs to run it in
    another process (the runtime's home and roots, the entry, the tier, the request
    template whose ``argv``/``stdin`` each input fills in)."""

    kind: str
    name: str
    tier: str
    entry: Entry
    request: CommandRequest | KernelRequest
    caps: frozenset[str]
    width: int
    home: Path
    roots: tuple[Path, ...]
    cwd: Path
    env: dict[str, str] = field(repr=False)  # the job's own copy: a traced map adds its carrier
    #: ``time.monotonic()`` by which the whole batch ends (``None``: only per-call limits).
    #: CLOCK_MONOTONIC is one clock for every process of a machine, so workers compare it too.
    deadline: float | None = None
    #: Inputs per message an engine may group to amortize its per-message cost (``None``: adaptive).
    batch: int | None = None
    #: Kernel outputs come back joined (:class:`Outputs`: ``map_chunks``) rather than as a list of
    #: bytes (``map``).
    joined: bool = False

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - _monotonic()


class FabricDriver(Protocol):
    """What ``FabricEngine.factory(runtime)`` returns."""

    def chunks(self, job: Job, work: Work, *, cancel: Any = None) -> Iterator[ResultChunk]:
        """Run ``job`` over ``work`` and yield the outcomes in input order, as chunks of
        consecutive inputs (every input once; a chunk may hold one input). Read ``work`` as
        ``(index, payload or WbError)`` pairs, or take chunks of inputs (:meth:`Work.take`).
        Closing the iterator ends the batch."""
        ...


# --- the API ----------------------------------------------------------------------------------


def engine(runtime: RuntimeServices, name: str = DEFAULT_ENGINE) -> FabricDriver:
    """The driver of fabric engine ``name`` (one per runtime); unknown names list the known."""
    engines = runtime.fabric_engines
    if not len(engines) and not engines.conflicts:
        raise NotFound(f"no fabric engine is installed (asked for {name!r}); pip install wbcore-fabric-local")
    cache = runtime.__dict__.setdefault("_wb_fabric_drivers", {})
    driver = cache.get(name)
    if driver is None:
        record = engines.get(name)  # unknown: lists the known; provided twice: names both
        avail = record.available()
        if not avail.ok:
            raise NotFound(f"fabric engine {name!r} cannot run here: {avail.reason}")
        driver = cache[name] = record.factory(runtime)
    return driver


def job(runtime: RuntimeServices, name: str, *, kind: str = "command", width: int | None = None,
        tier: str | None = None, deadline: float | None = None, principal: Principal | None = None,
        timeout: float | None = None, batch: int | None = None, joined: bool = False) -> Job:
    """Resolve ``kind`` ``name`` once (``wbcore_runtime.dispatch.resolve``) and describe the batch."""
    if kind not in KINDS:
        raise InvalidArgs(unknown_name("fabric kind", kind, list(KINDS)))
    width = _width(width)
    if deadline is not None and (isinstance(deadline, bool) or deadline <= 0):
        raise InvalidArgs(f"fabric: deadline must be > 0 seconds, got {deadline!r}")
    if batch is not None and (isinstance(batch, bool) or not 1 <= batch <= 65536):
        raise InvalidArgs(f"fabric: batch must be 1..65536 inputs per message, got {batch!r}")
    resolved = resolution.resolve(runtime, kind, name, tier=tier)
    if kind == "command":
        req: CommandRequest | KernelRequest = dispatch.command_request(resolved, (), b"", principal=principal,
                                                                       timeout=timeout)
    else:
        req = kernels.kernel_request(resolved, principal=principal, timeout=timeout)
    entry = dataclasses.replace(resolved.entry, options=dict(resolved.entry.options))
    return Job(kind=kind, name=name, tier=resolved.tier.name, entry=entry, request=req, caps=resolved.caps,
               width=width, home=runtime.home, roots=tuple(runtime.roots), cwd=runtime.cwd,
               env=dict(runtime.env), deadline=None if deadline is None else _monotonic() + float(deadline),
               batch=batch, joined=joined and kind == "kernel")


def map(runtime: RuntimeServices, name: str, inputs: Iterable[Any], *, kind: str = "command",
        width: int | None = None, tier: str | None = None, engine: str = DEFAULT_ENGINE,
        deadline: float | None = None, cancel: Any = None, principal: Principal | None = None,
        timeout: float | None = None, batch: int | None = None) -> Iterator[Result]:
    """Run the registered ``kind`` ``name`` once per input on ``engine``: one :class:`Result`
    per input, in input order; see the module docstring.

    Command inputs are :class:`CommandInput`, ``{"argv": [...], "stdin": str|bytes}`` maps or
    argv lists; kernel inputs are bytes (or ``str``, UTF-8). Resolution errors (unknown name,
    a toolkit that may not run) raise here, before any input is read.
    """
    spec = job(runtime, name, kind=kind, width=width, tier=tier, deadline=deadline, principal=principal,
               timeout=timeout, batch=batch)
    return Stream.over(_chunks(runtime, spec, engine, inputs, cancel))


def map_chunks(runtime: RuntimeServices, name: str, inputs: Iterable[Any], *, kind: str = "command",
               width: int | None = None, tier: str | None = None, engine: str = DEFAULT_ENGINE,
               deadline: float | None = None, cancel: Any = None, principal: Principal | None = None,
               timeout: float | None = None, batch: int | None = None) -> Iterator[ResultChunk]:
    """:func:`map` for throughput: the same call, inputs, bounds, cancellation and deadline,
    but the outcomes come as :class:`ResultChunk` records of consecutive inputs in input order —
    their values, and failures in a sparse dict by input index — with nothing built per input
    in this process (a kernel's outputs arrive as one :class:`Outputs` buffer per chunk).
    ``close()`` the iterator to end the batch early."""
    spec = job(runtime, name, kind=kind, width=width, tier=tier, deadline=deadline, principal=principal,
               timeout=timeout, batch=batch, joined=True)
    return _chunks(runtime, spec, engine, inputs, cancel)


def _chunks(runtime: RuntimeServices, spec: Job, engine: str, inputs: Iterable[Any],
            cancel: Any) -> Iterator[ResultChunk]:
    driver = _engine_driver(runtime, engine)
    kind, name = spec.kind, spec.name
    tracer = getattr(runtime, "tracer", None)
    if tracer is None:
        return driver.chunks(spec, work(kind, inputs), cancel=cancel)

    span = tracer.start("wb.fabric.map", {"wb.command": name, "wb.kind": kind, telemetry.TIER: spec.tier,
                                          "wb.engine": engine, "wb.width": spec.width,
                                          telemetry.TOOLKIT: spec.request.toolkit or ""})
    spec.env.update(tracer.carrier(span))  # worker processes' call spans are children of this one
    chunks = driver.chunks(spec, work(kind, inputs), cancel=cancel)
    return telemetry.spanning(span, chunks, tally=_tally, current=tracer)  # engine calls' threads nest here


def _tally(chunk: ResultChunk) -> tuple[int, int]:
    return len(chunk.values), len(chunk.errors)


_engine_driver = engine


def _width(width: int | None) -> int:
    if width is None:
        import os

        return max(1, min(os.cpu_count() or 1, MAX_WIDTH))
    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= MAX_WIDTH:
        raise InvalidArgs(f"fabric: width must be an integer 1..{MAX_WIDTH}, got {width!r}")
    return width


# --- inputs -------------------------------------------------------------------------------


class Chunk(NamedTuple):
    """Up to ``n`` consecutive inputs taken at once (:meth:`Work.take`): ``items[k]`` is input
    ``start + k``'s payload; an input that is malformed has the placeholder ``None`` there and
    its ``InvalidArgs`` in ``errors[k]``."""

    start: int
    items: list[Any]
    errors: dict[int, WbError]

    def body(self, kind: str) -> list[Any]:
        """The payloads as one message to a worker (:func:`run_chunk` reads it): a kernel's
        input bytes as they are — pickle writes a list of bytes in C, ~20 ns an item, less
        than joining them and an ``array`` of their lengths (~35 ns), and the worker reads it
        back in ~15 ns an item where splitting a joined buffer costs it 17–170 — a command's
        as ``(argv, stdin)``; ``None`` for an input already failed."""
        if kind == "kernel":
            return self.items
        return [None if x is None else (x.argv, x.stdin) for x in self.items]


class Work:
    """The inputs of one batch, read lazily: an iterator of ``(index, payload or WbError)``,
    and :meth:`take` for engines that ship inputs in chunks.

    ``take`` is the engines' hot path for a million microsecond kernel calls: it reads a
    chunk with C-level operations (``islice``, one ``type`` scan) and coerces one input at a
    time only when the chunk holds something other than bytes."""

    __slots__ = ("_coerce", "_inputs", "kind", "taken")

    def __init__(self, kind: str, inputs: Iterable[Any]) -> None:
        self.kind = kind
        self.taken = 0  # inputs read so far: the next one's index
        self._inputs = iter(inputs)
        self._coerce = command_input if kind == "command" else kernel_input

    def __iter__(self) -> Work:
        return self

    def __next__(self) -> tuple[int, Any]:
        item = next(self._inputs)
        i = self.taken
        self.taken = i + 1
        return i, self._payload(item)

    def _payload(self, item: Any) -> Any:
        if isinstance(item, WbError):  # a reader's own per-input error (a malformed JSON line)
            return item
        try:
            return self._coerce(item)
        except WbError as exc:
            return exc

    def take(self, n: int) -> Chunk:
        """The next ``n`` inputs (fewer at the end; an empty chunk once exhausted)."""
        start = self.taken
        items = list(islice(self._inputs, n))
        self.taken = start + len(items)
        errors: dict[int, WbError] = {}
        if self.kind == "kernel" and (not items or set(_builtin_map(type, items)) == _BYTES):
            return Chunk(start, items, errors)
        for k, item in enumerate(items):
            payload = self._payload(item)
            if isinstance(payload, WbError):
                errors[k] = payload
                payload = None
            items[k] = payload
        return Chunk(start, items, errors)


_BYTES = {bytes}
_builtin_map = builtins.map  # this module's own ``map`` is the fabric's


def work(kind: str, inputs: Iterable[Any]) -> Work:
    """``(index, payload)`` per input, lazily; a malformed input's payload is its ``InvalidArgs``."""
    return Work(kind, inputs)


def command_input(item: Any) -> CommandInput:
    """A command input from a :class:`CommandInput`, an argv list, or a JSON-shaped map
    (``argv``: list of strings; ``stdin``: text, or ``stdin_base64``)."""
    if isinstance(item, CommandInput):
        return item
    if isinstance(item, (list, tuple)):
        item = {"argv": list(item)}
    if not isinstance(item, Mapping):
        raise InvalidArgs(f"a command input must be a map {{\"argv\": [...], \"stdin\": \"...\"}}, "
                          f"got {type(item).__name__}")
    unknown = set(item) - {"argv", "stdin", "stdin_base64"}
    if unknown:
        raise InvalidArgs(f"a command input has unknown keys {sorted(unknown)}; "
                          "known: argv, stdin, stdin_base64")
    argv = item.get("argv", [])
    if not isinstance(argv, (list, tuple)) or not all(isinstance(a, str) for a in argv):
        raise InvalidArgs("a command input's 'argv' must be a list of strings (no shell parses it)")
    stdin: Any = item.get("stdin", b"")
    if "stdin_base64" in item:
        stdin = _b64(item["stdin_base64"], "stdin_base64")
    elif isinstance(stdin, str):
        stdin = stdin.encode()
    elif isinstance(stdin, (bytearray, memoryview)):
        stdin = bytes(stdin)
    if not isinstance(stdin, bytes):
        raise InvalidArgs(f"a command input's 'stdin' must be text or bytes, got {type(stdin).__name__}")
    return CommandInput(tuple(argv), stdin)


def kernel_input(item: Any) -> bytes:
    """A kernel input: bytes, text (UTF-8), or a map with ``input`` / ``input_base64``."""
    if type(item) is bytes:  # the common case first: an isinstance against Mapping costs more
        return item
    if isinstance(item, Mapping):
        unknown = set(item) - {"input", "input_base64"}
        if unknown or len(item) != 1:
            raise InvalidArgs("a kernel input map has exactly one of 'input' (text) or 'input_base64'")
        item = _b64(item["input_base64"], "input_base64") if "input_base64" in item else item["input"]
    if isinstance(item, str):
        return item.encode()
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    raise InvalidArgs(f"a kernel input must be bytes or text, got {type(item).__name__}")


def _b64(value: Any, key: str) -> bytes:
    if not isinstance(value, str):
        raise InvalidArgs(f"'{key}' must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise InvalidArgs(f"'{key}' is not valid base64") from None


# --- results in input order ---------------------------------------------------------------


class Stream(chain):
    """The results of one ``map``: ``itertools.chain`` over its chunks' :meth:`ResultChunk.results`,
    so taking the next result is C code (chain → map → zip), and the engine's scheduler — a
    generator of chunks — runs once per chunk, not once per input. ``close()`` ends the batch
    as closing a generator would."""

    _chunks: Iterator[ResultChunk]

    @classmethod
    def over(cls, chunks: Iterator[ResultChunk]) -> Stream:
        # a subclass's builds one
        stream = cast(Stream, cls.from_iterable(_builtin_map(ResultChunk.results, chunks)))
        stream._chunks = chunks
        return stream

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()


_new = tuple.__new__
