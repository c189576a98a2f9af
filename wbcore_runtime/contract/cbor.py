"""CBOR at the ACT edges: deterministic encoding (RFC 8949 §4.2), bounded decoding.

The host hands components deterministically encoded CBOR (shortest integers, sorted
map keys, definite lengths); inputs from outside are decoded with a size cap and
re-encoded, so a caller's encoding choices never reach a guest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import cbor2

from wbcore_runtime.contract.errors import InvalidArgs

#: Arguments and metadata values are capped like every message (DESIGN.md: ≤ 64 MiB).
MAX_CBOR_BYTES = 64 << 20


def dumps(value: Any) -> bytes:
    """Deterministic CBOR (canonical: sorted keys, shortest forms)."""
    try:
        return cbor2.dumps(value, canonical=True)
    except (cbor2.CBOREncodeError, TypeError, ValueError) as exc:
        raise InvalidArgs(f"cannot encode as CBOR: {exc}") from None


def loads(data: bytes | bytearray | memoryview) -> Any:
    if len(data) > MAX_CBOR_BYTES:
        raise InvalidArgs(f"CBOR of {len(data)} bytes is over the {MAX_CBOR_BYTES}-byte cap")
    try:
        return cbor2.loads(bytes(data))
    except (cbor2.CBORDecodeError, ValueError, TypeError, EOFError) as exc:
        raise InvalidArgs(f"malformed CBOR: {exc}") from None


def canonicalize(data: bytes) -> bytes:
    """Decode and re-encode deterministically (what the host passes to a guest)."""
    return dumps(loads(data))


def encode_metadata(meta: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """Decoded metadata → the wire form ``list<tuple<string, list<u8>>>``."""
    return [(k, dumps(v)) for k, v in meta.items()]


def decode_metadata(pairs: Iterable[tuple[str, bytes | bytearray | list[int]]] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, raw in pairs or ():
        out[str(key)] = loads(bytes(raw))
    return out
