"""sha256 without :mod:`hashlib` (its import asks OpenSSL for every algorithm, ~3 ms). Loading OpenSSL
costs ~2 ms more than CPython's own sha256, which hashes ~7x slower: below :data:`LARGE` bytes
CPython's, from there OpenSSL's, so a ``wbx run`` of a small command never loads OpenSSL. Both give
the same digest: no check depends on which."""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

try:
    from _sha2 import sha256 as _own  # CPython >= 3.12
except ImportError:
    from _sha256 import sha256 as _own
LARGE = 256 << 10  # from this many bytes OpenSSL's faster hashing pays for loading it


@cache
def _openssl() -> Any:
    return importlib.import_module("_hashlib").openssl_sha256  # loaded on first use


def sha256(data: bytes | bytearray | memoryview = b"", *, size: int = 0) -> Any:
    """A sha256 hasher (``hashlib.sha256``'s interface) fed ``data``; ``size``: the bytes it will hash."""
    return (_openssl() if max(len(data), size) >= LARGE else _own)(data)
