"""Fuzzing the os_process frame protocol over real pipes (issue 22 item 6), both ways:

- **a hostile host** (anything that can write to a worker's stdin): random, truncated,
  oversized, duplicated and interleaved frames, another session's secret. The sandboxed
  worker answers each frame (``Pong``, ``Refused`` with a documented reason, ``ExecResult``)
  or ends with exit 0/3 — within a bounded wait, without a traceback — and while it lives it
  still serves its real host.
- **a hostile worker** (a compromised guest process speaking to the host): after the
  handshake it answers the host's ``Exec`` with arbitrary bytes or frames and then goes
  quiet. The host's call ends with a named error (or a result it could check) by its deadline
  plus the grace, never hangs and never raises anything but the project's errors.

Examples are few (a worker costs ~0.5 s to start) so the file stays under ~20 s; the
host-independent half runs many more in tests/core/test_frames_fuzz.py.
"""

from __future__ import annotations

import os
import select
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wbcore_process.sandbox import probe

wasmtime = pytest.importorskip("wasmtime")
pytestmark = pytest.mark.skipif(not probe()[0], reason=f"sandbox unavailable here: {probe()[1]}")

from wbcore_runtime.wire import frames as F  # noqa: E402
from wbcore_testing.conformance import ECHO_WAT, command_request  # noqa: E402
from wbcore_runtime.contract.errors import WbError  # noqa: E402
from wbcore_process import pool as pool_mod  # noqa: E402
from wbcore_process.pool import GRACE_S, Pool, spawn_worker  # noqa: E402
from wbcore_process.tiers import OsProcessTier  # noqa: E402

REASONS = {"too-large", "unknown-type", "malformed", "secret", "version", "unexpected"}
#: Every wait in this file: a worker that neither answers nor ends within it is a hang.
WAIT_S = 10.0


# --- a hostile host ----------------------------------------------------------------------------


class Live:
    """One worker reused across examples while it lives (a fresh one when it has ended)."""

    worker = None

    @classmethod
    def get(cls):
        w = cls.worker
        if w is None or not w.box.alive():
            if w is not None:
                w.close()
            w = cls.worker = spawn_worker(caps_lib())
            w.chan.send_frame(F.ping(w.secret))
            assert _answer(w) == (F.PONG, None)
        return w

    @classmethod
    def drop(cls) -> None:
        if cls.worker is not None:
            cls.worker.close()
            cls.worker = None


@pytest.fixture(scope="module", autouse=True)
def _one_worker():
    yield
    Live.drop()


def _answer(w) -> tuple[int | None, str | None]:
    """The worker's next frame as ``(type, refusal reason)``, or ``(None, None)`` when it ended
    (its stdout closed); a worker that does neither within :data:`WAIT_S` fails the test."""
    ready, _, _ = select.select([w.box.stdout_fd], [], [], WAIT_S)
    assert ready, f"the worker neither answered nor ended within {WAIT_S} s (a hang)"
    try:
        kind, payload = w.chan.recv()
    except F.FrameError as exc:
        assert exc.reason == "eof", exc.message  # the worker only ever writes whole frames
        return None, None
    if kind == F.REFUSED:
        obj, _ = F.unpack(payload)
        assert obj.get("reason") in REASONS and obj.get("message"), obj
        return kind, obj["reason"]
    assert kind in (F.PONG, F.EXEC_RESULT), F.name(kind)
    return kind, None


def _ended_cleanly(w) -> None:
    code = w.box.wait(timeout=WAIT_S)
    assert code in (0, 3), f"the worker ended with {code}"
    assert "Traceback" not in w.stderr_tail()


_secret = st.sampled_from(["right", "wrong", "none"])
_obj = st.fixed_dictionaries({}, optional={
    "id": st.integers(min_value=-2, max_value=2**70), "sha256": st.text(max_size=70),
    "argv": st.lists(st.one_of(st.text(max_size=10), st.integers()), max_size=3),
    "memory": st.integers(min_value=-1, max_value=2**45),
    "timeout_s": st.one_of(st.integers(-5, 10**30), st.floats()),
    "stdout_cap": st.integers(min_value=-1, max_value=2**41),
    "stderr_cap": st.integers(min_value=0, max_value=99),
})
#: One step a hostile host takes: (recipe, times sent back to back before any answer is read).
_step = st.tuples(st.one_of(
    st.tuples(st.just("sealed"), st.sampled_from(sorted(F.FROM_HOST - F.RAW)), _obj,
              st.lists(st.binary(max_size=64), max_size=3), _secret),
    st.tuples(st.just("ping"), _secret), st.tuples(st.just("shutdown"), _secret),
    st.tuples(st.just("json-garbage"), st.sampled_from(sorted(F.NAMES)), st.binary(max_size=80)),
    st.tuples(st.just("oversize"), st.sampled_from(sorted(F.NAMES)), st.integers(F.MAX_FRAME + 1, 2**32 - 1)),
    st.tuples(st.just("unknown-type"), st.integers(0, 255).filter(lambda k: k not in F.NAMES)),
    st.tuples(st.just("cut"), st.binary(min_size=1, max_size=64), st.floats(0, 1, exclude_max=True)),
    st.tuples(st.just("noise"), st.binary(min_size=1, max_size=64)),
), st.sampled_from([1, 1, 2]))


