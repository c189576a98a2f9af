"""Seed 003's framed wire protocol: what a sandbox tier's host side and its guest agent speak
(the ``os_process`` workers, the ``container`` tier's agent, the ``microvm`` guest agent).

One frame::

    ┌──────────────┬───────────┬────────────────────┐
    │ length (u32) │ type (u8) │ payload (length B) │   length: little-endian, payload only
    └──────────────┴───────────┴────────────────────┘

A payload is at most :data:`MAX_FRAME` (64 MiB); the length is checked against it before
a byte of the payload is read, and the payload is read in bounded chunks, so a lying
length costs the reader nothing. Unknown types are refused at the header.

Payload encodings, fixed per type:

- **raw** (``PING``, ``PONG``, ``SHUTDOWN``, ``PTY_DATA``): ``PING`` is the 32-byte session
  secret and a u16 LE protocol version; ``PONG`` is the worker's u16 LE version; ``SHUTDOWN``
  is the secret; ``PTY_DATA`` is the secret (host → agent only), a u32 LE session id and the
  terminal's bytes (see :func:`pty_data`).
- **json** (every other type): a u32 LE length, a UTF-8 JSON object of that length, then
  the object's binary attachments back to back; the object's ``"blobs"`` lists their
  lengths, which must add up to exactly the rest of the payload (module bytes, stdin,
  stdout and broker requests travel as attachments, never as base64).

The session secret: the host draws 32 random bytes per worker and hands them over at
start (the worker's environment, as seed 003 puts it on the guest's kernel command
line). The worker answers ``PING`` only with that secret, and every frame the host sends
carries it — raw frames in their first 32 bytes, json frames as ``"secret"`` (hex) —
compared in constant time; a frame without it, or with another, is refused.

Standard library only: the worker imports this file by path inside its sandbox. The
microvm guest agent (``wbcore_microvm/agent/wb_agent.c``) is a C rendering of the guest half.
"""

from __future__ import annotations

import hmac
import json
import os
import struct
import sys
from collections.abc import Callable, Sequence
from typing import Any

VERSION = 1
MAX_FRAME = 64 << 20
SECRET_BYTES = 32
HEADER = struct.Struct("<IB")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
#: The largest read asked of the stream at once (a frame's payload arrives in these).
CHUNK = 1 << 20

# Type bytes: seed 003's numbers where the seed has the message, 0x20.. for the Dock bridge.
EXEC = 0x01  # host → worker: run one command (json: argv, limits, caps; blobs: stdin[, module])
EXEC_RESULT = 0x02  # worker → host: how it ended (json; blobs: stdout, stderr)
PING = 0x03  # host → worker: the handshake (raw: secret + version)
PONG = 0x04  # worker → host: the handshake's answer (raw: version)
SHUTDOWN = 0x05  # host → worker: exit now (raw: secret)
PTY_OPEN = 0x16  # host → agent: open an interactive session (json: session, program, args, cols, rows, env)
PTY_OPENED = 0x17  # agent → host: the session's open result (json: session, ok, error)
PTY_DATA = 0x18  # both: raw terminal bytes of one session (raw: [secret] + session u32 + bytes)
PTY_RESIZE = 0x19  # host → agent: the terminal's size changed (json: session, cols, rows)
PTY_CLOSE = 0x1A  # host → agent: end the session (SIGHUP to its process group) (json: session)
PTY_CLOSED = 0x1B  # agent → host: the session's child exited (json: session, exit_code)
MOUNT = 0x1C  # host → agent: mount a host folder the sandbox was given (json: slot, guest, rw)
MOUNTED = 0x1D  # agent → host: the mount's result (json: slot, ok, error)
LINK = 0x20  # worker → host: the module's imports, before it links anything (json)
LINK_ANSWER = 0x21  # host → worker: the caps to link, or the refusal (json; blob: wb.info body)
BROKER_CALL = 0x22  # worker → host: one wb.<cap> call from the guest (json; blob: CBOR request)
BROKER_ANSWER = 0x23  # host → worker: the Dock's answer (json: status; blob: CBOR body)
REFUSED = 0x7F  # worker → host: the last frame was refused (json: reason, message)

