"""sha256, the digest the core uses everywhere, without importing :mod:`hashlib` to get it.

``import hashlib`` asks OpenSSL for every algorithm it guarantees (md5 … shake_256): ~3 ms
of every ``wbx`` start, more than the rest of a cached ``wbx run`` resolution. With OpenSSL
(CPython's usual build) ``hashlib.sha256`` *is* ``_hashlib.openssl_sha256``; without it,
hashlib's own.
"""

from __future__ import annotations

try:
    from _hashlib import openssl_sha256 as sha256
except ImportError:  # pragma: no cover - a Python built without OpenSSL
    from hashlib import sha256

__all__ = ["sha256"]
