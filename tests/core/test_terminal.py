"""Terminal sessions over frames (``wbcore_runtime.wire.terminal``), both ends, without any sandbox: the
agent runs in a child process of this test on pipes, as a tier's sandbox would run it."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

import pytest

from wbcore_runtime.dispatch import mounts
from wbcore_runtime.wire import attach, frames, terminal

AGENT = """
import os, sys
from wbcore_runtime.wire import terminal
secret = bytes.fromhex(sys.argv[1])
chan = terminal.Channel(os.dup(0), os.dup(1))
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
    chan = terminal.Channel(proc.stdout.fileno(), proc.stdin.fileno())
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


def test_pty_data_frames_round_trip_and_refuse_a_short_payload() -> None:
    secret = frames.new_secret()
    frame = frames.pty_data(3, b"\x1b[A", secret)
    kind, payload = frames.read_frame(_reader(frame))
    assert kind == frames.PTY_DATA and frames.open_pty_data(payload, secret) == (3, b"\x1b[A")
    with pytest.raises(frames.FrameError, match="secret"):
        frames.open_pty_data(payload, bytes(32))
    with pytest.raises(frames.FrameError, match="4-byte session id"):
        frames.open_pty_data(b"\x01")


def _reader(data: bytes):
    at = 0

    def read(n: int) -> bytes:
        nonlocal at
        chunk = data[at:at + n]
        at += len(chunk)
        return chunk

    return read


def test_mounts_are_parsed_and_checked(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"HOST\[:GUEST\]"):
        mounts.parse_mount(f"{tmp_path}:/a:/b:ro")
    with pytest.raises(ValueError, match="does not exist"):
        mounts.parse_mount("nocolon")
    with pytest.raises(ValueError, match="does not exist"):
        mounts.parse_mount("/no/such/dir:/data")
    with pytest.raises(ValueError, match="ro or rw"):
        mounts.parse_mount(f"{tmp_path}:/data:rx")
    with pytest.raises(ValueError, match="normalised"):
        mounts.parse_mount(f"{tmp_path}:/data/../etc")
    with pytest.raises(ValueError, match="belongs to the sandbox"):
        mounts.parse_mount(f"{tmp_path}:/usr/bin")
    assert mounts.parse_mount(f"{tmp_path}:/data:rw") == mounts.Mount(str(tmp_path.resolve()), "/data", True)
    assert mounts.parse_mount(f"{tmp_path}:/data").rw is False
    # the guest path defaults to the folder's own real path; the mode may follow the host alone
    assert (mounts.parse_mount(f"{tmp_path}:rw")
            == mounts.Mount(str(tmp_path.resolve()), str(tmp_path.resolve()), True))
    assert (mounts.parse_mount(str(tmp_path))
            == mounts.Mount(str(tmp_path.resolve()), str(tmp_path.resolve()), False))


def test_mount_host_folders_are_granted_by_the_one_containment_rule(tmp_path) -> None:
    """paths.host_folder: links resolved once (the real folder is granted), no devices or
    kernel views, not the whole host, never the home or a folder around it."""
    home = tmp_path / "home"
    (home / "keys").mkdir(parents=True)
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "link").symlink_to(data)
    (tmp_path / "file").write_text("x")
    assert mounts.parse_mount(f"{tmp_path / 'link'}:/d", home=home).host == str(data.resolve())
    for spec, why in ((f"{home}:/d", "inside the wbcore home"),
                      (f"{home / 'keys'}:/d", "inside the wbcore home"),
                      (f"{tmp_path}:/d", "contains the wbcore home"), ("/:/d", "whole host"),
                      ("/dev:/d", "kernel's own view"), ("/proc/self:/d", "kernel's own view"),
                      (f"{tmp_path / 'file'}:/d", "not a folder"), ("/dev/null:/d", "a device")):
        with pytest.raises(ValueError, match=why):
            mounts.parse_mount(spec, home=home)
    # a link into the home is the home
    (tmp_path / "sneaky").symlink_to(home / "keys")
    with pytest.raises(ValueError, match="inside the wbcore home"):
        mounts.parse_mount(f"{tmp_path / 'sneaky'}:/d", home=home)
    with pytest.raises(Exception, match="given twice"):
        mounts.parse_mounts([f"{data}:/d", f"{data}:/d:rw"], home=home)


def test_unreachable_by_names_the_folder_an_unprivileged_uid_cannot_use() -> None:
    """The one check every tier that mounts a host folder makes (container, microvm)."""
    import shutil
    import stat
    import tempfile
    from pathlib import Path

    from wbcore_runtime.dispatch.mounts import unreachable_by

    if not os.stat("/tmp").st_mode & stat.S_IXOTH:
        pytest.skip("/tmp is not searchable by others here")
    other = 0x5B00FFFF  # owns nothing, in no group
    top = Path(tempfile.mkdtemp(dir="/tmp", prefix="wb-reach-"))
    try:
        inner = top / "data"
        inner.mkdir()
        top.chmod(0o755)
        inner.chmod(0o755)
        assert unreachable_by(str(inner), False, other) == ""
        assert "not writable by others" in unreachable_by(str(inner), True, other)
        top.chmod(0o700)
        assert (unreachable_by(str(inner), False, other)
                == f"{top} is not searchable by others (chmod o+x {top})")
        assert unreachable_by(str(inner), False, os.stat(top).st_uid) == ""  # its owner may
    finally:
        shutil.rmtree(top)
