"""Terminal sessions over frames (``wbcore_terminal.agent`` and ``wbcore_terminal.attach``), both ends,
without any sandbox: the agent runs in a child process of this test on pipes, as a tier's sandbox
would run it."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from wbcore_runtime.contract.terminal import ShellRequest
from wbcore_runtime.wire import frames
from wbcore_terminal import agent as terminal
from wbcore_terminal import attach

AGENT = """
import os, sys
from wbcore_runtime.wire import frames
from wbcore_terminal import agent as terminal
secret = bytes.fromhex(sys.argv[1])
chan = frames.Channel(os.dup(0), os.dup(1))
for fd in (chan.read_fd, chan.write_fd):
    os.set_inheritable(fd, False)
agent = terminal.Agent(chan, secret, ["/bin/sh"], nofile=64, nproc=4096)
agent.handshake()
agent.serve()
"""


@pytest.fixture(params=["default", "sighup-ignored"])
def agent(request):
    """The agent as a tier starts it; and as started by a parent that ignores SIGHUP (``nohup``):
    an ignored signal survives exec, and a session's shell must still hang up on PtyClose."""
    secret = frames.new_secret()
    argv = [sys.executable, "-c", AGENT, secret.hex()]
    if request.param == "sighup-ignored":  # what `nohup` does, by a shell (no Python between fork and exec)
        argv = ["/bin/sh", "-c", 'trap "" HUP; exec "$0" "$@"', *argv]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    chan = frames.Channel(proc.stdout.fileno(), proc.stdin.fileno())
    attach.handshake(chan, secret)
    yield chan, secret
    try:
        chan.send_frame(frames.shutdown(secret))
    except OSError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdin.close()
    proc.stdout.close()


def _next(chan, kinds, timeout=10.0):
    end = time.monotonic() + timeout
    while True:
        ready, _, _ = select.select([chan.read_fd], [], [], max(0.0, end - time.monotonic()))
        assert ready, "no answer"
        kind, payload = chan.recv()
        if kind in kinds:
            return kind, payload


def _open(chan, secret, sid, program="/bin/sh"):
    chan.send_frame(frames.seal(frames.PTY_OPEN, secret,
                                {"session": sid, "program": program, "rows": 24, "cols": 80}))
    kind, payload = _next(chan, {frames.PTY_OPENED, frames.REFUSED})
    return kind, frames.unpack(payload)[0]


@contextmanager
def _shut_down_cleanly(chan, secret, proc):
    """The block's session with the agent ``proc``, then the host's Shutdown frame: the agent must
    exit 0; one still running when the block fails is killed."""
    try:
        yield
        chan.send_frame(frames.shutdown(secret))
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_session_relays_keystrokes_and_its_exit_code(agent) -> None:
    chan, secret = agent
    assert _open(chan, secret, 1)[1]["ok"] is True
    chan.send_frame(frames.pty_data(1, b"echo $((40+2)); exit 9\n", secret))
    out = b""
    while True:
        kind, payload = _next(chan, {frames.PTY_DATA, frames.PTY_CLOSED})
        if kind == frames.PTY_CLOSED:
            break
        out += frames.open_pty_data(payload)[1]
    assert b"42" in out and frames.unpack(payload)[0]["exit_code"] == 9


def test_four_sessions_at_most_and_only_allowlisted_programs(agent) -> None:
    chan, secret = agent
    for sid in range(1, terminal.MAX_SESSIONS + 1):
        assert _open(chan, secret, sid)[1]["ok"] is True
    assert "4 terminal sessions" in _open(chan, secret, 5)[1]["error"]
    chan.send_frame(frames.seal(frames.PTY_CLOSE, secret, {"session": 1}))
    assert frames.unpack(_next(chan, {frames.PTY_CLOSED})[1])[0]["session"] == 1
    assert "allowlist" in _open(chan, secret, 6, program="/usr/bin/env")[1]["error"]
    assert _open(chan, secret, 6)[1]["ok"] is True


def test_host_frames_without_the_secret_are_refused(agent) -> None:
    chan, secret = agent
    chan.send_frame(frames.seal(frames.PTY_OPEN, bytes(32), {"session": 1, "program": "/bin/sh"}))
    assert frames.unpack(_next(chan, {frames.REFUSED})[1])[0]["reason"] == "secret"
    chan.send_frame(frames.pty_data(1, b"x"))
    assert frames.unpack(_next(chan, {frames.REFUSED})[1])[0]["reason"] == "secret"
    assert _open(chan, secret, 1)[1]["ok"] is True


