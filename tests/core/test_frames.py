"""The framed protocol (seed 003): every malformed input is a clean refusal, never a crash or a hang."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from wbcore_runtime.wire import frames  # noqa: E402
from wbcore_runtime.wire.frames import FrameError  # noqa: E402

SECRET = bytes(range(32))
KINDS = sorted(frames.NAMES)
FAST = settings(max_examples=300, deadline=None)


class CountingReader:
    """A stream that records how much each read asked for (an allocation happens per ask)."""

    def __init__(self, data: bytes) -> None:
        self.stream = io.BytesIO(data)
        self.asks: list[int] = []

    def __call__(self, n: int) -> bytes:
        self.asks.append(n)
        return self.stream.read(n)


def read_all(data: bytes) -> list[tuple[int, bytes]]:
    """Every frame of ``data`` until the first refusal (which must be a FrameError)."""
    read = CountingReader(data)
    out = []
    while True:
        try:
            out.append(frames.read_frame(read))
        except FrameError as exc:
            assert exc.reason in ("eof", "too-large", "unknown-type")
            assert max(read.asks) <= frames.CHUNK
            return out


@FAST
@given(st.sampled_from(KINDS), st.binary(max_size=4096))
def test_a_frame_round_trips(kind: int, payload: bytes) -> None:
    assert read_all(frames.encode(kind, payload)) == [(kind, payload)]


@FAST
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_are_frames_or_a_clean_refusal(data: bytes) -> None:
    for kind, payload in read_all(data):
        assert kind in frames.NAMES and len(payload) <= frames.MAX_FRAME


@FAST
@given(st.sampled_from(KINDS), st.binary(min_size=1, max_size=512), st.data())
def test_a_truncated_frame_is_eof(kind: int, payload: bytes, data: st.DataObject) -> None:
    whole = frames.encode(kind, payload)
    cut = data.draw(st.integers(min_value=1, max_value=len(whole) - 1))
    with pytest.raises(FrameError) as err:
        frames.read_frame(CountingReader(whole[:cut]))
    assert err.value.reason == "eof"


@FAST
@given(st.sampled_from(KINDS), st.integers(min_value=frames.MAX_FRAME + 1, max_value=2**32 - 1))
def test_an_oversize_length_is_refused_before_anything_is_read(kind: int, length: int) -> None:
    read = CountingReader(struct.pack("<IB", length, kind) + b"x" * 64)
    with pytest.raises(FrameError) as err:
        frames.read_frame(read)
    assert err.value.reason == "too-large"
    assert read.asks == [frames.HEADER.size]


def test_a_lying_length_costs_one_chunk_at_a_time() -> None:
    read = CountingReader(struct.pack("<IB", frames.MAX_FRAME, frames.EXEC) + b"y" * 100)
    with pytest.raises(FrameError, match="ended inside a frame payload"):
        frames.read_frame(read)
    assert read.asks[1:] == [frames.CHUNK, frames.CHUNK]  # then the stream ended: 100 bytes held


@FAST
@given(st.integers(min_value=0, max_value=255).filter(lambda k: k not in frames.NAMES),
       st.binary(max_size=64))
def test_an_unknown_type_is_refused(kind: int, payload: bytes) -> None:
    with pytest.raises(FrameError) as err:
        frames.read_frame(CountingReader(struct.pack("<IB", len(payload), kind) + payload))
    assert err.value.reason == "unknown-type"
    with pytest.raises(FrameError):
        frames.encode(kind, payload)


def test_encode_refuses_an_oversize_payload() -> None:
    with pytest.raises(FrameError, match="over the"):
        frames.encode(frames.EXEC, bytes(frames.MAX_FRAME + 1))


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**53), max_value=2**53) | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)


@FAST
@given(st.dictionaries(st.text(max_size=8).filter(lambda k: k != "blobs"), JSONISH, max_size=5),
       st.lists(st.binary(max_size=256), max_size=4))
def test_json_payloads_round_trip_with_their_attachments(obj: dict, blobs: list[bytes]) -> None:
    got, got_blobs = frames.unpack(frames.pack(obj, *blobs))
    assert got_blobs == blobs
    assert {k: v for k, v in got.items() if k != "blobs"} == obj


@FAST
@given(st.binary(max_size=1024))
def test_arbitrary_json_payloads_are_objects_or_a_clean_refusal(data: bytes) -> None:
    try:
        obj, blobs = frames.unpack(data)
    except FrameError as exc:
        assert exc.reason == "malformed"
    else:
        assert isinstance(obj, dict) and sum(map(len, blobs)) <= len(data)


@FAST
@given(st.binary(max_size=128),
       st.sampled_from([b'{"blobs":[5]}', b'{"blobs":[-1]}', b'{"blobs":"x"}', b"[1]", b"{"]))
def test_lying_attachment_lengths_are_refused(tail: bytes, head: bytes) -> None:
    payload = struct.pack("<I", len(head)) + head + tail
    try:
        frames.unpack(payload)
    except FrameError as exc:
        assert exc.reason == "malformed"
    else:
        assert head == b'{"blobs":[5]}' and len(tail) == 5


# --- the session secret ----------------------------------------------------------------------


def test_a_sealed_request_opens_with_its_secret_only() -> None:
    frame = frames.seal(frames.EXEC, SECRET, {"id": 1}, b"stdin")
    kind, payload = frames.read_frame(CountingReader(frame))
    obj, blobs = frames.open_sealed(kind, payload, SECRET)
    assert obj["id"] == 1 and blobs == [b"stdin"] and "secret" not in obj
    with pytest.raises(FrameError, match="wrong session secret") as err:
        frames.open_sealed(kind, payload, bytes(32))
    assert err.value.reason == "secret"


@FAST
@given(JSONISH)
def test_a_request_without_the_secret_is_refused(value: object) -> None:
    payload = frames.pack({"id": 1} if value is None else {"id": 1, "secret": value})
    with pytest.raises(FrameError) as err:
        frames.open_sealed(frames.EXEC, payload, SECRET)
    assert err.value.reason == "secret"


@FAST
@given(st.binary(min_size=32, max_size=32).filter(lambda s: s != SECRET))
def test_a_wrong_secret_is_refused_everywhere(wrong: bytes) -> None:
    for kind in (frames.EXEC, frames.LINK_ANSWER, frames.BROKER_ANSWER):
        _, payload = frames.read_frame(CountingReader(frames.seal(kind, wrong, {"id": 1})))
        with pytest.raises(FrameError):
            frames.open_sealed(kind, payload, SECRET)
    with pytest.raises(FrameError):
        frames.check_ping(frames.ping(wrong)[frames.HEADER.size:], SECRET)
    with pytest.raises(FrameError):
        frames.check_shutdown(frames.shutdown(wrong)[frames.HEADER.size:], SECRET)


@FAST
@given(st.binary(max_size=64))
def test_arbitrary_ping_payloads_are_refused_unless_exact(payload: bytes) -> None:
    try:
        assert frames.check_ping(payload, SECRET) == frames.VERSION
    except FrameError:
        return
    assert payload == SECRET + struct.pack("<H", frames.VERSION)


def test_ping_and_pong_carry_the_protocol_version() -> None:
    assert frames.check_ping(frames.ping(SECRET)[frames.HEADER.size:], SECRET) == frames.VERSION
    with pytest.raises(FrameError, match="version 9") as err:
        frames.check_ping(frames.ping(SECRET, 9)[frames.HEADER.size:], SECRET)
    assert err.value.reason == "version"
    assert frames.check_pong(frames.pong()[frames.HEADER.size:]) == frames.VERSION
    with pytest.raises(FrameError, match="version 2"):
        frames.check_pong(struct.pack("<H", 2))


def test_secrets_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    real = frames.hmac.compare_digest
    monkeypatch.setattr(frames.hmac, "compare_digest", lambda a, b: seen.append((a, b)) or real(a, b))
    assert frames.same_secret(SECRET, SECRET) and not frames.same_secret(SECRET, bytes(32))
    assert len(seen) == 2
    assert len(frames.new_secret()) == 32 and frames.new_secret() != frames.new_secret()


def test_the_module_needs_nothing_but_the_standard_library() -> None:
    import ast
    import sys

    tree = ast.parse(Path(frames.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names - {"__future__"} <= set(sys.stdlib_module_names)