NAMES = {
    EXEC: "Exec", EXEC_RESULT: "ExecResult", PING: "Ping", PONG: "Pong", SHUTDOWN: "Shutdown",
    LINK: "Link", LINK_ANSWER: "LinkAnswer", BROKER_CALL: "BrokerCall", BROKER_ANSWER: "BrokerAnswer",
    REFUSED: "Refused", PTY_OPEN: "PtyOpen", PTY_OPENED: "PtyOpened", PTY_DATA: "PtyData",
    PTY_RESIZE: "PtyResize", PTY_CLOSE: "PtyClose", PTY_CLOSED: "PtyClosed", MOUNT: "Mount",
    MOUNTED: "Mounted",
}
RAW = frozenset({PING, PONG, SHUTDOWN, PTY_DATA})
#: What the host sends; each frame of these types must carry the session secret.
FROM_HOST = frozenset({EXEC, PING, SHUTDOWN, LINK_ANSWER, BROKER_ANSWER, PTY_OPEN, PTY_DATA, PTY_RESIZE,
                       PTY_CLOSE, MOUNT})


class FrameError(Exception):
    """A frame was refused. ``reason`` is one short word (``eof``, ``too-large``,
    ``unknown-type``, ``malformed``, ``secret``, ``version``, ``unexpected``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def new_secret() -> bytes:
    return os.urandom(SECRET_BYTES)


def name(kind: int) -> str:
    return NAMES.get(kind, f"0x{kind:02x}")


# --- frames on a stream ---------------------------------------------------------------


def encode(kind: int, payload: bytes | bytearray | memoryview = b"") -> bytes:
    """One frame; a payload over :data:`MAX_FRAME` or an unknown type is refused here too."""
    if kind not in NAMES:
        raise FrameError("unknown-type", f"frame type 0x{kind:02x} is not part of protocol version {VERSION}")
    if len(payload) > MAX_FRAME:
        raise FrameError("too-large",
                         f"{name(kind)} payload of {len(payload)} bytes is over the {MAX_FRAME}-byte cap")
    return HEADER.pack(len(payload), kind) + bytes(payload)


def parse_header(header: bytes) -> tuple[int, int]:
    """``(length, type)`` of a 5-byte header, refused before anything is allocated."""
    if len(header) != HEADER.size:
        raise FrameError("eof", f"the stream ended inside a frame header "
                                f"({len(header)} of {HEADER.size} bytes)")
    length, kind = HEADER.unpack(header)
    if kind not in NAMES:
        raise FrameError("unknown-type", f"frame type 0x{kind:02x} is not part of protocol version {VERSION}")
    if length > MAX_FRAME:
        raise FrameError("too-large", f"{name(kind)} frame declares {length} bytes; the cap is {MAX_FRAME}")
    return length, kind


def _read_exact(read: Callable[[int], bytes], n: int, what: str) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = read(min(CHUNK, n - len(buf)))
        if not chunk:
            if not buf and what == "header":
                raise FrameError("eof", "the stream ended")
            raise FrameError("eof", f"the stream ended inside a frame {what} ({len(buf)} of {n} bytes)")
        buf += chunk
    return bytes(buf)


def read_frame(read: Callable[[int], bytes]) -> tuple[int, bytes]:
    """The next ``(type, payload)`` from ``read(n) -> bytes`` (``b""`` at the end)."""
    length, kind = parse_header(_read_exact(read, HEADER.size, "header"))
    return kind, _read_exact(read, length, "payload") if length else b""


class Channel:
    """Frames over two file descriptors (a pipe pair): ``send`` and ``recv``."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd

    def _read(self, n: int) -> bytes:
        return os.read(self.read_fd, n)

    def recv(self) -> tuple[int, bytes]:
        return read_frame(self._read)

    def send(self, kind: int, payload: bytes | bytearray | memoryview = b"") -> None:
        self.send_frame(encode(kind, payload))

    def send_frame(self, frame: bytes) -> None:
        view = memoryview(frame)
        while view:
            n = os.write(self.write_fd, view)
            view = view[n:]


def stdio_channel(make: Callable[[int, int], Any] = Channel) -> Any:
    """A sandboxed server's channel on its fds 0 and 1 (the host's pipes), made with ``make``.

    The channel gets its own close-on-exec copies; fd 0 then reads ``/dev/null`` and fd 1
    writes to stderr, so a stray print cannot corrupt the protocol and no child inherits it.
    """
    chan = make(os.dup(0), os.dup(1))
    for end in (chan.read_fd, chan.write_fd):
        os.set_inheritable(end, False)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    return chan


