"""Archives an install unpacks (``guard.unpack``): traversal, links, entry and byte caps, safe names."""

from __future__ import annotations

import tarfile
import zipfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wbcore_runtime.guard import unpack
from wbcore_testing.toolkit_sources import MANIFEST, evil_tar, tar_info


def test_zip_traversal_and_symlinks_are_refused(tmp_path):
    z = tmp_path / "evil.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("e/manifest.org", MANIFEST)
        zf.writestr("../evil.txt", b"x")
    with pytest.raises(unpack.UnsafeArchive, match="climbs out"):
        unpack.unpack(z, tmp_path / "out1")
    z2 = tmp_path / "link.zip"
    with zipfile.ZipFile(z2, "w") as zf:
        info = zipfile.ZipInfo("e/link")
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, "../../outside")
    with pytest.raises(unpack.UnsafeArchive, match="escapes"):
        unpack.unpack(z2, tmp_path / "out2")


def test_caps_on_files_and_bytes(tmp_path):
    many = evil_tar(tmp_path / "many.tar.gz", [(tar_info(f"e/f{i}"), b"x") for i in range(20)])
    with pytest.raises(unpack.UnsafeArchive, match="more than 10 entries"):
        unpack.unpack(many, tmp_path / "o1", unpack.Caps(max_files=10))
    # compresses to almost nothing
    big = evil_tar(tmp_path / "big.tar.gz", [(tar_info("e/big"), b"\0" * 200_000)])
    with pytest.raises(unpack.UnsafeArchive, match="over the cap|more than 100000 bytes"):
        unpack.unpack(big, tmp_path / "o2", unpack.Caps(max_bytes=100_000))


def test_links_that_chain_out_of_the_tree_never_carry_a_folder_outside(tmp_path):
    # each link lexically inside; together ``c`` is two levels above the tree
    links = [("a", "."), ("a/b", ".."), ("c", "b/..")]
    chain = [(tar_info(name, tarfile.SYMTYPE, target), None) for name, target in links]
    chain.append((tar_info("c/planted/deep", tarfile.DIRTYPE), None))
    (tmp_path / "w").mkdir()
    with pytest.raises(unpack.UnsafeArchive, match="escapes the tree|outside the tree"):
        unpack.unpack(evil_tar(tmp_path / "chain.tar.gz", chain), tmp_path / "w" / "tree")
    z = tmp_path / "chain.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for name, target in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o120777 << 16
            zf.writestr(info, target)
        zf.writestr("c/planted/deep/", b"")
    with pytest.raises(unpack.UnsafeArchive, match="escapes the tree|outside the tree"):
        unpack.unpack(z, tmp_path / "w" / "tree2")
    assert not (tmp_path / "planted").exists() and sorted(p.name for p in (tmp_path / "w").iterdir()) == [
        "tree", "tree2"]


@pytest.mark.parametrize("second", [tar_info("x", tarfile.DIRTYPE), tar_info("x/y", tarfile.DIRTYPE),
                                    tar_info("x/y"), tar_info("x/y", tarfile.SYMTYPE, "z"), None])
def test_an_entry_under_a_file_is_refused_as_unsafe(tmp_path, second):
    # each raised a bare FileExistsError, NotADirectoryError or OSError naming the staging folder
    first = [(tar_info("x"), b"file")] if second else [(tar_info("x", tarfile.SYMTYPE, "w"), None),
                                                       (tar_info("w", tarfile.SYMTYPE, "x"), None)]
    archive = evil_tar(tmp_path / "a.tar.gz", [*first, (second or tar_info("x/y", tarfile.DIRTYPE), None)])
    with pytest.raises(unpack.UnsafeArchive, match="a.tar.gz: entry .x.* needs a folder where"):
        unpack.unpack(archive, tmp_path / "tree")


def test_layers_share_one_budget(tmp_path):
    layers = [evil_tar(tmp_path / f"l{i}.tar.gz", [(tar_info(f"f{i}"), b"x" * 600)]) for i in range(2)]
    with pytest.raises(unpack.UnsafeArchive, match="l1.tar.gz: more than 1000 bytes"):
        unpack.unpack_layers(layers, tmp_path / "tree", unpack.Caps(max_bytes=1000))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab./\\\\:\x00 ", min_size=1, max_size=24))
def test_safe_names_never_escape(name):
    try:
        rel = unpack.safe_name(name, "fuzz")
    except unpack.UnsafeArchive:
        return
    assert not rel.startswith("/") and ".." not in rel.split("/") and "\x00" not in rel
    assert rel == "" or ("" not in rel.split("/") and "." not in rel.split("/"))  # "" = the root itself
