"""JSON from the wire, bounded: one function decides whether a request body is JSON a server
will parse (size and nesting depth), and every HTTP and stdio surface calls it.

Python's :func:`json.loads` recurses once per ``[``/``{``: a line nested ~1,000 deep raises
:class:`RecursionError` (not :class:`ValueError`) from deep inside a server's stack, which a
handler that catches ``ValueError`` turns into a ``500`` — or, on a stdio loop, a dead
process. :func:`loads` counts the nesting first, outside any string, at C speed (one regular
expression pass), and refuses too deep a document with :class:`JsonRefused` (a
``ValueError``), which each surface answers with its protocol's error: HTTP ``400`` /
``413``, JSON-RPC ``-32700``.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

#: Deeper than any request wbcore serves needs (tool arguments, sessions, review items).
MAX_DEPTH = 128
#: A JSON string (with its escapes) or one bracket: the scan skips the former, counts the latter.
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)
_OPEN = {ord("["), ord("{")}


class JsonRefused(ValueError):
    """The text is not JSON a server parses: malformed, too deep or too large (``status``
    is the HTTP answer: 400, or 413 for size)."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def depth(raw: bytes) -> int:
    """The deepest nesting of ``[``/``{`` in ``raw``, ignoring brackets inside strings."""
    steps = [(1 if m[0] in _OPEN else -1) for m in (t.group() for t in _TOKENS.finditer(raw)) if len(m) == 1]
    return max(accumulate(steps), default=0)


def loads(raw: bytes | str, *, max_depth: int = MAX_DEPTH, max_bytes: int | None = None,
          what: str = "the body") -> Any:
    """``raw`` parsed, or :class:`JsonRefused` saying what is wrong (size, depth, syntax)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
    if max_bytes is not None and len(data) > max_bytes:
        raise JsonRefused(f"{what} of {len(data)} bytes exceeds the {max_bytes}-byte cap", status=413)
    if data.count(b"[") + data.count(b"{") > max_depth:  # cheap: only a bracket-heavy body is scanned
        deepest = depth(data)
        if deepest > max_depth:
            raise JsonRefused(f"{what} nests {deepest} levels deep; at most {max_depth} are accepted")
    try:
        return json.loads(data)
    except RecursionError:  # unreachable after the scan, kept so no caller ever sees one
        raise JsonRefused(f"{what} nests too deep to parse") from None
    except ValueError as exc:
        raise JsonRefused(f"{what} is not JSON ({exc})") from None
