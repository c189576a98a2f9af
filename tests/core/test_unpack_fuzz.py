"""Property tests of the archive reader (issue 22 item 6): whatever a tar or zip holds, the core's
unpacker either returns files whose names stay inside and whose bytes stay under the caps, or
refuses with UnsafeArchive — never another exception, never a name that climbs out."""

from __future__ import annotations

import io
import tarfile
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wbcore_runtime.guard import unpack
from wbcore_runtime.store.registry import name_key

_segment = st.sampled_from(["a", "b", "..", ".", "", "SKILL.md", "x y", "\x00", "ü", "C:"])
_names = st.lists(_segment, min_size=1, max_size=4).map("/".join) | st.text(max_size=30)
_members = st.lists(st.tuples(_names, st.binary(max_size=300)), max_size=12)
CAPS = unpack.Caps(max_files=8, max_bytes=1000)


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name or "x")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _zip(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members:
            zf.writestr(name or "x", data)
    return buf.getvalue()


def _check(data: bytes) -> None:
    try:
        files = unpack.read_files(data, CAPS, what="fuzz")
    except unpack.UnsafeArchive:
        return
    assert sum(map(len, files.values())) <= CAPS.max_bytes
    for name in files:
        assert name and not name.startswith("/") and "\x00" not in name
        assert ".." not in name.split("/") and "" not in name.split("/")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_members)
def test_tar_members_stay_inside_and_under_caps(members) -> None:
    try:
        data = _tar(members)
    except (ValueError, UnicodeEncodeError):
        return  # tarfile itself cannot write that name
    _check(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_members)
@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_zip_members_stay_inside_and_under_caps(members) -> None:
    try:
        data = _zip(members)
    except (ValueError, IndexError):
        return  # zipfile itself cannot write that name (it cuts a name at NUL, then indexes it)
    _check(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_are_refused_or_read_never_crash(data) -> None:
    _check(data)


@given(st.text(max_size=20),
       st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=20))
def test_name_key_ignores_trailing_dots_and_case(name, ascii_name) -> None:
    assert name_key(name + "...") == name_key(name)
    assert name_key(ascii_name.upper()) == name_key(ascii_name.capitalize() + ".") == ascii_name
