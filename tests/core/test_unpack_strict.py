"""``unpack.read_files(strict=True)``: for formats that hold only files (a ``.wbundle``), a link,
a folder, a special file, a non-canonical name and a name seen twice are refused, in tar and
zip alike; without ``strict`` the reader keeps skipping them (the ACT and npm readers)."""

from __future__ import annotations

import io
import tarfile
import warnings
import zipfile

import pytest

from wbcore_runtime.guard import unpack


def _tar(entries: list[tarfile.TarInfo | tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for e in entries:
            if isinstance(e, tarfile.TarInfo):
                tf.addfile(e)
            else:
                info = tarfile.TarInfo(e[0])
                info.size = len(e[1])
                tf.addfile(info, io.BytesIO(e[1]))
    return buf.getvalue()


def _zip(entries: list[tuple[str, bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a duplicate name is the point
        with zipfile.ZipFile(buf, "w") as zf:
            for name, data, mode in entries:
                info = zipfile.ZipInfo(name)
                info.external_attr = mode << 16
                zf.writestr(info, data)
    return buf.getvalue()


def _link(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


def _dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info


@pytest.mark.parametrize(("data", "match"), [
    (_tar([("a", b"1"), _link("b", "/etc/passwd")]), "'b' is a link or special file"),
    (_tar([_dir("d"), ("d/a", b"1")]), "'d' is a folder"),
    (_tar([("a", b"1"), ("a", b"2")]), "'a' appears twice"),
    (_tar([("./a", b"1")]), "not in canonical form"),
    (_zip([("a", b"1", 0o100644), ("b", b"/etc/passwd", 0o120777)]), "'b' is a link or special file"),
    (_zip([("a", b"1", 0o100644), ("a", b"2", 0o100644)]), "'a' appears twice"),
    (_zip([("d/", b"", 0o040755)]), "'d' is a folder"),
    (_zip([("x//y", b"1", 0o100644)]), "not in canonical form"),
    (_zip([("../up", b"1", 0o100644)]), "climbs out"),
], ids=["tar-link", "tar-dir", "tar-dup", "tar-dot", "zip-link", "zip-dup", "zip-dir", "zip-slashes",
        "zip-slip"])
def test_strict_refuses_what_is_not_one_plain_file(data: bytes, match: str) -> None:
    with pytest.raises(unpack.UnsafeArchive, match=match):
        unpack.read_files(data, what="t", strict=True)


def test_without_strict_links_and_folders_are_skipped_as_before() -> None:
    data = _tar([_dir("d"), ("d/a", b"1"), _link("b", "/etc/passwd")])
    assert unpack.read_files(data, what="t") == {"d/a": b"1"}
    assert unpack.read_files(_tar([("a", b"x")]), what="t", strict=True) == {"a": b"x"}
