"""jsonbound: JSON from the wire refused by depth and size with a reason, never a RecursionError."""

from __future__ import annotations

import pytest

from wbcore_runtime.contract import jsonbound


def test_depth_ignores_brackets_inside_strings():
    assert jsonbound.depth(b'[[{"a": "[[[[{{"}]]') == 3
    assert jsonbound.depth(b'["\\"[[["]') == 1
    assert jsonbound.depth(b"42") == 0


@pytest.mark.parametrize("n", [129, 1000, 100_000])
def test_too_deep_is_refused_with_the_depth(n):
    with pytest.raises(jsonbound.JsonRefused, match=f"nests {n} levels deep; at most 128") as info:
        jsonbound.loads(b"[" * n + b"]" * n)
    assert info.value.status == 400


def test_within_bounds_parses_and_errors_say_what_is_wrong():
    assert jsonbound.loads("[" * 128 + "]" * 128) == eval("[" * 128 + "]" * 128)
    assert jsonbound.loads(b'{"a": "[[[["}') == {"a": "[[[["}
    with pytest.raises(jsonbound.JsonRefused, match="is not JSON"):
        jsonbound.loads(b"{nope")
    with pytest.raises(jsonbound.JsonRefused, match="exceeds the 4-byte cap") as info:
        jsonbound.loads(b"[1,2]", max_bytes=4)
    assert info.value.status == 413
    assert issubclass(jsonbound.JsonRefused, ValueError)  # callers catching ValueError still catch it