def test_the_relay_runs_over_one_socket_both_ways(tmp_path) -> None:
    """A VM's channel is one socket, read and written through one descriptor: while the relay
    writes it is non-blocking for reads too, and a frame that arrives in parts is waited for."""
    import socket

    host, guest = socket.socketpair()
    secret = frames.new_secret()
    proc = subprocess.Popen([sys.executable, "-c", AGENT, secret.hex()], stdin=guest.fileno(),
                            stdout=guest.fileno())
    guest.close()
    chan = frames.Channel(host.fileno(), host.fileno())
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    os.close(in_w)  # no keystrokes: the program ends by itself
    try:
        with _shut_down_cleanly(chan, secret, proc):
            attach.handshake(chan, secret)
            request = ShellRequest(program="/bin/sh", args=("-c", "printf 'over one socket\\n'; exit 6"))
            code = attach.attach(chan, secret, request, stdin_fd=in_r, stdout_fd=out_w,
                                 deadline=time.monotonic() + 30)
            assert code == 6
            os.close(out_w)
            out = os.read(out_r, 1 << 16)
            assert b"over one socket" in out
    finally:
        for fd in (in_r, out_r):
            os.close(fd)
        host.close()


def test_the_served_agent_runs_from_a_folder_with_frames_alone(make_runtime, tmp_path) -> None:
    """What a tier ships into its sandbox (``Terminal.agent_file`` next to ``frames.py``) needs
    nothing else: loaded by path, standard library only, it serves a session."""
    import shutil

    from wbcore_runtime.contract import terminal as contract

    served = contract.service(make_runtime(plugins=["terminal"]))
    assert served.agent_file == Path(terminal.__file__)
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(frames.__file__, lib / "frames.py")
    shutil.copy(served.agent_file, lib / "pty_agent.py")
    secret = frames.new_secret()
    script = (f"import os, sys\nsys.path[:0] = [{str(lib)!r}]\nimport frames, pty_agent\n"
              "assert not [m for m in sys.modules if m.startswith('wbcore')], sys.modules\n"
              "chan = frames.stdio_channel()\n"
              f"agent = pty_agent.Agent(chan, bytes.fromhex({secret.hex()!r}), ['/bin/sh'], nproc=4096)\n"
              "frames.serve_host(chan, lambda: (agent.handshake(), agent.serve()), 'test-agent')\n")
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", script], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    chan = frames.Channel(proc.stdout.fileno(), proc.stdin.fileno())
    try:
        with _shut_down_cleanly(chan, secret, proc):
            served.handshake(chan, secret)
            assert _open(chan, secret, 1)[1]["ok"] is True
            chan.send_frame(frames.pty_data(1, b"exit 3\n", secret))
            kind, payload = _next(chan, {frames.PTY_CLOSED})
            assert frames.unpack(payload)[0]["exit_code"] == 3
    finally:
        proc.stdin.close()
        proc.stdout.close()


def test_a_program_that_closes_its_terminal_but_runs_on_stalls_no_other_session(agent) -> None:
    """A session's program that closes every descriptor on its pty and keeps running ends the
    pty's output (EIO on the master) before the program exits: the agent waits for it without
    blocking, so the other sessions, PtyClose and Shutdown are still served meanwhile."""
    chan, secret = agent
    chan.send_frame(frames.seal(frames.PTY_OPEN, secret, {
        "session": 1, "program": "/bin/sh", "rows": 24, "cols": 80,
        "args": ["-c", "exec </dev/null >/dev/null 2>&1; sleep 30"]}))
    assert frames.unpack(_next(chan, {frames.PTY_OPENED})[1])[0]["ok"] is True
    time.sleep(0.5)  # the program has closed its pty: the agent saw the end of its output
    assert _open(chan, secret, 2)[1]["ok"] is True
    chan.send_frame(frames.pty_data(2, b"exit 4\n", secret))
    closed = frames.unpack(_next(chan, {frames.PTY_CLOSED}, timeout=5)[1])[0]
    assert closed == {"session": 2, "exit_code": 4, "blobs": []}
    chan.send_frame(frames.seal(frames.PTY_CLOSE, secret, {"session": 1}))
    closed = frames.unpack(_next(chan, {frames.PTY_CLOSED}, timeout=5)[1])[0]
    assert closed["session"] == 1 and closed["exit_code"] == 128 + 1  # SIGHUP ended it


