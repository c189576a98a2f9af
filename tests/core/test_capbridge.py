"""The host side of the caps bridge treats what a sandbox sends as untrusted: a frame of the
wrong type, for another call, before any link, or malformed ends the conversation with a
reason — never an exception on the host, never a Dock call."""

from __future__ import annotations

import pytest

from wbcore_runtime.wire import frames
from wbcore_runtime.wire.capbridge import HostBridge
from wbcore_runtime.contract.calls import CommandRequest, Principal
from wbcore_runtime.trust.policy import profile


def _bridge(make_runtime, tmp_path) -> HostBridge:
    req = CommandRequest(name="guest", sha256="0" * 64, artifact=tmp_path / "x.wasm", argv=(), stdin=b"",
                         profile=profile("minimal"), timeout_s=5.0, principal=Principal(toolkit="guest"),
                         caps=frozenset({"kv"}))
    return HostBridge(make_runtime(plugins=[]), req, frames.new_secret(), call_id=7, timeout_s=5.0)


def _serve(bridge: HostBridge, *sent: bytes) -> list[tuple[int, bytes]]:
    stream = b"".join(sent)
    at = 0

    def read(n: int) -> bytes:
        nonlocal at
        chunk = stream[at:at + n]
        at += len(chunk)
        return chunk

    answers: list[bytes] = []
    bridge.serve(lambda: frames.read_frame(read), answers.append)
    return [(a[4], a[5:]) for a in answers]  # each answer is one whole frame: header, then payload


@pytest.mark.parametrize(("frame", "why"), [
    (frames.encode(frames.BROKER_CALL, frames.pack({"id": 7, "cap": "kv"}, b"")), "before linking"),
    (frames.encode(frames.LINK, frames.pack({"id": 8, "imports": []})), "not 7"),
    (frames.encode(frames.EXEC_RESULT, frames.pack({"id": 7})), "during a call"),
    (frames.encode(frames.LINK, b"\x05\x00\x00\x00{oops"), "not valid JSON"),
    (frames.encode(frames.LINK, frames.pack({"id": 7, "imports": [["wb", 3]]})), "pairs of strings"),
    (frames.HEADER.pack(frames.MAX_FRAME + 1, frames.LINK), "cap"),
])
def test_what_the_sandbox_sends_wrong_ends_the_conversation_with_a_reason(make_runtime, tmp_path, frame,
                                                                          why) -> None:
    bridge = _bridge(make_runtime, tmp_path)
    assert _serve(bridge, frame) == []
    assert why in bridge.broken and bridge.calls == 0


def test_a_sandbox_that_just_ends_is_not_broken(make_runtime, tmp_path) -> None:
    bridge = _bridge(make_runtime, tmp_path)
    assert _serve(bridge) == [] and bridge.broken == ""


def test_an_import_outside_wasi_and_wb_is_refused_at_link_with_the_secret(make_runtime, tmp_path) -> None:
    bridge = _bridge(make_runtime, tmp_path)
    [(kind, payload)] = _serve(bridge, frames.encode(frames.LINK, frames.pack(
        {"id": 7, "imports": [["env", "open"]]})))
    assert kind == frames.LINK_ANSWER
    obj, _ = frames.open_sealed(kind, payload, bridge.secret)
    assert obj == {"id": 7, "refused": True, "blobs": []}
    assert "may import only" in str(bridge.refusal)
    with pytest.raises(frames.FrameError, match="wrong session secret"):
        frames.open_sealed(kind, payload, bytes(32))


# --- one bridge for every tier: what a tier that reads its own channel relies on ------------


def test_answer_is_the_decision_serve_makes(make_runtime, tmp_path) -> None:
    """A tier whose channel interleaves its own frames (os_process) hands each caps frame to
    ``answer``: the same checks as ``serve`` (the call's id, link before call, no second link)."""
    bridge = _bridge(make_runtime, tmp_path)
    with pytest.raises(frames.FrameError, match="not 7"):
        bridge.answer(frames.LINK, frames.pack({"id": 8, "imports": []}))
    with pytest.raises(frames.FrameError, match="before linking"):
        bridge.answer(frames.BROKER_CALL, frames.pack({"id": 7, "cap": "kv"}, b""))
    answer = bridge.answer(frames.LINK,
                           frames.pack({"id": 7, "imports": [["wasi_snapshot_preview1", "fd_write"]]}))
    obj, _ = frames.open_sealed(answer[4], answer[5:], bridge.secret)
    assert obj["id"] == 7 and obj["caps"] == []
    with pytest.raises(frames.FrameError, match="link twice"):
        bridge.answer(frames.LINK, frames.pack({"id": 7, "imports": []}))
    with pytest.raises(frames.FrameError, match="during a call"):
        bridge.answer(frames.EXEC_RESULT, frames.pack({"id": 7}))


def test_a_cap_not_linked_is_denied_without_running_the_dock_call(make_runtime, tmp_path) -> None:
    ran: list[str] = []
    bridge = _bridge(make_runtime, tmp_path)
    bridge.run = lambda fn, *args: ran.append(args[1]) or fn(*args)
    bridge.answer(frames.LINK, frames.pack({"id": 7, "imports": [["wasi_snapshot_preview1", "fd_write"]]}))
    answer = bridge.answer(frames.BROKER_CALL, frames.pack({"id": 7, "cap": "kv"}, b"\xa0"))
    obj, _ = frames.open_sealed(answer[4], answer[5:], bridge.secret)
    assert obj["status"] != 0 and ran == [] and bridge.calls == 1


def test_the_dock_context_gets_the_time_left_of_the_call(make_runtime, tmp_path) -> None:
    bridge = _bridge(make_runtime, tmp_path)
    bridge.deadline -= 4.0  # the call started 4 s ago
    bridge.answer(frames.LINK, frames.pack({"id": 7, "imports": []}))
    assert 0 < bridge.ctx.deadline - __import__("time").monotonic() <= 1.0 + 1e-3


def test_a_posix_guests_call_goes_through_the_same_bridge(make_runtime, tmp_path) -> None:
    """The microvm's ``wb-cap``: no link step (the Dock's grant check decides at the call), the
    guest's body decoded by the tier; a body that does not decode is denied through the Dock."""
    from wbcore_runtime.contract.errors import InvalidArgs

    ran: list[str] = []
    bridge = _bridge(make_runtime, tmp_path)
    bridge.run = lambda fn, *args: ran.append(args[1]) or fn(*args)

    def decode(cap: str, body: bytes) -> bytes:
        if body != b"ok":
            raise InvalidArgs(f"{cap}: not JSON")
        return b"\xa1bopcget"

    answer = bridge.answer_posix(frames.pack({"id": 7, "cap": "kv"}, b"{oops"), decode, lambda a: b"J" + a)
    obj, blobs = frames.open_sealed(answer[4], answer[5:], bridge.secret)
    assert obj["id"] == 7 and obj["status"] != 0 and blobs[0].startswith(b"J") and ran == []
    answer = bridge.answer_posix(frames.pack({"id": 7, "cap": "kv"}, b"ok"), decode, lambda a: a)
    assert ran == ["kv"] and bridge.calls == 2 and bridge.ctx is not None
    with pytest.raises(frames.FrameError, match="not 7"):
        bridge.answer_posix(frames.pack({"id": 1, "cap": "kv"}, b"ok"), decode, lambda a: a)