def read_secret(fd: int) -> bytes:
    """The session secret from the pipe ``fd`` (never the environment or a file another
    process of the sandbox could read); the pipe is closed. Short if the host sent less:
    every host frame is then refused."""
    secret = b""
    while len(secret) < SECRET_BYTES:
        chunk = os.read(fd, SECRET_BYTES - len(secret))
        if not chunk:
            break
        secret += chunk
    os.close(fd)
    return secret


def serve_host(chan: Any, serve: Callable[[], None], who: str,
               ends: tuple[type[BaseException], ...] = ()) -> None:
    """Run a sandboxed server's ``serve`` until its host is done with it.

    The end of the stream, a broken pipe or one of ``ends`` (the host's own Shutdown) return;
    a stream that cannot be read as frames is answered ``Refused`` (while the host still
    listens), named on stderr as ``who``, and ends the process with exit 3.
    """
    stop: tuple[type[BaseException], ...] = (BrokenPipeError, *ends)
    try:
        serve()
    except FrameError as exc:
        if exc.reason != "eof":
            try:
                chan.send_frame(refused(exc.reason, exc.message))
            except OSError:
                pass
            sys.stderr.write(f"{who}: {exc.message}\n")
            sys.exit(3)
    except stop:
        pass


# --- payloads ----------------------------------------------------------------------------


def pack(obj: dict[str, Any], *blobs: bytes | bytearray | memoryview) -> bytes:
    """A json payload: ``obj`` (given ``"blobs"``: the attachments' lengths) + attachments."""
    head = json.dumps({**obj, "blobs": [len(b) for b in blobs]}, separators=(",", ":")).encode()
    return b"".join([_U32.pack(len(head)), head, *(bytes(b) for b in blobs)])


