"""Canonical JSON: the one byte form of a JSON value that is hashed, chained or signed.

Object keys sorted by code point, no whitespace, every non-ASCII character as a ``\\uXXXX``
escape (so the bytes are ASCII and the same from every writer). The audit chain, the build
cache key, OCI manifests and configs and the publish plugin's signed manifests all call
:func:`canonical_json`; a second spelling of these options would be a second, drifting form.
What may go in (floats, depth) is the caller's rule (``wbcore_publish.canonical`` refuses
floats in a signed manifest).
"""

from __future__ import annotations

import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    """``value`` as canonical JSON bytes (ASCII)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
