"""The caps bridge's guest side this plugin serves to the sandbox tiers (``sandbox_caps.py``,
``GuestRunnerService.sandbox_caps``): it answers only the host's sealed frames for its call."""

from __future__ import annotations

from pathlib import Path

import pytest

from wbcore_runtime.contract import guest
from wbcore_runtime.wire import frames
from wbcore_wasmtime.sandbox_caps import Ended, GuestCaps


def test_the_runner_serves_the_guest_side_a_tier_binds(make_runtime) -> None:
    lib = guest.sandbox_caps(make_runtime(plugins=["wasmtime"]), "os_process")
    assert lib == Path(__file__).parents[1] / "wbcore_wasmtime" / "sandbox_caps.py" and lib.is_file()
    # loaded by path in a sandbox: nothing of this plugin (or the core) is imported there
    assert "import wbcore_wasmtime" not in lib.read_text() and "from wbcore_wasmtime" not in lib.read_text()
    with pytest.raises(Exception, match="pip install wbcore-wasmtime"):
        guest.sandbox_caps(make_runtime(plugins=[]), "container")


class _Chan:
    def __init__(self, *incoming: bytes) -> None:
        self.incoming = [(f[4], f[5:]) for f in incoming]
        self.sent: list[bytes] = []

    def recv(self) -> tuple[int, bytes]:
        if not self.incoming:
            raise frames.FrameError("eof", "the host hung up")
        return self.incoming.pop(0)

    def send_frame(self, frame: bytes) -> None:
        self.sent.append(frame)


def test_the_guest_side_ends_on_the_hosts_shutdown_and_refuses_a_forged_one() -> None:
    secret = frames.new_secret()
    chan = _Chan(frames.shutdown(bytes(32)), frames.shutdown(secret))
    guest = GuestCaps(chan, secret, 3, wt=None)
    with pytest.raises(Ended):
        guest.expect(frames.BROKER_ANSWER)
    assert [f[4] for f in chan.sent] == [frames.REFUSED]  # the forged Shutdown, answered and skipped


def test_a_warm_guest_side_forgets_the_previous_call() -> None:
    secret = frames.new_secret()
    chan = _Chan(frames.seal(frames.BROKER_ANSWER, secret, {"id": 1, "status": 0}, b"old"),
                 frames.seal(frames.BROKER_ANSWER, secret, {"id": 2, "status": 0}, b"new"))
    guest = GuestCaps(chan, secret, 1, wt=None)
    assert guest.ask("kv", {}, b"") == (0, b"old")
    guest.pending, guest.info = b"old", b"info"
    guest.begin(2)
    assert (guest.id, guest.pending, guest.info) == (2, b"", b"")
    assert guest.ask("kv", {}, b"") == (0, b"new")
