"""Property: no byte of a signed toolkit can change unnoticed.

Flip, insert and delete bytes of a signed toolkit — every Unicode line break inserted
anywhere, most of all around the signature lines (the only manifest bytes the signature
does not cover) — and every mutation must fail ``signing.verify`` or be refused by the
parser (which ``verify`` reports as malformed).
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from wbcore_runtime.trust import identity, signing
from wbcore_runtime.toolkit import manifest
from wbcore_runtime.contract.errors import InvalidArgs

from wbcore_testing.toolkit_sources import SEED0, write_vec

#: Every character ``str.splitlines`` (and so orgparse) ends a line at.
BREAKS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
FILES = ("manifest.org", "manifest.org", "manifest.org", "skills/overview.org", "bin/tool.wasm")


@functools.cache
def signed_files() -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        d = write_vec(Path(tmp))
        signing.sign(d, identity.Identity.from_seed(SEED0))
        assert signing.verify(d).ok
        return {rel: (d / rel).read_bytes()
                for rel in ("manifest.org", "skills/overview.org", "bin/tool.wasm")}


def anchors(data: bytes) -> list[int]:
    """Offsets at and around the signature and AUTHOR_DID lines (start, after the colon, end)."""
    out: list[int] = []
    for needle in (b"#+SIGNATURE:", b":SIGNATURE:", b"#+AUTHOR_DID:", b":AUTHOR_DID:"):
        at = data.find(needle)
        if at < 0:
            continue
        end = data.find(b"\n", at)
        out += [at, at - 1, at + len(needle), at + len(needle) + 1, end, end + 1, end - 1]
    return [i for i in out if 0 <= i <= len(data)]


@st.composite
def mutation(draw: st.DrawFn) -> tuple[str, bytes]:
    files = signed_files()
    rel = draw(st.sampled_from(FILES))
    data = bytearray(files[rel])
    for _ in range(draw(st.integers(1, 3))):
        near = anchors(bytes(data)) if rel == "manifest.org" else []
        if near and draw(st.booleans()):
            pos = draw(st.sampled_from(near))
        else:
            pos = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["flip", "insert", "insert-break", "delete", "delete-line"]))
        if op == "flip" and pos < len(data):
            data[pos] ^= draw(st.integers(1, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=6))
        elif op == "insert-break":
            tail = draw(st.sampled_from(
                ["", "* Evil :toolkit:", "  :CLI_BIN: evil", "#+CAPS: net exec", " "]))
            data[pos:pos] = (draw(st.sampled_from(BREAKS)) + tail).encode("utf-8")
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
        else:  # a whole line: the drawer mirror, a blank line, a keyword ...
            lines = bytes(data).split(b"\n")
            lines.pop(draw(st.integers(0, len(lines) - 1)))
            data = bytearray(b"\n".join(lines))
    return rel, bytes(data)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutation())
def test_every_mutation_fails_verify_or_parse(mut: tuple[str, bytes]) -> None:
    rel, data = mut
    assume(data != signed_files()[rel])
    with tempfile.TemporaryDirectory() as tmp:
        d = write_vec(Path(tmp))
        for name, original in signed_files().items():
            (d / name).write_bytes(data if name == rel else original)
        verdict = signing.verify(d, resolve_web=False)
        if verdict.ok:
            raise AssertionError(f"mutated {rel} still verifies: {data!r}")
        if (rel == "manifest.org" and verdict.code == signing.MALFORMED
                and "cannot read the manifest" in verdict.message):
            try:  # refused by the parser: the parser says so too, with file:line
                manifest.load(d / "manifest.org")
            except InvalidArgs as exc:
                assert "manifest.org:" in exc.message
            else:
                raise AssertionError(f"verify called {verdict.message!r} a parse failure, but it parses")


def test_every_line_break_next_to_the_signature_is_caught() -> None:
    """Exhaustive for the attack's shape: each break, at each anchor, with a new :toolkit: node after it."""
    original = signed_files()["manifest.org"]
    for at in anchors(original):
        for brk in BREAKS:
            data = original[:at] + (brk + "* Evil :toolkit:").encode() + original[at:]
            with tempfile.TemporaryDirectory() as tmp:
                d = write_vec(Path(tmp))
                for name, content in signed_files().items():
                    (d / name).write_bytes(data if name == "manifest.org" else content)
                assert not signing.verify(d, resolve_web=False).ok, (at, brk)
