"""CBOR at the ACT edges: deterministic encoding (RFC 8949 §4.2), bounded decoding.

The host hands components deterministically encoded CBOR (shortest integers, sorted
map keys, definite lengths); inputs from outside (a caller's arguments, a guest's Dock
request) are decoded with :func:`loads` under a size cap and re-encoded, so a caller's
encoding choices never reach a guest.

:func:`loads` decodes plain data only. Its input is hostile, and the decoder runs with the
GIL held, past every deadline: tags that make it compute or expand (a rational's gcd over
two megabyte bignums takes minutes; shared and string references turn a few hundred bytes
into a tree of millions of nodes, or a cycle) are refused, and map keys are text or bytes
(integer, float and array keys can be chosen to hash alike, making a map quadratic to build).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import cbor2

from wbcore_runtime.contract.errors import InvalidArgs

#: Arguments and metadata values are capped like every message (DESIGN.md: ≤ 64 MiB).
MAX_CBOR_BYTES = 64 << 20
#: Tags refused while decoding: decimal fraction, bigfloat, rational (compute); stringref
#: and its namespace, shareable and sharedref (expand, or make cycles); regex, MIME (parse).
REFUSED_TAGS = {4: "decimal fraction", 5: "bigfloat", 30: "rational", 25: "string reference",
                256: "string reference namespace", 28: "shared value", 29: "shared reference",
                35: "regular expression", 36: "MIME message"}


def _refuse(tag: int) -> Any:
    def decoder(_decoder: Any) -> Any:
        raise cbor2.CBORDecodeError(f"tag {tag} ({REFUSED_TAGS[tag]}) is not accepted; send plain data")
    return decoder


_PLAIN = {tag: _refuse(tag) for tag in REFUSED_TAGS}


def dumps(value: Any) -> bytes:
    """Deterministic CBOR (canonical: sorted keys, shortest forms)."""
    try:
        return cbor2.dumps(value, canonical=True)
    except (cbor2.CBOREncodeError, TypeError, ValueError) as exc:
        raise InvalidArgs(f"cannot encode as CBOR: {exc}") from None


def loads(data: bytes | bytearray | memoryview) -> Any:
    """Plain data from untrusted CBOR (see the module's docstring); ``InvalidArgs`` says why not."""
    if len(data) > MAX_CBOR_BYTES:
        raise InvalidArgs(f"CBOR of {len(data)} bytes is over the {MAX_CBOR_BYTES}-byte cap")
    try:
        return cbor2.loads(bytes(data), semantic_decoders=_PLAIN, strict_hashable_types=True)
    except (cbor2.CBORDecodeError, ValueError, TypeError, EOFError) as exc:
        cause = exc.__cause__ or exc.__context__
        raise InvalidArgs(f"malformed CBOR: {exc}" + (f": {cause}" if cause else "")) from None


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
