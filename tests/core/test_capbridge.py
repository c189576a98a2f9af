"""The host side of the caps bridge treats what a sandbox sends as untrusted: a frame of the
wrong type, for another call, before any link, or malformed ends the conversation with a
reason — never an exception on the host, never a Dock call."""

from __future__ import annotations

import pytest

from wbcore import frames
from wbcore.capbridge import HostBridge
from wbcore.calls import CommandRequest, Principal
from wbcore.policy import profile


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
def test_what_the_sandbox_sends_wrong_ends_the_conversation_with_a_reason(make_runtime, tmp_path, frame, why) -> None:
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
