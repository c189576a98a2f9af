"""Property tests of the os_process frame protocol (issue 22 item 6), the host-independent half:
whatever bytes arrive — random, truncated, with a lying length, duplicated or interleaved
frames, another session's secret — ``wbcore_runtime.wire.frames`` returns a well-formed frame or
refuses with a ``FrameError`` whose reason is one of the documented words; never another
exception, never a read past what the header allowed. The worker and host halves, spoken to
over real pipes, are fuzzed in plugins/wbcore-process/tests/test_frames_fuzz_worker.py."""

from __future__ import annotations

import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from wbcore_runtime.wire import frames as F

REASONS = {"eof", "too-large", "unknown-type", "malformed", "secret", "version", "unexpected"}
FAST = settings(max_examples=300, deadline=None)


class Reader:
    """A stream that counts what was asked of it (a lying header must not make it read more)."""

    def __init__(self, data: bytes) -> None:
        self.buf = io.BytesIO(data)
        self.asked = 0

    def __call__(self, n: int) -> bytes:
        assert 0 < n <= F.CHUNK, f"a read of {n} bytes; reads are chunked at {F.CHUNK}"
        self.asked += n
        return self.buf.read(n)


def _refused(exc: F.FrameError) -> None:
    assert exc.reason in REASONS and exc.message, (exc.reason, exc.message)


_kinds = st.sampled_from(sorted(F.NAMES))
_json_obj = st.dictionaries(st.text(max_size=8),
                            st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20),
                                      st.lists(st.integers(min_value=-3, max_value=50), max_size=4)),
                            max_size=6)
_frame = st.builds(lambda k, p: F.encode(k, p), _kinds, st.binary(max_size=200))


@FAST
@given(st.binary(max_size=400))
def test_random_bytes_are_a_frame_or_a_refusal(data: bytes) -> None:
    r = Reader(data)
    try:
        kind, payload = F.read_frame(r)
    except F.FrameError as exc:
        _refused(exc)
        return
    assert kind in F.NAMES and len(payload) == int.from_bytes(data[:4], "little")
    assert r.asked == F.HEADER.size + len(payload)


@FAST
@given(st.lists(_frame, min_size=1, max_size=6), st.data())
def test_frames_back_to_back_read_in_order_and_a_cut_is_eof(stream: list[bytes], data: st.DataObject) -> None:
    """Duplicated or interleaved frames read back one by one; a stream cut anywhere inside a
    frame ends in ``eof`` (never a short payload taken as a whole one)."""
    blob = b"".join(stream)
    r = Reader(blob)
    for frame in stream:
        kind, payload = F.read_frame(r)
        assert F.encode(kind, payload) == frame
    cut = data.draw(st.integers(min_value=1, max_value=len(blob)))
    r = Reader(blob[:cut])
    whole, at = 0, 0
    for frame in stream:
        if at + len(frame) > cut:
            break
        at += len(frame)
        whole += 1
    for _ in range(whole):
        F.read_frame(r)
    if at < cut:
        try:
            F.read_frame(r)
        except F.FrameError as exc:
            assert exc.reason == "eof", exc.message
        else:
            raise AssertionError("a frame cut short was read as a whole one")


@FAST
@given(st.integers(min_value=F.MAX_FRAME + 1, max_value=2**32 - 1), _kinds)
def test_a_length_over_the_cap_is_refused_at_the_header(length: int, kind: int) -> None:
    r = Reader(length.to_bytes(4, "little") + bytes([kind]) + b"x" * 64)
    try:
        F.read_frame(r)
    except F.FrameError as exc:
        assert exc.reason == "too-large"
        assert r.asked == F.HEADER.size  # not a byte of the payload was asked for
    else:
        raise AssertionError("an oversized frame was accepted")


@FAST
@given(st.integers(min_value=0, max_value=255).filter(lambda k: k not in F.NAMES), st.binary(max_size=50))
def test_an_unknown_type_is_refused_at_the_header(kind: int, rest: bytes) -> None:
    r = Reader(len(rest).to_bytes(4, "little") + bytes([kind]) + rest)
    try:
        F.read_frame(r)
    except F.FrameError as exc:
        assert exc.reason == "unknown-type" and r.asked == F.HEADER.size
    else:
        raise AssertionError("an unknown frame type was accepted")


