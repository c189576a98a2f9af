"""sha256, the digest the core uses everywhere, without importing :mod:`hashlib` to get it.

``import hashlib`` asks OpenSSL for every algorithm it guarantees (md5 … shake_256): ~3 ms
of every ``wbx`` start, more than the rest of a cached ``wbx run`` resolution. Loading
OpenSSL's library at all (``_hashlib``) is ~2 ms of CPU more than CPython's own SHA-256
module (``_sha2``, ``_sha256`` before 3.12), which is as exact but hashes ~7x slower. So
:func:`sha256` (short inputs: keys, stamps, small artifacts) uses CPython's own, and
:func:`sha256_for` gives a hasher for ``size`` bytes: OpenSSL's from :data:`LARGE` up, loaded
on that first use. A ``wbx run`` of a small command never loads OpenSSL; both compute the
same digest, so no check depends on which one ran.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    from _sha2 import sha256 as _own  # CPython >= 3.12
except ImportError:
    try:
        from _sha256 import sha256 as _own  # CPython 3.11
    except ImportError:  # pragma: no cover - a build without its own sha256
        _own = None

#: From this many bytes, OpenSSL's sha256 (its faster hashing pays for loading it).
LARGE = 256 << 10

_big: Callable[..., Any] | None = None


def _openssl() -> Callable[..., Any]:
    global _big
    if _big is None:
        try:
            from _hashlib import openssl_sha256 as big
        except ImportError:  # pragma: no cover - a Python built without OpenSSL
            from hashlib import sha256 as big
        _big = big
    return _big


def sha256(data: bytes | bytearray | memoryview = b"") -> Any:
    """A sha256 hasher (``hashlib.sha256``'s interface) fed ``data``."""
    if _own is None or len(data) >= LARGE:
        return _openssl()(data)
    return _own(data)


def sha256_for(size: int) -> Callable[..., Any]:
    """The sha256 constructor for hashing ``size`` bytes in pieces (a file, a stream)."""
    return _openssl() if _own is None or size >= LARGE else _own


__all__ = ["LARGE", "sha256", "sha256_for"]
