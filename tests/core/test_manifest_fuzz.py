"""Hypothesis fuzzing: the manifest parser returns a Manifest or a ManifestError, fast."""

from __future__ import annotations

import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wbcore_runtime.toolkit import manifest
from wbcore_runtime.contract.errors import ManifestError
from wbcore_testing.fixtures import manifest_text

P = Path("/fuzz/demo/manifest.org")

ORG_PIECES = st.sampled_from(
    [
        "#+TITLE: t\n", "#+TOOLKIT: demo\n", "#+VERSION: 1.2.3\n", "#+STATUS: stable\n", "#+TAGLINE: x\n",
        "#+EXEC: command\n", "#+CAPS: net vfs\n", "#+TRUST: third-party\n", "* H :toolkit:\n", "** sub\n",
        "  :PROPERTIES:\n", "  :END:\n", "  :ID: demo\n", "  :EXEC: tool\n", "  :CLI_BIN: x\n",
        "#+begin_src sh\n", "#+end_src\n", "* TODO [#A] <2026-01-01 Thu> heading :a:b:\n",
        "CLOSED: [2026-01-01]\n",
        "SCHEDULED: <2026-13-45 Xyz>\n", ":LOGBOOK:\n", "- [ ] item\n", "\n", "\t", ":", "*", "#+",
    ]
)


def _check(text: str) -> None:
    start = time.monotonic()
    try:
        m = manifest.parse(text, P)
    except ManifestError as err:
        assert err.path == P and err.line >= 0 and err.field
    else:
        assert m.id and isinstance(m.caps, tuple)
    assert time.monotonic() - start < 2.0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=2000))
def test_random_text_never_crashes(text):
    _check(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(ORG_PIECES, max_size=40))
def test_org_shaped_text_never_crashes(pieces):
    _check("".join(pieces))


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=400), st.text(max_size=30))
def test_mutated_valid_manifest_never_crashes(at, insert):
    base = manifest_text("demo", exec="command", caps="vfs", extra={"CLI_BIN": "demo"})
    at = min(at, len(base))
    _check(base[:at] + insert + base[at:])


def test_a_byte_order_mark_is_refused_by_name():
    """A BOM made line 1 silently stop being a keyword (the error then blamed a missing TITLE)."""
    import pytest

    good = manifest_text("demo", exec="command", extra={"CLI_BIN": "demo"})
    for text in ("\ufeff" + good, "\ufeff" + good.replace("\n", "\r\n")):
        with pytest.raises(ManifestError, match="byte-order mark"):
            manifest.parse(text, P)
    assert manifest.parse(good.replace("\n", "\r\n"), P).id == "demo"
    _check("\ufeff")