@FAST
@given(st.binary(max_size=300))
def test_random_json_payloads_are_unpacked_or_refused(payload: bytes) -> None:
    try:
        obj, blobs = F.unpack(payload)
    except F.FrameError as exc:
        _refused(exc)
        return
    assert (isinstance(obj, dict)
            and sum(map(len, blobs)) == len(payload) - 4 - int.from_bytes(payload[:4], "little"))


@FAST
@given(_json_obj, st.lists(st.binary(max_size=40), max_size=3), st.data())
def test_a_mangled_json_payload_is_refused_or_exact(obj: dict, blobs: list[bytes],
                                                    data: st.DataObject) -> None:
    """Truncate, extend or flip a byte of a well-formed json payload: it is refused, or what
    comes out is a well-formed object whose attachments account for every byte."""
    good = F.pack({k: v for k, v in obj.items() if k != "blobs"}, *blobs)
    how = data.draw(st.sampled_from(["cut", "grow", "flip", "lie"]))
    if how == "cut":
        bad = good[:data.draw(st.integers(min_value=0, max_value=len(good) - 1))]
    elif how == "grow":
        bad = good + data.draw(st.binary(min_size=1, max_size=20))
    elif how == "flip":
        i = data.draw(st.integers(min_value=0, max_value=len(good) - 1))
        bad = good[:i] + bytes([good[i] ^ data.draw(st.integers(min_value=1, max_value=255))]) + good[i + 1:]
    else:  # a header whose blobs lie about the lengths
        head = json.dumps({**obj,
                           "blobs": data.draw(st.lists(st.integers(min_value=0, max_value=99), max_size=4))})
        bad = len(head.encode()).to_bytes(4, "little") + head.encode() + b"".join(blobs)
    try:
        got, got_blobs = F.unpack(bad)
    except F.FrameError as exc:
        _refused(exc)
        return
    n = int.from_bytes(bad[:4], "little")
    assert isinstance(got, dict) and 4 + n + sum(map(len, got_blobs)) == len(bad)


@FAST
@given(st.binary(min_size=F.SECRET_BYTES, max_size=F.SECRET_BYTES), st.binary(min_size=F.SECRET_BYTES,
       max_size=F.SECRET_BYTES), _json_obj, st.sampled_from(sorted(F.FROM_HOST - F.RAW)))
def test_another_sessions_secret_is_refused_on_every_host_frame(mine: bytes, theirs: bytes, obj: dict,
                                                              kind: int) -> None:
    """Every host → worker frame type: a frame sealed with another secret, with none, or a
    raw frame (Ping, Shutdown, PtyData) carrying another secret is refused as ``secret``."""
    if mine == theirs:
        return
    obj = {k: v for k, v in obj.items() if k not in ("blobs", "secret")}
    frame = F.seal(kind, theirs, obj, b"stdin")
    k, payload = F.read_frame(Reader(frame))
    for attempt in (payload, F.pack(obj, b"stdin")):
        try:
            F.open_sealed(k, attempt, mine)
        except F.FrameError as exc:
            assert exc.reason == "secret", exc.message
        else:
            raise AssertionError("a frame without this session's secret was opened")
    assert F.open_sealed(k, payload, theirs)[0] == {**obj, "blobs": [5]}  # the right secret opens it
    for check in (lambda: F.check_ping(F.ping(theirs)[5:], mine), lambda: F.check_shutdown(theirs, mine),
                  lambda: F.open_pty_data(F.pty_data(1, b"x", theirs)[5:], mine)):
        try:
            check()
        except F.FrameError as exc:
            assert exc.reason == "secret"
        else:
            raise AssertionError("a raw frame with another secret was accepted")


@FAST
@given(st.binary(max_size=80), st.binary(min_size=F.SECRET_BYTES, max_size=F.SECRET_BYTES))
def test_raw_payloads_are_checked_or_refused(payload: bytes, secret: bytes) -> None:
    for check in (lambda: F.check_ping(payload, secret), lambda: F.check_pong(payload),
                  lambda: F.check_shutdown(payload, secret), lambda: F.open_pty_data(payload, secret),
                  lambda: F.open_pty_data(payload)):
        try:
            check()
        except F.FrameError as exc:
            _refused(exc)
