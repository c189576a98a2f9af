"""ExecBroker: the single choke point every nested command call passes through.

``exec``, ``commands`` (run-command) and ``parallel`` (run-command-many) all end in
:meth:`ExecBroker.run_one`, which refuses unregistered names, takes argv as a list of
strings (structural: no shell ever parses it), refuses nesting deeper than 8, and holds
one of at most 64 concurrent slots per principal for the whole nested call. The nested
command runs through ``Runtime.call`` under its *own* toolkit's caps (never the caller's),
inside the caller's deadline, for the caller's tenant, keeping the caller's ``reach`` (an
agent's ``:TOOLKITS:`` allowlist): ``wbcore_runtime.dispatch.dispatcher.check_reach`` refuses a
command outside it at the nested call, and ``list`` shows only what is in reach.

Answers are bounded while they are gathered: a nested command's stdout/stderr are capped
by *its* profile while it runs (the run engine checks them every tick), and its result is
taken from the caller's :class:`~wbcore_runtime.dispatch.budget.ByteBudget` (``max_response``) before it is
answered. ``parallel`` takes each result from one budget as it arrives; the first result
that passes it cancels the tasks in flight, skips the ones not started and refuses the
batch with ``too-large`` — memory stays at the cap plus the results in flight (≤ width).
"""

from __future__ import annotations

import dataclasses
import struct
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wbcore_runtime.dispatch.budget import ByteBudget
from wbcore_runtime.dispatch.dock import BrokerCall, DockContext, nested, reason_of, refuse
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound, WbError

MAX_DEPTH = 8
MAX_CONCURRENT = 64
MAX_INPUTS = 1024
MAX_WIDTH = 8
MAX_ARGS = 4096
MAX_STDIN = 64 << 20


def parse_request(data: bytes) -> tuple[str, list[str], bytes]:
    """The seed's wire format: ``[name_len:u32][name][argc:u32][(arg_len:u32)(arg)]*[stdin_len:u32][stdin]``,
    little-endian; the name and each argument UTF-8 text, stdin any bytes; trailing bytes are tolerated."""
    off = 0

    def take(n: int) -> bytes:
        nonlocal off
        if n < 0 or off + n > len(data):
            raise InvalidArgs(f"exec: wire request truncated at byte {off} (wanted {n} more)")
        chunk = data[off: off + n]
        off += n
        return chunk

    def u32() -> int:
        return int(struct.unpack("<I", take(4))[0])

    def text(field: str) -> str:
        # a guest's argv is text (WASI hands it over as UTF-8), as in the structural form
        raw = take(u32())
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgs(f"exec: wire {field} is not UTF-8 text (byte {exc.start} of it); send "
                              "bytes as stdin") from None

    name = text("name")
    argc = u32()
    if argc > MAX_ARGS:
        raise InvalidArgs(f"exec: {argc} arguments exceeds {MAX_ARGS}")
    argv = [text(f"argv[{i}]") for i in range(argc)]
    stdin = take(u32())
    return name, argv, stdin


def encode_request(name: str, argv: list[str], stdin: bytes = b"") -> bytes:
    parts = [struct.pack("<I", len(name.encode())), name.encode(), struct.pack("<I", len(argv))]
    for a in argv:
        b = a.encode()
        parts += [struct.pack("<I", len(b)), b]
    parts += [struct.pack("<I", len(stdin)), stdin]
    return b"".join(parts)


