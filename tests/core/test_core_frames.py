"""wbcore_runtime.wire.frames, the framed protocol every sandbox tier speaks with its guest (seed 003):
frames round-trip, and every malformed input is a FrameError saying why — never a crash,
never an allocation a lying length asked for."""

from __future__ import annotations

import io
import struct

import pytest

from wbcore_runtime.wire import frames
from wbcore_runtime.wire.frames import FrameError

SECRET = bytes(range(32))


def reader(data: bytes):
    return io.BytesIO(data).read


def test_a_sealed_frame_round_trips_with_its_attachments() -> None:
    frame = frames.seal(frames.EXEC, SECRET, {"id": 3, "argv": ["sh", "-c", "é"]}, b"stdin", b"")
    kind, payload = frames.read_frame(reader(frame))
    obj, blobs = frames.open_sealed(kind, payload, SECRET)
    assert kind == frames.EXEC and obj == {"id": 3, "argv": ["sh", "-c", "é"], "blobs": [5, 0]}
    assert blobs == [b"stdin", b""]


@pytest.mark.parametrize("secret,reason", [(None, "secret"), (bytes(32), "secret"), (SECRET, None)])
def test_the_secret_is_required(secret, reason) -> None:
    obj = {"id": 1}
    payload = frames.pack(obj) if secret is None else frames.pack({**obj, "secret": secret.hex()})
    if reason is None:
        assert frames.open_sealed(frames.EXEC, payload, SECRET)[0] == {"id": 1, "blobs": []}
    else:
        with pytest.raises(FrameError) as info:
            frames.open_sealed(frames.EXEC, payload, SECRET)
        assert info.value.reason == reason
    assert frames.check_ping(frames.ping(SECRET)[5:], SECRET) == frames.VERSION
    with pytest.raises(FrameError, match="secret"):
        frames.check_ping(frames.ping(bytes(32))[5:], SECRET)


@pytest.mark.parametrize("data,reason", [
    (struct.pack("<IB", frames.MAX_FRAME + 1, frames.EXEC), "too-large"),
    (struct.pack("<IB", 0, 0x42), "unknown-type"),
    (struct.pack("<IB", 10, frames.EXEC) + b"abc", "eof"),
    (b"\x01\x00", "eof"),
])
def test_bad_streams_are_refused(data, reason) -> None:
    asks: list[int] = []
    stream = io.BytesIO(data)

    def read(n: int) -> bytes:
        asks.append(n)
        return stream.read(n)

    with pytest.raises(FrameError) as info:
        frames.read_frame(read)
    assert info.value.reason == reason
    assert max(asks) <= frames.CHUNK


@pytest.mark.parametrize("payload", [b"", b"\xff\xff\xff\x7f{}", struct.pack("<I", 5) + b"[1,2]",
                                     struct.pack("<I", 2) + b"{x", frames.pack({"a": 1}, b"xy")[:-1],
                                     struct.pack("<I", 13) + b'{"blobs":[-1]}'])
def test_bad_payloads_are_malformed(payload) -> None:
    with pytest.raises(FrameError) as info:
        frames.unpack(payload)
    assert info.value.reason == "malformed"


def test_pty_data_frames_round_trip_and_refuse_a_short_payload() -> None:
    secret = frames.new_secret()
    frame = frames.pty_data(3, b"\x1b[A", secret)
    kind, payload = frames.read_frame(reader(frame))
    assert kind == frames.PTY_DATA and frames.open_pty_data(payload, secret) == (3, b"\x1b[A")
    with pytest.raises(frames.FrameError, match="secret"):
        frames.open_pty_data(payload, bytes(32))
    with pytest.raises(frames.FrameError, match="4-byte session id"):
        frames.open_pty_data(b"\x01")
