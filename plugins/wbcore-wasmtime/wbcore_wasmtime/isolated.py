"""Async component calls whose result can carry a ``stream``/``future``, run in a worker process.

wasmtime-py 50's C API has no value kind for ``stream``, ``future`` or ``error-context``:
when an async export *answers* with one (an ACT provider's ``call-tool`` returning
``streaming(stream<tool-event>)``), ``wasmtime_call_future_poll`` hits a ``todo!()`` in
the C API's value conversion and the panic aborts the whole process. Which case a guest
answers is its choice at run time, so a hostile or merely streaming component could take
down the host (an MCP server with every other client on it).

Such calls therefore run here, in a ``python -m wbcore_wasmtime.isolated`` worker process:
the parent sends one JSON line (artifact store root, sha256, function, JSON arguments,
limits); the worker loads the *same* compiled component from the artifact store's cache
(deserialize, no compile; kept loaded for the next call), makes the call with the
in-process runner (same WASI setup, memory limit, fuel and epoch deadline) and answers
one JSON line. Idle workers are kept (``MAX_IDLE``) so a call costs a pipe round trip,
not a process start. The parent bounds the wait by the call's deadline plus a start-up
grace, kills the worker on cancel or timeout, and reads an abort as "answered with a
stream". Functions whose result cannot carry such a value never come here.

The worker has no Dock: a component that imports ``wb:host/<cap>`` interfaces cannot be
called this way (``CapabilityDenied`` says so); ACT providers such as act-cli's fixtures
import none.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wbcore_runtime.contract.calls import Usage
from wbcore_runtime.contract.errors import CapabilityDenied, Internal, InvalidArgs, Timeout, WbError, of_kind

#: Interpreter start, ``import wasmtime`` and a cached component's deserialization.
STARTUP_GRACE_S = 10.0
MAX_ANSWER = 8 << 20
POLL_S = 0.005
#: Idle workers kept warm (each holds its loaded components); more run when calls overlap.
MAX_IDLE = 2
#: Busy workers at once; a call beyond waits for a slot, within its deadline.
MAX_WORKERS = 8


class StreamAnswer(InvalidArgs):
    """The guest answered with a stream/future value this host cannot read yet."""


@dataclass(frozen=True, slots=True)
class WorkerHost:
    """What the in-process runner needs of a runtime inside the worker: the artifact
    store (no brokers, no Dock: the worker links no caps)."""

    artifacts: Any
    brokers: tuple[str, ...] = ()

    @property
    def dock(self) -> Any:
        raise CapabilityDenied("the isolated worker has no Dock: caps are not linked here")


class _Worker:
    """One worker process: JSON lines in and out, read by a thread into a queue."""

    def __init__(self) -> None:
        env = {
            k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "WB_WASM_FUEL", "PYTHONPATH")
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wbcore_wasmtime.isolated"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=env,
        )
        self.answers: queue.Queue[bytes | None] = queue.Queue()
        self.stderr: collections.deque[bytes] = collections.deque(maxlen=64)
        self.drained = threading.Event()
        threading.Thread(target=self._read, daemon=True, name="wb-isolated-out").start()
        threading.Thread(target=self._drain, daemon=True, name="wb-isolated-err").start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(lambda: self.proc.stdout.readline(MAX_ANSWER), b""):  # type: ignore[union-attr]
            self.answers.put(line)
        self.proc.stdout.close()  # the reader owns its pipe: closed at EOF, never under it
        self.answers.put(None)  # EOF: the worker exited

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in iter(lambda: self.proc.stderr.readline(4096), b""):  # type: ignore[union-attr]
            self.stderr.append(line)
        self.proc.stderr.close()
        self.drained.set()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass  # the worker is gone; its stdout/stderr readers close their pipes at EOF
        self.drained.wait(timeout=2)  # so its last stderr lines are read

    def ask(
        self, payload: bytes, deadline: float, cancel: threading.Event | None
    ) -> tuple[dict[str, Any] | None, str | None]:
        """(answer, None), or (None, why) when it stopped: cancelled, timeout, exited."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(payload + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None, "exited"
        while True:
            try:
                line = self.answers.get(timeout=POLL_S)
            except queue.Empty:
                if cancel is not None and cancel.is_set():
                    return None, "cancelled"
                if time.monotonic() >= deadline:
                    return None, "timeout"
                continue
            if line is None:
                self.proc.wait()
                return None, "exited"
            try:
                return json.loads(line), None
            except ValueError:
                return None, "exited"


class _Pool:
    """Idle workers kept for the next call (a worker serves one call at a time)."""

    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(MAX_WORKERS)

    def take(self) -> _Worker:
        with self._lock:
            while self._idle:
                w = self._idle.pop()
                if w.alive():
                    return w
        return _Worker()

    def give(self, worker: _Worker) -> None:
        with self._lock:
            if worker.alive() and len(self._idle) < MAX_IDLE:
                self._idle.append(worker)
                return
        worker.kill()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for w in idle:
            w.kill()