class Slots:
    """At most ``limit`` in-flight nested calls per principal."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._count: dict[str, int] = {}

    def acquire(self, key: str) -> bool:
        with self._lock:
            n = self._count.get(key, 0)
            if n >= self.limit:
                return False
            self._count[key] = n + 1
            return True

    def release(self, key: str) -> None:
        with self._lock:
            n = self._count.get(key, 1) - 1
            if n <= 0:
                self._count.pop(key, None)
            else:
                self._count[key] = n

    def in_flight(self, key: str) -> int:
        with self._lock:
            return self._count.get(key, 0)


class ExecBroker:
    _by_runtime: weakref.WeakKeyDictionary[Any, ExecBroker] = weakref.WeakKeyDictionary()
    _shared_lock = threading.Lock()

    def __init__(self, runtime: Any, *, max_concurrent: int = MAX_CONCURRENT,
                 max_depth: int = MAX_DEPTH) -> None:
        self.runtime = runtime
        self.slots = Slots(max_concurrent)
        self.max_depth = max_depth

    @classmethod
    def shared(cls, runtime: Any) -> ExecBroker:
        """One broker (one set of slots) per runtime, whichever of the three caps asks first."""
        with cls._shared_lock:
            got = cls._by_runtime.get(runtime)
            if got is None:
                got = cls._by_runtime[runtime] = cls(runtime)
            return got

    # --- operations ----------------------------------------------------------------

    def handle(self, call: BrokerCall) -> Any:
        if call.op == "list":
            budget = ByteBudget.for_call(call, None, f"{call.cap}.list")
            names = sorted(self.runtime.registry.names("command"))
            reach = call.ctx.principal.reach
            if reach is not None:  # what the caller may not run, it is not shown either
                names = [n for n in names if self._in_reach(n, reach)]
            for n in names:
                budget.take(ByteBudget.size_of(n))
            return {"commands": names}
        if call.op == "wire":
            data = call.arg("request", bytes)
            name, argv, stdin = parse_request(data)
            return _answer(ByteBudget.for_call(call, None, f"exec {name!r}"),
                           self.run_one(call.ctx, name, argv, stdin))
        if call.op == "run":
            name, argv, stdin = self._structural(call.args, call.cap)
            return _answer(ByteBudget.for_call(call, None, f"{call.cap} {name!r}"),
                           self.run_one(call.ctx, name, argv, stdin, timeout=_timeout(call.args)))
        if call.op == "map":
            return self.map(call)
        raise InvalidArgs(f"{call.cap}: unknown operation {call.op!r}")

    def _in_reach(self, name: str, reach: frozenset[str]) -> bool:
        from wbcore_runtime.store.registry import RESERVED

        entry = self.runtime.registry.lookup("command", name)
        return entry is not None and ((entry.builtin and name in RESERVED) or entry.toolkit in reach)

    def _structural(self, args: dict[str, Any], cap: str) -> tuple[str, list[str], bytes]:
        name = args.get("name")
        argv = args.get("argv", [])
        stdin = args.get("stdin", b"")
        if not isinstance(name, str) or not name:
            raise InvalidArgs(f"{cap}: 'name' must be a registered command name")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) or len(argv) > MAX_ARGS:
            raise InvalidArgs(f"{cap}: 'argv' must be a list of at most {MAX_ARGS} strings (no shell parses "
                              "it)")
        if isinstance(stdin, str):
            stdin = stdin.encode()
        if not isinstance(stdin, bytes) or len(stdin) > MAX_STDIN:
            raise InvalidArgs(f"{cap}: 'stdin' must be bytes (at most {MAX_STDIN})")
        return name, argv, stdin

    def run_one(self, ctx: DockContext, name: str, argv: list[str], stdin: bytes, *,
                timeout: float | None = None, cancel: threading.Event | None = None) -> dict[str, Any]:
        if ctx.depth + 1 > self.max_depth:
            raise refuse(CapabilityDenied, "depth",
                         f"exec {name!r}: nesting depth {ctx.depth + 1} exceeds {self.max_depth}")
        entry = self.runtime.registry.lookup("command", name)
        if entry is None:
            raise NotFound(f"exec: {name!r} is not a registered command")
        key = str(ctx.principal)
        if not self.slots.acquire(key):
            raise refuse(CapabilityDenied, "concurrency",
                         f"exec {name!r}: {key} already has {self.slots.limit} nested calls in flight")
        try:
            left = ctx.remaining(60.0)
            if left <= 0:
                from wbcore_runtime.contract.errors import Timeout

                raise refuse(Timeout, "deadline", f"exec {name!r}: no time left in the caller's deadline")
            # the nested call is the command's own toolkit, for the caller's tenant and reach
            who = dataclasses.replace(ctx.principal, toolkit=entry.toolkit or "")
            with nested(ctx):
                result = self.runtime.call(name, argv, stdin, principal=who,
                                           timeout=min(left, timeout) if timeout else left, cancel=cancel)
        finally:
            self.slots.release(key)
        return {"exit": result.exit_code, "stdout": result.stdout, "stderr": result.stderr}

    def map(self, call: BrokerCall) -> dict[str, Any]:
        name = call.arg("name", str)
        inputs = call.arg("inputs", list)
        if len(inputs) > MAX_INPUTS:
            raise refuse(InvalidArgs, "too-many-inputs",
                         f"parallel: {len(inputs)} inputs exceeds {MAX_INPUTS}")
        tasks = []
        for i, item in enumerate(inputs):
            if not isinstance(item, dict):
                raise InvalidArgs(f"parallel: input {i} must be a map {{argv, stdin}}")
            tasks.append(self._structural({"name": name, **item}, "parallel"))
        per_task = _timeout(call.args)
        width = max(1, min(call.arg("width", int, 4), MAX_WIDTH))
        ctx = call.ctx
        budget = ByteBudget.for_call(call, None, f"parallel {name!r}")
        lock = threading.Lock()
        stop = threading.Event()  # set by the result that passes the budget: in-flight tasks end
        over: list[WbError] = []

        def one(task: tuple[str, list[str], bytes]) -> dict[str, Any] | None:
            if stop.is_set():
                return None  # not started: the batch is already refused
            try:
                result = self.run_one(ctx, *task, timeout=per_task, cancel=stop)
            except WbError as exc:  # one task's failure is its own result, not the batch's
                result = {"error": exc.kind.value, "reason": reason_of(exc), "message": exc.message}
            with lock:
                if stop.is_set():
                    return None
                try:
                    _take(budget, result)
                except WbError as exc:
                    over.append(exc)
                    stop.set()
                    return None
            return result

        with ThreadPoolExecutor(max_workers=width) as pool:
            results = list(pool.map(one, tasks))
        if over:
            raise over[0]
        return {"results": results}


def _take(budget: ByteBudget, result: dict[str, Any]) -> None:
    """Take one command result (its outputs, or its error map) from ``budget``."""
    budget.take(sum(ByteBudget.size_of(v) for v in result.values()))


def _answer(budget: ByteBudget, result: dict[str, Any]) -> dict[str, Any]:
    _take(budget, result)
    return result


def _timeout(args: dict[str, Any]) -> float | None:
    t = args.get("timeout")
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0:
        raise InvalidArgs("'timeout' must be a positive number of seconds")
    return float(t)
