"""The tier conformance suite: what every isolation tier must do, written once, run per tier.

A tier's plugin runs it from its own tests by subclassing :class:`TierConformance`::

    from wbcore_testing.conformance import TierConformance

    class TestConformance(TierConformance):
        tier = "container"
        request_kind = frames.PTY_OPEN      # a host → agent request its agent reads
        def open_agent(self, rt): ...        # a raw channel to a fresh agent (no handshake)
        def sandbox_facts(self, rt): ...     # what the sandbox sees (network, host files)

and pytest collects every ``test_*`` below for that tier. The rows (issue 13's acceptance):
output equality with the instance tier (hand-written guests and the shipped command
toolkits), the deadline (an infinite loop ends at deadline + ≤ 1 s), a memory bomb, an
output flood, a fork bomb (tiers that run posix CLIs), no network, no host file visible,
caps bridged (a kv round trip), the session secret required (missing or wrong: refused),
malformed frames refused without a crash. A row a tier cannot have (the instance tier has
no channel and no agent) is skipped with the reason, never passed silently.

This module needs pytest and the instance tier (wbcore-wasmtime) to *run*, and the subclass
gives it a WAT compiler (``compile_wat``); it is imported only by tests.

Two suites live here. :class:`TierConformance` runs wasm commands (WAT guests) at a tier and
speaks to its guest agent frame by frame; :class:`PosixTierConformance` runs ``posix``
commands (POSIX ``sh`` scripts) at a tier that runs native code — the container and microvm
tiers run it; the microvm tier runs no wasm. The guests, :func:`command_request`,
:func:`outcome` and :class:`PtySessions` (a shell sandbox's PTY sessions, frame by frame)
also serve a tier's own tests beyond the suite.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import select
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import pytest

from wbcore_runtime.wire import frames
from wbcore_runtime.build.builder import POSIX_MAGIC
from wbcore_runtime.contract.calls import CallResult, CommandRequest, LimitExceeded, Principal
from wbcore_runtime.contract.errors import Timeout, WbError
from wbcore_runtime.contract import terminal
from wbcore_runtime.trust.policy import profile

REPO = Path(__file__).resolve().parents[3]

FD_WRITE = '(import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))'
FD_READ = '(import "wasi_snapshot_preview1" "fd_read" (func $r (param i32 i32 i32 i32) (result i32)))'
PROC_EXIT = '(import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))'
#: stdin → stdout, any length.
ECHO_WAT = f"""(module {FD_READ} {FD_WRITE}
  (memory (export "memory") 2)
  (func (export "_start") (local $n i32)
    (loop $l
      (i32.store (i32.const 0) (i32.const 1024)) (i32.store (i32.const 4) (i32.const 65536))
      (drop (call $r (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $n (i32.load (i32.const 8)))
      (if (i32.eqz (local.get $n)) (then (return)))
      (i32.store (i32.const 16) (i32.const 1024)) (i32.store (i32.const 20) (local.get $n))
      (drop (call $w (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 8)))
      (br $l))))"""
#: argv, NUL-separated, on stdout.
ARGS_WAT = f"""(module {FD_WRITE}
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $sizes (i32.const 0) (i32.const 4)))
    (drop (call $args (i32.const 64) (i32.const 1024)))
    (i32.store (i32.const 16) (i32.const 1024)) (i32.store (i32.const 20) (i32.load (i32.const 4)))
    (drop (call $w (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 8)))))"""
#: "oops" on stderr, exit 7.
STDERR_WAT = f"""(module {FD_WRITE} {PROC_EXIT}
  (memory (export "memory") 1)
  (data (i32.const 100) "oops")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 100)) (i32.store (i32.const 4) (i32.const 4))
    (drop (call $w (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $exit (i32.const 7))))"""
TRAP_WAT = '(module (memory (export "memory") 1) (func (export "_start") unreachable))'
SPIN_WAT = '(module (memory (export "memory") 1) (func (export "_start") (loop $l (br $l))))'
#: Grows memory 16 pages at a time until refused, then traps.
BOMB_WAT = """(module (memory (export "memory") 1)
  (func (export "_start")
    (loop $l (br_if $l (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
    unreachable))"""
#: Writes 64 KiB to stdout forever.
FLOOD_WAT = f"""(module {FD_WRITE}
  (memory (export "memory") 2)
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 1024)) (i32.store (i32.const 4) (i32.const 65536))
    (loop $l (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))) (br $l))))"""


def errno_wat(call: str) -> str:
    """A guest that makes one WASI call (``call``: the import line and the call expression,
    ``$f``) and writes the errno it got as one byte: 8 (EBADF) means there was nothing there."""
    imp, expr = call.split("|")
    return f"""(module {FD_WRITE} {imp}
  (memory (export "memory") 1)
  (func (export "_start")
    (i32.store8 (i32.const 200) {expr})
    (i32.store (i32.const 0) (i32.const 200)) (i32.store (i32.const 4) (i32.const 1))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""


#: Asks WASI for a preopened folder (fd 3): none exists, at any tier.
PREOPEN_WAT = errno_wat('(import "wasi_snapshot_preview1" "fd_prestat_get"'
                        ' (func $f (param i32 i32) (result i32)))'
                        '|(call $f (i32.const 3) (i32.const 100))')
#: Accepts a connection on fd 3: no socket exists, at any tier.
SOCKET_WAT = errno_wat('(import "wasi_snapshot_preview1" "sock_accept"'
                       ' (func $f (param i32 i32 i32) (result i32)))'
                       '|(call $f (i32.const 3) (i32.const 0) (i32.const 100))')


def cbor_data(blob: bytes) -> str:
    """``blob`` as the body of a WAT data string (every byte escaped)."""
    return "".join(f"\\{b:02x}" for b in blob)


def kv_wat(*reqs: bytes) -> str:
    """A guest that sends each CBOR request through ``wb.kv`` and writes the last answer to
    stdout; a Dock error becomes its exit status."""
    calls = [(64 + 512 * i, r) for i, r in enumerate(reqs)]
    data = "".join(f'(data (i32.const {at}) "{cbor_data(r)}")' for at, r in calls)
    body = "".join(
        f"(local.set $n (call $kv (i32.const {at}) (i32.const {len(r)}) (i32.const 8192) (i32.const 60000)))"
        "(if (i64.lt_s (local.get $n) (i64.const 0))"
        " (then (call $exit (i32.wrap_i64 (i64.sub (i64.const 0) (local.get $n))))))"
        for at, r in calls)
    return f"""(module {FD_WRITE} {PROC_EXIT}
  (import "wb" "kv" (func $kv (param i32 i32 i32 i32) (result i64)))
  (memory (export "memory") 2) {data}
  (func (export "_start") (local $n i64) {body}
    (i32.store (i32.const 0) (i32.const 8192)) (i32.store (i32.const 4) (i32.wrap_i64 (local.get $n)))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""


#: The shipped command toolkits and the calls compared with the instance tier: (argv, stdin).
#: ``b64`` (WAT) builds in milliseconds; the others need their language's lane and run in
#: the slow stage.
SHIPPED: dict[str, list[tuple[list[str], bytes]]] = {
    "b64": [([], bytes(range(256)) * 8), (["decode"], b"aGVsbG8sIHdvcmxk\n"),
            (["decode"], b"@@not base64@@")],
    "sha256": [([], b"abc"), (["hmac", "Jefe"], b"what do ya want for nothing?"),
               (["check", "00" * 32], b"x")],
    "hexdump": [(["dump"], b"hello, world\n"), (["stats"], bytes(range(256))),
                (["strings"], b"\0\0name\0path/x\0")],
    "lines": [(["freq", "2"], b"b\na\nb\nc\nb\na\n"), (["dedupe"], b"b\na\nb\nc\na\n"),
              (["stats"], b"one two\n\nthree\n")],
    "freq": [(["lines"], b"a\nb\na\n"), (["chars", "-n", "0"], "héllo\n".encode())],
    "csv": [(["columns"], b"a,b\n1,2\n"), (["stats", "b"], b"a,b\n1,2\n3,4\n")],
    "mdtext": [(["plain"], b"# Title\n\nSome *text* and `code`.\n"), (["outline"], b"# A\n## B\n# C\n")],
    "table": [(["text"], b'[{"name":"Ada","langs":3},{"name":"Grace","langs":12}]')],
    "notes": [(["put", "todo"], b"buy milk\n"), (["get", "todo"], b""), (["list", "to"], b"")],
}
CHEAP = frozenset({"b64"})


def command_request(rt: Any, wasm: bytes, **fields: Any) -> CommandRequest:
    """A call of the module ``wasm`` (stored in ``rt``'s artifacts) as a command of toolkit
    "guest": no argv or stdin, the compute profile, a 5 s deadline; ``fields`` override any."""
    art = rt.artifacts.put_bytes(bytes(wasm))
    base = CommandRequest(name="guest", sha256=art.sha256, artifact=rt.artifacts.path(art.sha256), argv=(),
                          stdin=b"", profile=profile("compute"), timeout_s=5.0,
                          principal=Principal(toolkit="guest"))
    return dataclasses.replace(base, **fields)


def outcome(fn: Callable[[], Any]) -> tuple[Any, ...]:
    """What a call gives, comparable across tiers: the result, or the error's class and limit."""
    from wbcore_runtime.contract.errors import WbError

    try:
        res = fn()
    except WbError as exc:
        return type(exc).__name__, getattr(exc, "limit", None)
    return res.stdout, res.stderr, res.exit_code


@dataclasses.dataclass
class Agent:
    """A raw channel to a fresh agent of the tier (before its handshake)."""

    send: Callable[[bytes], None]
    recv: Callable[[], tuple[int, bytes]]
    read_fd: int
    secret: bytes
    alive: Callable[[], bool]
    close: Callable[[], None]

    def answer(self, timeout: float = 10.0) -> tuple[int, bytes]:
        ready, _, _ = select.select([self.read_fd], [], [], timeout)
        assert ready, f"the agent did not answer within {timeout} s"
        return self.recv()

    def refusal(self) -> dict[str, Any]:
        kind, payload = self.answer()
        assert kind == frames.REFUSED, f"expected Refused, got {frames.name(kind)}"
        return frames.unpack(payload)[0]

    def handshake(self) -> None:
        self.send(frames.ping(self.secret))
        kind, payload = self.answer()
        assert kind == frames.PONG, frames.name(kind)
        frames.check_pong(payload)

    def ended(self, timeout: float = 5.0) -> bool:
        end = time.monotonic() + timeout
        while self.alive() and time.monotonic() < end:
            time.sleep(0.05)
        return not self.alive()


class PtySessions:
    """Drives the PTY sessions of a shell sandbox's agent frame by frame (``wbx shell``'s
    protocol: PtyOpen, PtyData, PtyResize, PtyClose). ``box`` is what a tier's shell opener
    returns; its ``channel`` and ``secret`` are read at each call (a test may replace the
    channel). ``timeout`` bounds each wait; ``env`` goes with every PtyOpen that gives none
    (``None``: the frame carries no env)."""

    def __init__(self, timeout: float = 10.0, env: Mapping[str, str] | None = None) -> None:
        self.timeout = timeout
        self.env = env

    def open(self, box: Any, sid: int, program: str = "/bin/sh", args: Sequence[str] = (),
             secret: bytes | None = None, rows: int = 24, cols: int = 80,
             env: Mapping[str, str] | None = None) -> tuple[int, Any]:
        """Opens session ``sid`` -> the PtyOpened (or Refused) frame's kind and object."""
        body: dict[str, Any] = {"session": sid, "program": program, "args": list(args), "rows": rows,
                                "cols": cols}
        if (env := env or self.env) is not None:
            body["env"] = dict(env)
        box.channel.send_frame(frames.seal(frames.PTY_OPEN, secret or box.secret, body))
        return self.next(box, {frames.PTY_OPENED, frames.REFUSED})

    def next(self, box: Any, kinds: set[int], timeout: float | None = None) -> tuple[int, Any]:
        """The next frame of one of ``kinds`` (other frames are skipped), decoded."""
        timeout = self.timeout if timeout is None else timeout
        end = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([box.channel.read_fd], [], [], max(0.0, end - time.monotonic()))
            assert ready, f"no {sorted(frames.name(k) for k in kinds)} within {timeout} s"
            kind, payload = box.channel.recv()
            if kind in kinds:
                return kind, (frames.unpack(payload)[0] if kind not in frames.RAW
                              else frames.open_pty_data(payload))

    def type(self, box: Any, sid: int, text: bytes) -> None:
        box.channel.send_frame(frames.pty_data(sid, text, box.secret))

    def output_until(self, box: Any, sid: int, needle: bytes, timeout: float | None = None) -> bytes:
        """Session ``sid``'s output up to (and a little past) ``needle``."""
        seen = b""
        end = time.monotonic() + (self.timeout if timeout is None else timeout)
        while needle not in seen:
            kind, got = self.next(box, {frames.PTY_DATA}, max(0.1, end - time.monotonic()))
            if got[0] == sid:
                seen += got[1]
        return seen

    def until_closed(self, box: Any) -> tuple[bytes, dict[str, Any]]:
        """Every byte of output until the next PtyClosed, and that frame's object."""
        seen = b""
        while True:
            kind, got = self.next(box, {frames.PTY_DATA, frames.PTY_CLOSED})
            if kind == frames.PTY_CLOSED:
                return seen, got
            seen += got[1]

    def drain(self, box: Any) -> bytes:
        """The output waiting on the channel (until it is quiet for 0.2 s)."""
        seen = b""
        while select.select([box.channel.read_fd], [], [], 0.2)[0]:
            kind, payload = box.channel.recv()
            if kind == frames.PTY_DATA:
                seen += frames.open_pty_data(payload)[1]
        return seen

    def paste(self, box: Any, typed: bytes, seconds: float, runtime: Any) -> tuple[int, bytes]:
        """Types ``typed`` through the terminal service's ``attach`` (as ``wbx shell`` does; ``runtime``
        serves it: wbcore-terminal) while reading all it writes back, both at once, within
        ``seconds`` -> (the exit code, the output)."""
        import threading

        pty = terminal.service(runtime)

        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        seen = bytearray()

        def feed() -> None:
            with os.fdopen(in_w, "wb") as fh:
                fh.write(typed)

        def drain() -> None:
            while chunk := os.read(out_r, 1 << 16):
                seen.extend(chunk)

        threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=drain, daemon=True)]
        for t in threads:
            t.start()
        try:
            code = pty.attach(box.channel, box.secret, terminal.ShellRequest(), stdin_fd=in_r,
                              stdout_fd=out_w, deadline=time.monotonic() + seconds)
        finally:
            os.close(out_w)
            os.close(in_r)
        threads[1].join(10)
        if not threads[1].is_alive():
            os.close(out_r)
        return code, bytes(seen)


@dataclasses.dataclass(frozen=True)
class SandboxFacts:
    """What a process inside the tier's sandbox sees (``None``: the tier has no OS sandbox)."""

    interfaces: list[str]  # network interfaces
    connect_refused: bool  # an outbound TCP connect failed
    visible: Callable[[str], bool]  # whether a host path exists in the sandbox


class TierConformance:
    """Subclass with ``tier = "<name>"`` (and the hooks the tier has) in the tier's tests."""

    tier: str = ""
    #: The tier runs posix CLIs (the fork-bomb row).
    posix: bool = False
    #: A host → agent request frame the agent reads (json, sealed), for the secret rows.
    request_kind: int | None = None
    #: WAT text → wasm bytes (the engine's, e.g. ``staticmethod(wasmtime.wat2wasm)``: the
    #: core never imports an engine).
    compile_wat: Callable[[str], bytes] | None = None

    # --- hooks ---------------------------------------------------------------------------

    def open_agent(self, rt: Any) -> Agent | None:
        """A fresh agent of this tier; ``None``: the tier has no channel (skipped rows)."""
        return None

    def sandbox_facts(self, rt: Any, probe_path: str) -> SandboxFacts | None:
        """Facts seen from inside the sandbox; ``None``: nothing but the wasm sandbox."""
        return None

    def request_payload(self) -> dict[str, Any]:
        """A well-formed body for ``request_kind`` (the secret is added or withheld by the test)."""
        return {}

    # --- fixtures ------------------------------------------------------------------------

    @pytest.fixture
    def rt(self, make_runtime: Any) -> Any:
        pytest.importorskip("wbcore_wasmtime", reason="the instance tier (wbcore-wasmtime) is the reference")
        rt = make_runtime()
        if self.tier not in rt.tiers.names():
            pytest.skip(f"tier {self.tier} is not installed")
        avail = rt.tiers.get(self.tier).available()
        if not avail.ok:
            pytest.skip(f"tier {self.tier} is unavailable here: {avail.reason}")
        return rt

    def drivers(self, rt: Any) -> tuple[Any, Any]:
        return rt.tiers.get("instance").factory(rt), rt.tiers.get(self.tier).factory(rt)

    def request(self, rt: Any, wat: str, **kw: Any) -> Any:
        if self.compile_wat is None:
            pytest.skip("the tier's test module gives no WAT compiler (compile_wat)")
        return command_request(rt, self.compile_wat(wat), **kw)

    # --- the same answers as the instance tier ---------------------------------------------

    @pytest.mark.parametrize(("wat", "argv", "stdin", "mode"), [
        (ECHO_WAT, (), b"through the tier \x00\xff" * 1000, "argv"),
        (ECHO_WAT, (), b"", "argv"),
        (ECHO_WAT, ("-n", "x y"), b"rest", "stdin1"),
        (ARGS_WAT, ("one", "two words", "ünï"), b"", "argv"),
        (STDERR_WAT, (), b"", "argv"),
        (TRAP_WAT, (), b"", "argv"),
    ], ids=["echo", "empty", "stdin1", "argv", "stderr-exit", "trap"])
    def test_output_equals_the_instance_tier(self, rt: Any, wat: str, argv: tuple[str, ...], stdin: bytes,
                                             mode: str) -> None:
        instance, tier = self.drivers(rt)
        req = self.request(rt, wat, argv=argv, stdin=stdin, arg_mode=mode)
        assert outcome(lambda: tier.call(req)) == outcome(lambda: instance.call(req))

    @pytest.mark.parametrize("name", [
        pytest.param(n, marks=() if n in CHEAP else (pytest.mark.slow,)) for n in SHIPPED])
    def test_shipped_toolkit_output_equals_the_instance_tier(self, rt: Any, make_runtime: Any,
                                                             toolkit_root: Path, name: str) -> None:
        from wbcore_runtime.build import builder
        from wbcore_runtime.contract.errors import WbError

        shutil.copytree(REPO / "toolkits" / name, toolkit_root / name)
        rt = make_runtime()
        try:
            builder.build(rt, name)
        except WbError as exc:
            pytest.skip(f"toolkit {name} does not build here: {exc}")
        try:
            rt.resolve("command", name, tier=self.tier)
        except WbError as exc:
            if "cannot host" not in exc.message:
                raise
            pytest.skip(f"toolkit {name}: {exc.message}")  # e.g. a lane whose runner is in-process
        for argv, stdin in SHIPPED[name]:
            want = outcome(partial(rt.call, name, argv, stdin, tier="instance"))
            got = outcome(partial(rt.call, name, argv, stdin, tier=self.tier))
            assert got == want, f"{name} {argv}: {self.tier} gave {got!r:.300}, instance {want!r:.300}"

    # --- limits ----------------------------------------------------------------------------

    def test_an_infinite_loop_ends_at_its_deadline(self, rt: Any) -> None:
        from wbcore_runtime.contract.errors import Timeout

        _, tier = self.drivers(rt)
        t0 = time.monotonic()
        with pytest.raises(Timeout, match="deadline"):
            tier.call(self.request(rt, SPIN_WAT, timeout_s=1.0))
        assert time.monotonic() - t0 <= 1.0 + 1.0

    def test_a_memory_bomb_hits_the_profiles_limit(self, rt: Any) -> None:
        instance, tier = self.drivers(rt)
        req = self.request(rt, BOMB_WAT)
        assert (outcome(lambda: tier.call(req)) == outcome(lambda: instance.call(req))
                == ("LimitExceeded", "memory"))

    def test_an_output_flood_is_stopped_at_the_cap(self, rt: Any) -> None:
        instance, tier = self.drivers(rt)
        req = self.request(rt, FLOOD_WAT, timeout_s=20.0)
        t0 = time.monotonic()
        assert outcome(lambda: tier.call(req)) == ("LimitExceeded", "stdout")
        assert time.monotonic() - t0 < 10.0  # stopped at the cap, not at the deadline
        assert outcome(lambda: instance.call(req)) == ("LimitExceeded", "stdout")

    def test_a_fork_bomb_is_contained(self, make_runtime: Any, toolkit_root: Path) -> None:
        if not self.posix:
            pytest.skip(f"tier {self.tier} runs no posix CLIs (a wasm guest cannot fork)")
        rt = self.tier_runtime(make_runtime)
        from wbcore_runtime.build import builder
        from wbcore_runtime.contract.errors import Timeout
        from wbcore_testing.fixtures import manifest_text, write_toolkit

        write_toolkit(toolkit_root, "sh", manifest_text("sh", exec="posix", extra={"CLI_BIN": "sh"}))
        rt.discover(refresh=True)
        builder.build(rt, "sh")
        t0 = time.monotonic()
        try:
            res = rt.call("sh", ["-c", "b() { b | b & }; b; sleep 1; echo survived"], b"", timeout=5.0,
                          tier=self.tier)
            out = (res.stdout + res.stderr).decode(errors="replace").lower()
            assert "fork" in out or "resource" in out, out[-500:]
        except Timeout:
            pass
        assert time.monotonic() - t0 < 5.0 + 1.0
        assert rt.call("sh", ["-c", "echo after"], b"", tier=self.tier).stdout == b"after\n"

    # --- what the sandbox sees ---------------------------------------------------------------

    def test_no_network(self, rt: Any, tmp_path: Path) -> None:
        instance, tier = self.drivers(rt)
        req = self.request(rt, SOCKET_WAT)
        assert outcome(lambda: tier.call(req)) == outcome(lambda: instance.call(req)) == (b"\x08", b"", 0)
        facts = self.sandbox_facts(rt, str(tmp_path))
        if facts is not None:
            assert facts.interfaces == ["lo"] and facts.connect_refused

    def test_no_host_file_is_visible(self, rt: Any, tmp_path: Path) -> None:
        instance, tier = self.drivers(rt)
        req = self.request(rt, PREOPEN_WAT)
        assert outcome(lambda: tier.call(req)) == outcome(lambda: instance.call(req)) == (b"\x08", b"", 0)
        secret = tmp_path / "host-secret.txt"
        secret.write_text("do not read")
        facts = self.sandbox_facts(rt, str(secret))
        if facts is not None:
            # the probe file, the wb home, the host's password hashes, this source tree
            for path in (str(secret), str(rt.home), "/etc/shadow", str(REPO / "wbcore_runtime")):
                assert not facts.visible(path), f"{path} is visible inside tier {self.tier}"

    # --- caps ------------------------------------------------------------------------------

    def test_caps_are_bridged_a_kv_round_trip(self, rt: Any) -> None:
        pytest.importorskip("wbcore_brokers_state",
                            reason="the kv broker (wbcore-brokers-state) is not installed")
        import cbor2

        from wbcore_runtime.trust.policy import profile

        instance, tier = self.drivers(rt)
        put = cbor2.dumps({"op": "put", "key": "k", "value": f"from {self.tier}".encode()})
        get = cbor2.dumps({"op": "get", "key": "k"})
        kw = {"profile": profile("minimal"), "caps": frozenset({"kv"})}
        res = tier.call(self.request(rt, kv_wat(put, get), **kw))
        assert res.exit_code == 0, res.stderr
        assert cbor2.loads(res.stdout) == {"value": f"from {self.tier}".encode()}
        req = self.request(rt, kv_wat(get), **kw)
        ctx = rt.dock.context(principal=req.principal, caps={"kv"}, timeout=5)
        assert rt.dock.call(ctx, "kv", "get", {"key": "k"}) == {"value": f"from {self.tier}".encode()}
        rt.dock.call(ctx, "kv", "put", {"key": "k", "value": b"from the host"})
        assert tier.call(req).stdout == instance.call(req).stdout == cbor2.dumps({"value": b"from the host"})
        bad = self.request(rt, kv_wat(cbor2.dumps({"op": "teleport"})), **kw)
        assert outcome(lambda: tier.call(bad)) == outcome(lambda: instance.call(bad))
        ungranted = self.request(rt, kv_wat(get), profile=profile("minimal"))
        assert outcome(lambda: tier.call(ungranted)) == outcome(lambda: instance.call(ungranted))
        assert outcome(lambda: tier.call(ungranted))[0] == "CapabilityDenied"

    # --- the channel: the session secret and malformed frames ---------------------------------

    def tier_runtime(self, make_runtime: Any) -> Any:
        """A runtime whose tier is available (rows that need no reference tier and no engine)."""
        rt = make_runtime()
        if self.tier not in rt.tiers.names() or not rt.tiers.get(self.tier).available().ok:
            pytest.skip(f"tier {self.tier} is not installed or unavailable here")
        return rt

    def agent(self, make_runtime: Any) -> Agent:
        """A fresh agent of the tier."""
        agent = self.open_agent(self.tier_runtime(make_runtime))
        if agent is None:
            pytest.skip(f"tier {self.tier} has no channel to an agent (its guest runs in this process)")
        return agent

    def test_a_handshake_without_or_with_a_wrong_secret_is_refused(self, make_runtime: Any) -> None:
        for bad in (frames.encode(frames.PING, b""), frames.ping(bytes(32)), frames.ping(b"\x01" * 32)):
            agent = self.agent(make_runtime)
            try:
                agent.send(bad)
                assert agent.refusal()["reason"] == "secret"
                assert agent.ended(), "an agent that refused its handshake must end"
            finally:
                agent.close()

    def test_requests_without_or_with_a_wrong_secret_are_refused(self, make_runtime: Any) -> None:
        agent = self.agent(make_runtime)
        try:
            agent.handshake()
            kind = self.request_kind
            assert kind is not None
            body = self.request_payload()
            agent.send(frames.encode(kind, frames.pack(body)))
            assert agent.refusal()["reason"] == "secret"
            agent.send(frames.seal(kind, bytes(32), body))
            assert agent.refusal()["reason"] == "secret"
            agent.send(frames.encode(kind, frames.pack({**body, "secret": "zz"})))
            assert agent.refusal()["reason"] == "secret"
            agent.send(frames.shutdown(bytes(32)))
            assert agent.refusal()["reason"] == "secret"
            agent.handshake()  # it lives on, and still answers its host
        finally:
            agent.close()

    @pytest.mark.parametrize("bad", [
        b"\x00",  # a json payload shorter than its length prefix
        b"\xff\xff\x00\x00{}",  # a json length past the end
        b"\x02\x00\x00\x00[]",  # json, not an object
        b"\x0b\x00\x00\x00{\"blobs\":5}",  # blobs not a list
        b"\x0c\x00\x00\x00{\"blobs\":[9]}",  # attachments that are not there
        b"\x04\x00\x00\x00\xff\xfe\xfd\xfc",  # not UTF-8
    ], ids=["short", "past-end", "array", "blobs-type", "blobs-missing", "not-utf8"])
    def test_malformed_frames_are_refused_and_the_agent_lives_on(self, make_runtime: Any, bad: bytes) -> None:
        agent = self.agent(make_runtime)
        try:
            agent.handshake()
            assert self.request_kind is not None
            agent.send(frames.HEADER.pack(len(bad), self.request_kind) + bad)
            assert agent.refusal()["reason"] in ("malformed", "secret")
            agent.handshake()
        finally:
            agent.close()

    @pytest.mark.parametrize("bad", [
        frames.HEADER.pack(frames.MAX_FRAME + 1, frames.PING),  # a length over the cap
        frames.HEADER.pack(0, 0x6E),  # an unknown type
    ], ids=["too-large", "unknown-type"])
    def test_a_broken_stream_is_refused_and_ends_the_agent_cleanly(self, make_runtime: Any,
                                                                   bad: bytes) -> None:
        agent = self.agent(make_runtime)
        try:
            agent.handshake()
            agent.send(bad)
            assert agent.refusal()["reason"] in ("too-large", "unknown-type")
            assert agent.ended(), "an agent whose stream is broken must end, not hang"
        finally:
            agent.close()


class PosixTierConformance:
    """Subclass with ``tier = "<name>"`` (and override :meth:`driver` if the tier's driver is
    not ``runtime.tiers.get(tier).factory(runtime)``)."""

    tier: ClassVar[str] = ""
    #: Seconds the deadline test grants (a tier that restores a VM needs a little to start).
    deadline_s: ClassVar[float] = 3.0

    # --- hooks ----------------------------------------------------------------------------

    def driver(self, rt: Any) -> Any:
        return rt.tiers.get(self.tier).factory(rt)

    def kv_argv(self, request: dict[str, Any]) -> list[str] | None:
        """The guest argv that sends ``request`` to the host's kv broker and prints the
        answer as JSON; ``None``: this tier does not bridge caps."""
        return None

    # --- helpers --------------------------------------------------------------------------

    @pytest.fixture
    def rt(self, make_runtime: Any) -> Any:
        return make_runtime()

    def request(self, rt: Any, cli: str, argv: list[str], stdin: bytes = b"", **kw: Any) -> CommandRequest:
        art = rt.artifacts.put_bytes(POSIX_MAGIC + json.dumps({"cli_bin": cli, "toolkit": "conf"}).encode())
        base = CommandRequest(name=cli, sha256=art.sha256, artifact=rt.artifacts.path(art.sha256),
                              argv=tuple(argv), stdin=stdin, profile=profile("compute"), timeout_s=10.0,
                              principal=Principal(toolkit="conf"), toolkit="conf", tier=self.tier)
        return dataclasses.replace(base, **kw)

    def sh(self, rt: Any, script: str, stdin: bytes = b"", **kw: Any) -> CallResult:
        return self.driver(rt).call(self.request(rt, "sh", ["-c", script], stdin, **kw))

    # --- the checks ---------------------------------------------------------------------------

    def test_output_equality(self, rt: Any) -> None:
        data = os.urandom(100_000)
        res = self.driver(rt).call(self.request(rt, "sha256sum", [], data))
        assert res.exit_code == 0 and res.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
        res = self.sh(rt, "cat; printf 'to stderr' >&2; exit 7", stdin=b"through the tier\n" * 100)
        assert (res.stdout, res.stderr, res.exit_code) == (b"through the tier\n" * 100, b"to stderr", 7)

    def test_output_equals_the_other_posix_tiers(self, rt: Any) -> None:
        others = [t for t in rt.tiers if t.name != self.tier and "posix" in t.kinds and t.available().ok]
        if not others:
            pytest.skip("no other tier that runs posix commands is installed and available here")
        data = bytes(range(256)) * 64
        cases = [("sha256sum", [], data), ("sh", ["-c", "cat; printf 'to stderr' >&2; exit 7"], b"a\nb\n"),
                 ("sh", ["-c", "echo $#; for a; do echo \"[$a]\"; done", "x", "two words", "é"], b""),
                 ("wc", ["-c"], data)]
        for cli, argv, stdin in cases:
            here = self.outcome(rt, self.request(rt, cli, argv, stdin))
            for t in others:
                req = dataclasses.replace(self.request(rt, cli, argv, stdin), tier=t.name)
                try:
                    res = t.factory(rt).call(req)
                    there: Any = (res.stdout, res.stderr, res.exit_code)
                except WbError as exc:
                    there = (type(exc).__name__, getattr(exc, "limit", None))
                if cli == "wc":  # busybox and coreutils pad the count differently
                    here, there = _strip(here), _strip(there)
                assert here == there, (cli, argv, t.name)

    def test_deadline(self, rt: Any) -> None:
        t0 = time.monotonic()
        with pytest.raises(Timeout, match="deadline"):
            self.sh(rt, "sleep 100 & while :; do :; done", timeout_s=self.deadline_s)
        assert time.monotonic() - t0 < self.deadline_s + 1.0

    def test_memory_bomb(self, rt: Any) -> None:
        # the string doubles until the address-space limit refuses it (2 GiB if nothing did)
        res = self.sh(rt,
                      "x=a; i=0; while [ $i -lt 31 ]; do x=\"$x$x\"; i=$((i+1)); done; echo survived ${#x}")
        assert res.exit_code != 0 and b"survived" not in res.stdout
        assert self.sh(rt, "echo still here").stdout == b"still here\n"

    def test_output_flood(self, rt: Any) -> None:
        t0 = time.monotonic()
        with pytest.raises(LimitExceeded, match="stdout passed") as info:
            self.driver(rt).call(self.request(rt, "yes", [], timeout_s=30.0))
        assert info.value.limit == "stdout" and time.monotonic() - t0 < 20

    def test_fork_bomb(self, rt: Any) -> None:
        t0 = time.monotonic()
        try:
            res = self.sh(rt, "b() { b | b & }; b; sleep 1; echo survived", timeout_s=5.0)
            out = (res.stdout + res.stderr).decode(errors="replace").lower()
            assert "fork" in out or "resource" in out or "retry" in out, out[-400:]
        except Timeout:
            pass
        assert time.monotonic() - t0 < 5.0 + 1.0 + 1.0
        assert self.sh(rt, "echo after the bomb").stdout == b"after the bomb\n"

    def test_no_network(self, rt: Any) -> None:
        res = self.sh(rt, "cat /proc/net/dev; wget -q -T 2 -O - http://10.0.2.2/ 2>&1; echo wget=$?; "
                          "wget -q -T 2 -O - http://1.1.1.1/ 2>&1; echo wget=$?")
        out = res.stdout.decode()
        ifaces = [ln.split(":")[0].strip() for ln in out.splitlines() if ":" in ln and "|" not in ln
                  and not ln.startswith("wget")]
        assert set(ifaces) <= {"lo"}, out
        assert "wget=0" not in out

    def test_no_host_file_visible(self, rt: Any, wb_home: Any) -> None:
        paths = [str(wb_home), "/work", "/root/.cache", "/etc/shadow", str(rt.artifacts.path(
            rt.artifacts.put_bytes(b"a host file").sha256))]
        res = self.sh(rt,
                      f"for p in {' '.join(paths)}; do ls -d $p >/dev/null 2>&1 && echo SEEN $p; done; id -u")
        out = res.stdout.decode()
        assert "SEEN" not in out, out
        assert out.split()[-1] != "0"

    def test_kv_round_trip(self, rt: Any) -> None:
        if self.kv_argv({"op": "get"}) is None:
            pytest.skip(f"tier {self.tier} does not bridge caps")
        if "kv" not in rt.brokers.names():
            pytest.skip("the kv broker (wbcore-brokers-state) is not installed")
        put = self.kv_argv({"op": "put", "key": "k", "value": f"from tier {self.tier}"})
        get = self.kv_argv({"op": "get", "key": "k"})
        assert put and get
        kw: dict[str, Any] = {"caps": frozenset({"kv"}), "profile": profile("minimal")}
        res = self.driver(rt).call(self.request(rt, put[0], put[1:], **kw))
        assert res.exit_code == 0, res.stderr
        res = self.driver(rt).call(self.request(rt, get[0], get[1:], **kw))
        assert res.exit_code == 0, res.stderr
        assert json.loads(res.stdout) == {"value": f"from tier {self.tier}"}
        # The value lives in the host's kv, under the call's principal.
        req = self.request(rt, "sh", [], **kw)
        ctx = rt.dock.context(principal=req.principal, caps={"kv"}, timeout=5)
        assert rt.dock.call(ctx, "kv", "get", {"key": "k"}) == {"value": f"from tier {self.tier}".encode()}
        # Ungranted: the Dock refuses it, and the guest sees the refusal.
        res = self.driver(rt).call(self.request(rt, get[0], get[1:], caps=frozenset()))
        assert res.exit_code != 0 and b"kv" in res.stdout + res.stderr

    def outcome(self, rt: Any, req: CommandRequest) -> Any:
        try:
            res = self.driver(rt).call(req)
        except WbError as exc:
            return type(exc).__name__, getattr(exc, "limit", None)
        return res.stdout, res.stderr, res.exit_code


def _strip(outcome: Any) -> Any:
    return (outcome[0].strip(), *outcome[1:]) if isinstance(outcome[0], bytes) else outcome