def _bytes(w, recipe: tuple) -> bytes:
    what = recipe[0]
    if what == "sealed":
        _, kind, obj, blobs, sec = recipe
        if sec == "none":
            return F.encode(kind, F.pack(obj, *blobs))
        return F.seal(kind, w.secret if sec == "right" else F.new_secret(), obj, *blobs)
    if what in ("ping", "shutdown"):
        secret = w.secret if recipe[1] == "right" else F.new_secret() if recipe[1] == "wrong" else b""
        if what == "ping":
            return F.ping(secret) if secret else F.encode(F.PING, b"")
        return F.shutdown(secret) if secret else F.encode(F.SHUTDOWN, b"")
    if what == "json-garbage":
        return F.encode(recipe[1], recipe[2])
    if what == "oversize":
        return recipe[2].to_bytes(4, "little") + bytes([recipe[1]])
    if what == "unknown-type":
        return (3).to_bytes(4, "little") + bytes([recipe[1]]) + b"abc"
    if what == "cut":  # a frame that never finishes: the host then hangs up
        frame = F.seal(F.EXEC, w.secret, {"id": 1}, recipe[1])
        return frame[:max(1, int(len(frame) * recipe[2]))]
    return recipe[1]  # noise, then the host hangs up


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_step, min_size=1, max_size=5))
def test_a_hostile_host_is_answered_or_ended_never_hung(steps: list[tuple[tuple, int]]) -> None:
    w = Live.get()
    for recipe, times in steps:
        data = _bytes(w, recipe)
        os.write(w.box.stdin_fd, data * times)
        if recipe[0] in ("cut", "noise"):
            # whatever it made of the bytes, the stream now ends: a clean end, within the bound
            w.box.proc.stdin.close()
            while _answer(w)[0] is not None:
                pass
            _ended_cleanly(w)
            Live.drop()
            return
        for _ in range(times):
            kind, reason = _answer(w)
            if kind is None:  # ended: only a Shutdown with the secret or a broken stream may end it
                assert recipe[0] in ("shutdown", "oversize", "unknown-type"), recipe
                _ended_cleanly(w)
                Live.drop()
                return
            if recipe[0] in ("oversize", "unknown-type"):  # the stream cannot be resynchronised
                assert reason == ("too-large" if recipe[0] == "oversize" else recipe[0])
                assert _answer(w) == (None, None)
                _ended_cleanly(w)
                Live.drop()
                return
            if recipe[0] == "sealed" and recipe[4] != "right":
                assert reason in ("secret", "unexpected", "malformed"), reason
            if recipe[0] == "ping":
                assert (kind, reason) == ((F.PONG, None) if recipe[1] == "right" else (F.REFUSED, "secret"))
    # still in step with its host: the right secret is answered
    w.chan.send_frame(F.ping(w.secret))
    assert _answer(w) == (F.PONG, None)


# --- a hostile worker --------------------------------------------------------------------------

#: Speaks the handshake, reads the host's first Exec, answers it and then holds the line
#: open, silent. argv: ``raw HEX`` (those bytes) or ``result HEX`` (an ExecResult whose JSON
#: object is HEX with ``"id": "{id}"`` set to the Exec's id; the rest of argv: its blobs).
EVIL = r"""
import json, os, sys, time
sys.path.insert(0, "/wb/lib")
import frames
frames.read_secret(int(os.environ["WB_SECRET_FD"]))
chan = frames.stdio_channel()
chan.recv()
chan.send_frame(frames.pong())
kind, payload = chan.recv()
obj, _ = frames.unpack(payload)
mode, data = sys.argv[1], bytes.fromhex(sys.argv[2])
if mode == "result":
    out = json.loads(data)
    if out.get("id") == "{id}":
        out["id"] = obj.get("id")
    data = frames.encode(frames.EXEC_RESULT, frames.pack(out, *(bytes.fromhex(b) for b in sys.argv[3:])))
os.write(chan.write_fd, data)
time.sleep(120)
"""