def _attach_in_thread(to_host_r, to_agent_w, stdin_fd, stdout_fd, deadline_s):
    """``attach`` on a channel whose agent end the test plays (it answered PtyOpen already)."""
    import threading

    chan = frames.Channel(to_host_r, to_agent_w)
    secret = frames.new_secret()
    result: dict = {}

    def run() -> None:
        try:
            result["code"] = attach.attach(chan, secret, ShellRequest(), stdin_fd=stdin_fd,
                                           stdout_fd=stdout_fd, deadline=time.monotonic() + deadline_s)
        except Exception as exc:  # noqa: BLE001 - the test reads what attach ended with
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def _ends(tmp_path, keys: bytes) -> tuple[int, int, int, int, int, int, int]:
    """Pipes to and from the agent and for the user's screen, and the user's keystrokes as a
    file: (to_host_r, to_host_w, to_agent_r, to_agent_w, out_r, out_w, stdin_fd)."""
    (tmp_path / "in").write_bytes(keys)
    return (*os.pipe(), *os.pipe(), *os.pipe(), os.open(tmp_path / "in", os.O_RDONLY))


def _opened() -> bytes:
    return frames.encode(frames.PTY_OPENED, frames.pack({"session": 1, "ok": True}))


def test_a_frame_that_never_completes_does_not_hold_the_relay_past_its_deadline(tmp_path) -> None:
    """The agent's stream is the sandbox's: a header declaring a payload that never arrives
    must not hold the host's terminal past the session's deadline."""
    to_host_r, to_host_w, to_agent_r, to_agent_w, out_r, out_w, stdin_fd = _ends(tmp_path, b"")
    os.write(to_host_w, _opened() + frames.HEADER.pack(1000, frames.PTY_DATA) + b"partial")
    try:
        thread, result = _attach_in_thread(to_host_r, to_agent_w, stdin_fd, out_w, 1.0)
        thread.join(timeout=6)
        assert not thread.is_alive(), "the relay waited for the rest of the frame past its deadline"
        assert isinstance(result.get("error"), attach.PtyError), result
        assert "deadline" in str(result["error"])
    finally:
        os.close(to_host_w)  # a relay still waiting gets the end of the stream and returns
        thread.join(timeout=5)
        for fd in (to_host_r, to_agent_r, to_agent_w, out_r, out_w, stdin_fd):
            os.close(fd)


def test_an_agent_that_stops_reading_does_not_hold_the_relay_past_its_deadline(tmp_path) -> None:
    """Keystrokes queued for an agent that reads nothing (its pipe full): at the deadline the
    close is offered for a moment, not written blocking forever."""
    # more keystrokes than the pipe and the relay's queue hold
    to_host_r, to_host_w, to_agent_r, to_agent_w, out_r, out_w, stdin_fd = _ends(tmp_path, b"x" * (4 << 20))
    os.write(to_host_w, _opened())
    try:
        thread, result = _attach_in_thread(to_host_r, to_agent_w, stdin_fd, out_w, 1.0)
        thread.join(timeout=8)
        assert not thread.is_alive(), "the relay blocked writing PtyClose to an agent that reads nothing"
        assert isinstance(result.get("error"), attach.PtyError), result
        assert "deadline" in str(result["error"])
    finally:
        os.close(to_agent_r)  # a relay still blocked in its write gets EPIPE and returns
        thread.join(timeout=5)
        for fd in (to_host_r, to_host_w, to_agent_w, out_r, out_w, stdin_fd):
            os.close(fd)


@pytest.mark.parametrize("answer", [
    frames.encode(frames.PTY_DATA, b"\x01\x00"),  # shorter than its session id
    frames.encode(frames.PTY_CLOSED, frames.pack({"session": 1, "exit_code": "zero"})),
    frames.encode(frames.PTY_CLOSED, b"not json"),
], ids=["short-data", "exit-code-not-int", "closed-not-json"])
def test_a_malformed_frame_from_the_sandbox_ends_the_session_with_a_pty_error(tmp_path, answer) -> None:
    """What the sandbox's agent sends is the sandbox's: a frame the host cannot read ends the
    session with the terminal engine's own error (what ``wbx shell`` reports), not a stray one."""
    to_host_r, to_host_w = os.pipe()
    to_agent_r, to_agent_w = os.pipe()
    out_r, out_w = os.pipe()
    (tmp_path / "in").write_bytes(b"")
    stdin_fd = os.open(tmp_path / "in", os.O_RDONLY)
    os.write(to_host_w, _opened() + answer)
    try:
        thread, result = _attach_in_thread(to_host_r, to_agent_w, stdin_fd, out_w, 10.0)
        thread.join(timeout=8)
        assert isinstance(result.get("error"), attach.PtyError), result
        assert "could not read" in str(result["error"])
    finally:
        os.close(to_host_w)
        thread.join(timeout=5)
        for fd in (to_host_r, to_agent_r, to_agent_w, out_r, out_w, stdin_fd):
            os.close(fd)