def unpack(payload: bytes) -> tuple[dict[str, Any], list[bytes]]:
    """``(object, attachments)`` of a json payload; anything else is ``FrameError``."""
    if len(payload) < _U32.size:
        raise FrameError("malformed", f"a json payload starts with a 4-byte length; got {len(payload)} bytes")
    (n,) = _U32.unpack_from(payload)
    if n > len(payload) - _U32.size:
        raise FrameError("malformed", f"the json header declares {n} bytes; "
                                      f"{len(payload) - _U32.size} follow")
    try:
        obj = json.loads(payload[_U32.size:_U32.size + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FrameError("malformed", f"the json header is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(obj, dict):
        raise FrameError("malformed", f"the json header must be an object, got {type(obj).__name__}")
    lens = obj.get("blobs", [])
    if not isinstance(lens, list) or not all(type(x) is int and x >= 0 for x in lens):
        raise FrameError("malformed", "'blobs' must be a list of byte lengths")
    rest = len(payload) - _U32.size - n
    if sum(lens) != rest:
        raise FrameError("malformed", f"the attachments declare {sum(lens)} bytes; {rest} follow the header")
    blobs, at = [], _U32.size + n
    for ln in lens:
        blobs.append(payload[at:at + ln])
        at += ln
    return obj, blobs


def field(obj: dict[str, Any], key: str, typ: type | tuple[type, ...], default: Any = ...) -> Any:
    """``obj[key]`` of type ``typ`` (``bool`` is never an ``int``), else ``FrameError``."""
    if key not in obj:
        if default is ...:
            raise FrameError("malformed", f"missing field {key!r}")
        return default
    value = obj[key]
    types = typ if isinstance(typ, tuple) else (typ,)
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        raise FrameError("malformed", f"field {key!r} has the wrong type ({type(value).__name__})")
    return value


# --- the session secret -------------------------------------------------------------------


def same_secret(expected: bytes, got: bytes | bytearray | memoryview) -> bool:
    """Constant-time comparison (the length of the secret is public)."""
    return len(expected) == SECRET_BYTES and hmac.compare_digest(expected, bytes(got))


def seal(kind: int, secret: bytes, obj: dict[str, Any], *blobs: bytes | bytearray | memoryview) -> bytes:
    """A host → worker json frame carrying the session secret."""
    return encode(kind, pack({**obj, "secret": secret.hex()}, *blobs))


def open_sealed(kind: int, payload: bytes, secret: bytes) -> tuple[dict[str, Any], list[bytes]]:
    """The object and attachments of a host → worker json frame, its secret checked."""
    if kind in RAW:
        raise FrameError("unexpected", f"{name(kind)} is a raw frame, not a json one")
    obj, blobs = unpack(payload)
    got = obj.pop("secret", None)
    if not isinstance(got, str):
        raise FrameError("secret", f"{name(kind)} carries no session secret; refused")
    try:
        raw = bytes.fromhex(got)
    except ValueError:
        raw = b""
    if not same_secret(secret, raw):
        raise FrameError("secret", f"{name(kind)} carries the wrong session secret; refused")
    return obj, blobs


SEED_BYTES = 32


def ping(secret: bytes, version: int = VERSION, *, seed: bytes = b"") -> bytes:
    """The handshake. ``seed``: 32 fresh random bytes a guest restored from a snapshot mixes
    into its kernel RNG (every VM restored from one snapshot starts with the same RNG state)."""
    if seed and len(seed) != SEED_BYTES:
        raise ValueError(f"a Ping seed is {SEED_BYTES} bytes, not {len(seed)}")
    return encode(PING, secret + _U16.pack(version) + seed)


def check_ping(payload: bytes, secret: bytes) -> int:
    """The host's protocol version from a ``PING``; the wrong secret or version is refused.
    A seed (for snapshot-restored guests) is allowed and not needed by a fresh process."""
    if len(payload) not in (SECRET_BYTES + _U16.size, SECRET_BYTES + _U16.size + SEED_BYTES) \
            or not same_secret(secret, payload[:SECRET_BYTES]):
        raise FrameError("secret", "Ping without the session secret; refused")
    (version,) = _U16.unpack_from(payload, SECRET_BYTES)
    if version != VERSION:
        raise FrameError("version", f"the host speaks protocol version {version}; "
                                    f"this worker speaks {VERSION}")
    return version


def pong(version: int = VERSION) -> bytes:
    return encode(PONG, _U16.pack(version))


def check_pong(payload: bytes) -> int:
    if len(payload) != _U16.size:
        raise FrameError("malformed", f"Pong carries {len(payload)} bytes; expected a 2-byte version")
    (version,) = _U16.unpack(payload)
    if version != VERSION:
        raise FrameError("version", f"the worker speaks protocol version {version}; "
                                    f"this host speaks {VERSION}")
    return version


def shutdown(secret: bytes) -> bytes:
    return encode(SHUTDOWN, secret)


def check_shutdown(payload: bytes, secret: bytes) -> None:
    if not same_secret(secret, payload):
        raise FrameError("secret", "Shutdown without the session secret; refused")


def pty_data(session: int, data: bytes | bytearray | memoryview, secret: bytes | None = None) -> bytes:
    """A ``PtyData`` frame: the host's carry the session secret first, the agent's do not
    (the agent holds no secret of the host's to prove; the host knows whom it spoke to)."""
    return encode(PTY_DATA, (secret or b"") + _U32.pack(session) + bytes(data))


def open_pty_data(payload: bytes, secret: bytes | None = None) -> tuple[int, bytes]:
    """``(session, bytes)`` of a ``PtyData`` payload; given ``secret`` (the agent reading the
    host's frames) it must come first, compared in constant time."""
    if secret is not None:
        if len(payload) < SECRET_BYTES or not same_secret(secret, payload[:SECRET_BYTES]):
            raise FrameError("secret", "PtyData without the session secret; refused")
        payload = payload[SECRET_BYTES:]
    if len(payload) < _U32.size:
        raise FrameError("malformed", f"PtyData carries {len(payload)} bytes; "
                                      "it starts with a 4-byte session id")
    (session,) = _U32.unpack_from(payload)
    return session, payload[_U32.size:]


def refused(reason: str, message: str) -> bytes:
    return encode(REFUSED, pack({"reason": reason, "message": message[:2000]}))


def blobs_of(blobs: Sequence[bytes], n: int, kind: int) -> list[bytes]:
    """Exactly ``n`` attachments, else ``FrameError``."""
    if len(blobs) != n:
        raise FrameError("malformed", f"{name(kind)} carries {len(blobs)} attachments; expected {n}")
    return list(blobs)