def _spawn_evil(script: Path, reply: tuple[str, ...]):
    from wbcore_process.sandbox import Bind, SandboxLimits, Sandbox, system_binds

    base = Path(sys.base_prefix).resolve()
    binds = system_binds() + [Bind(base, str(base)), Bind(script, "/wb/evil.py"),
                              Bind(pool_mod.FRAMES, "/wb/lib/frames.py")]
    limits = SandboxLimits(cpu_seconds=30, address_space=4 << 30, file_size=1 << 20, open_files=64,
                           processes=8,
                    tmp_bytes=1 << 20, out_bytes=1 << 20, out_files=4)
    secret = F.new_secret()
    box = Sandbox().spawn([str(pool_mod._python()), "-I", "-S", "/wb/evil.py", *reply], binds=binds,
                          limits=limits, secret=secret, start_timeout=30)
    return pool_mod.Worker(box, secret)


_result_obj = st.fixed_dictionaries({"id": st.sampled_from(["{id}", 0, -1, "x"])}, optional={
    "exit": st.one_of(st.integers(-2**40, 2**40), st.text(max_size=3), st.none()),
    "reason": st.sampled_from(["", "stdout", "stderr", "timeout", "exit", 7]),
    "trap": st.one_of(st.none(), st.text(max_size=8)), "trap_code": st.text(max_size=8),
    "peak": st.integers(-1, 2**50), "wall": st.one_of(st.floats(), st.integers(-1, 10**20)),
    "out_size": st.integers(-1, 2**40), "err_size": st.integers(-1, 2**40),
    "missing": st.booleans(), "refused": st.booleans(), "no_start": st.booleans(),
    "error": st.one_of(st.none(),
                       st.fixed_dictionaries({"kind": st.text(max_size=12),
                                              "message": st.text(max_size=20)})),
    "cpu": st.one_of(st.floats(), st.booleans()),
})


def _result(obj: dict, blobs: list[bytes]) -> tuple[str, ...]:
    import json

    return ("result", json.dumps(obj).encode().hex(), *(b.hex() for b in blobs))


def _raw(data: bytes) -> tuple[str, ...]:
    return ("raw", data.hex())


_reply = st.one_of(
    st.binary(max_size=200).map(_raw),
    st.builds(_result, _result_obj, st.lists(st.binary(max_size=20), max_size=3)),
    st.builds(lambda k, p: _raw(F.encode(k, p)),
              st.sampled_from([F.LINK, F.BROKER_CALL, F.REFUSED, F.PONG, F.EXEC]), st.binary(max_size=80)),
    st.builds(lambda k, o: _raw(F.encode(k, F.pack(o))), st.sampled_from([F.LINK, F.BROKER_CALL, F.REFUSED]),
              st.dictionaries(st.text(max_size=6), st.one_of(st.integers(), st.text(max_size=6)),
                              max_size=4)),
    st.integers(F.MAX_FRAME + 1, 2**32 - 1).map(
        lambda n: _raw(n.to_bytes(4, "little") + bytes([F.EXEC_RESULT]))),
    st.just(_raw((1 << 20).to_bytes(4, "little") + bytes([F.EXEC_RESULT]) + b"only part of it")),
)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(_reply)
def test_a_hostile_worker_ends_the_call_with_a_named_error_by_the_deadline(make_runtime, tmp_path_factory,
                                                                         reply: tuple[str, ...]) -> None:
    rt = make_runtime()
    script = tmp_path_factory.mktemp("evil") / "evil.py"
    script.write_text(EVIL)
    pool = Pool(1, caps_lib())
    orig = pool_mod.spawn_worker
    pool_mod.spawn_worker = lambda _lib: _spawn_evil(script, reply)
    try:
        req = command_request(rt, wasmtime.wat2wasm(ECHO_WAT), stdin=b"hi", timeout_s=1.0)
        start = time.monotonic()
        try:
            OsProcessTier(rt, pool).call(req)
        except WbError as exc:
            assert str(exc).strip(), "an error without a message"
        elapsed = time.monotonic() - start
        # the spawn is in the call; the bound is the deadline plus the grace plus the start
        assert elapsed < req.timeout_s + GRACE_S + 8.0, f"the host waited {elapsed:.1f} s"
    finally:
        pool_mod.spawn_worker = orig
        pool.close()


def caps_lib() -> Path:
    """The caps bridge's guest side, as the tier takes it: served by the WASI guest runner's plugin."""
    import tempfile

    from wbcore_runtime.contract import guest
    from wbcore_runtime.runtime import Runtime

    with tempfile.TemporaryDirectory() as home:
        return guest.sandbox_caps(Runtime.open(plugins=["wasmtime"], home=home), "os_process")