pool = _Pool()
atexit.register(pool.close)


def call(request: Any, artifacts_root: Path, needed: frozenset[str]) -> Any:
    """Run ``request`` (a ``ComponentRequest``) in a worker; a ``ComponentResult``."""
    from wbcore_wasmtime.component import Cancelled, ComponentError, ComponentResult

    if needed:
        raise CapabilityDenied(
            f"{request.name}.{request.function}: an async export whose result can carry a stream runs in an "
            f"isolated worker, which links no caps; this component imports {', '.join(sorted(needed))}"
        )
    payload = json.dumps(
        {
            "root": str(artifacts_root), "sha256": request.sha256, "name": request.name,
            "function": request.function, "args": request.args, "profile": request.profile.name,
            "timeout_s": request.timeout_s, "fuel": request.fuel, "toolkit": request.toolkit,
        }
    ).encode()
    t0 = time.perf_counter()
    deadline = time.monotonic() + request.timeout_s + STARTUP_GRACE_S
    if not pool.slots.acquire(timeout=request.timeout_s):
        raise Timeout(
            f"{request.name}: all {MAX_WORKERS} isolated workers stayed busy for {request.timeout_s:g} s"
        )
    try:
        worker = pool.take()
        answer, stopped = worker.ask(payload, deadline, request.cancel)
        if stopped is None:
            pool.give(worker)
        else:
            worker.kill()
    finally:
        pool.slots.release()
    if stopped == "cancelled":
        raise Cancelled(f"{request.name}: {request.function} cancelled by the caller; its worker was stopped")
    if stopped == "timeout":
        raise Timeout(
            f"{request.name}: {request.function} exceeded its {request.timeout_s:g} s deadline; its worker "
            "was stopped"
        )
    if stopped == "exited" or answer is None:
        stderr = b"".join(worker.stderr).decode("utf-8", errors="replace")
        if worker.proc.returncode == -signal.SIGABRT or "not yet implemented" in stderr:
            raise StreamAnswer(
                f"{request.name}.{request.function} answered with a stream/future value, which wasmtime-py's "
                "C API cannot read yet (ACT: a streaming tool-result); the call ran in an isolated worker, "
                "so only the worker stopped"
            )
        tail = stderr.strip().splitlines()[-1:] or [f"exit code {worker.proc.returncode}"]
        raise Internal(f"{request.name}: the isolated worker failed: {tail[0][:300]}")
    if "error" in answer:
        e = answer["error"]
        if e.get("detail_set"):
            raise ComponentError(e["message"], e.get("detail"))
        # the class an in-process call raises, so callers catch the same thing either way
        raise of_kind(e["kind"], e["message"])
    usage = Usage(
        wall_s=time.perf_counter() - t0, fuel=answer.get("fuel"), bytes_out=answer.get("bytes_out", 0)
    )
    return ComponentResult(answer["value"], _unhex(answer.get("stdout")), _unhex(answer.get("stderr")), usage)


def _unhex(text: str | None) -> bytes:
    return bytes.fromhex(text) if text else b""


def _serve() -> int:
    """The worker: one JSON request per line on stdin, one JSON answer per line on stdout."""
    from wbcore_wasmtime.component import ComponentError, ComponentRequest, ComponentRunner
    from wbcore_runtime.trust import policy
    from wbcore_runtime.store.artifacts import ArtifactStore
    from wbcore_runtime.contract.calls import Principal

    runners: dict[str, ComponentRunner] = {}
    for line in iter(lambda: sys.stdin.buffer.readline(MAX_ANSWER), b""):
        req = json.loads(line)
        runner = runners.get(req["root"])
        if runner is None:
            host = WorkerHost(ArtifactStore(Path(req["root"])))
            runner = runners[req["root"]] = ComponentRunner(host, isolate=False)  # type: ignore[arg-type]
        request = ComponentRequest(
            name=req["name"], sha256=req["sha256"], function=req["function"], args=req["args"],
            profile=policy.profile(req["profile"]), timeout_s=float(req["timeout_s"]),
            principal=Principal(toolkit=req.get("toolkit") or ""), fuel=req.get("fuel"),
            toolkit=req.get("toolkit"),
        )
        try:
            res = runner.call(request)
            answer: dict[str, Any] = {
                "value": res.value, "stdout": res.stdout.hex(), "stderr": res.stderr.hex(),
                "fuel": res.usage.fuel, "bytes_out": res.usage.bytes_out,
            }
        except ComponentError as exc:
            answer = {
                "error": {
                    "kind": "internal", "message": exc.message, "detail": exc.detail, "detail_set": True,
                }
            }
        except WbError as exc:
            answer = {"error": {"kind": exc.kind.value, "message": exc.message}}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    os._exit(_serve())  # no finalizer noise from wasmtime-py at teardown
