"""``wbx toolkit search`` snippets are cut on word boundaries and keep the match."""

from __future__ import annotations


import pytest

from wbcore_runtime.toolkit.search import _snippet

TEXT = ("The quick brown fox jumps over the lazy dog while the zebrafish swims in circles "
        "around the pond every single morning of the year.")


@pytest.mark.parametrize("query", ["zebra", "fox", "morning", "The quick", "year.", "ebrafi"])
def test_snippets_cut_on_word_boundaries(query: str) -> None:
    at = TEXT.find(query)
    snip = _snippet(TEXT, at, length=len(query))
    assert query in snip
    body = snip.strip("…")
    words = TEXT.split()
    assert body.split()[0] in words or query.split()[0] in body.split()[0]
    assert body.split()[-1] in words or query.split()[-1] in body.split()[-1]
    assert snip.startswith("…") == (not TEXT.startswith(body))
    assert snip.endswith("…") == (not TEXT.endswith(body))


