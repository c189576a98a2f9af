"""Property tests of the manifest parser (issue 22 item 6): whatever text a toolkit folder
holds, ``manifest.parse`` returns a manifest or refuses with a ``ManifestError`` naming the
file — never another exception. Also a byte-order mark (refused by name; before, line 1
silently stopped being a keyword) and CR-only line ends. A second ``#+SIGNATURE``, an
``#+AUTHOR_DID`` that is not the signer's and mutations around the signature lines are in
test_signing.py and test_signing_fuzz.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wbcore_runtime import manifest as m
from wbcore_runtime.errors import ManifestError
from wbcore_runtime.testing import manifest_text

GOOD = manifest_text("demo", exec="command", extra={"CLI_BIN": "demo"}, drawer={"CLI_BIN": "demo"})
#: Pieces a hostile manifest is made of: org syntax, keywords, drawers, odd characters.
PIECES = ["#+TITLE: x", "#+TOOLKIT: demo", "#+TOOLKIT: ../x", "#+CLI_BIN: UPPER", "#+CAPS: net kv", "#+EXEC: command",
          "#+SIGNATURE: z", "#+AUTHOR_DID: did:key:z6Mk", "* h :toolkit:", "** sub", "  :PROPERTIES:", "  :END:",
          "  :ID: demo", "  :CLI_BIN: x", "#+begin_src sh", "#+end_src", "\ufeff", "\r", "\r\n", "\n", "\x00",
          "\u2028", "\x85", ":", "#+", "*", " ", "\t", "é", "x" * 300]


def _parse_or_refuse(text: str) -> None:
    try:
        got = m.parse(text, "manifest.org")
    except ManifestError as exc:
        assert "manifest.org" in str(exc) and str(exc).strip()
        return
    assert got.id  # a parsed manifest always names its toolkit


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=30).map("\n".join))
def test_pieces_of_org_parse_or_are_refused(text: str) -> None:
    _parse_or_refuse(text)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_mutated_manifest_parses_or_is_refused(data: st.DataObject) -> None:
    text = GOOD
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        how = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = data.draw(st.sampled_from(PIECES) | st.text(max_size=6))
        if how == "insert":
            text = text[:at] + piece + text[at:]
        elif how == "delete":
            text = text[:at] + text[at + data.draw(st.integers(1, 20)):]
        else:
            text = text[:at] + piece + text[at + len(piece):]
    _parse_or_refuse(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_any_text_parses_or_is_refused(text: str) -> None:
    _parse_or_refuse(text)


def test_a_byte_order_mark_is_refused_by_name() -> None:
    for text in ("\ufeff" + GOOD, "\ufeff" + GOOD.replace("\n", "\r\n")):
        with pytest.raises(ManifestError, match="byte-order mark"):
            m.parse(text, "manifest.org")
    assert m.parse(GOOD.replace("\n", "\r\n"), "manifest.org").id == "demo"


@pytest.mark.parametrize("brk", ["\r", "\r\r\n"])
def test_cr_line_ends_are_refused(brk: str) -> None:
    with pytest.raises(ManifestError):
        m.parse(GOOD.replace("\n", brk), "manifest.org")
