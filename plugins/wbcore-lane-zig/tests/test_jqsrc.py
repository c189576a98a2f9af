"""The jq built-in's sources: pinned on the way in, checked on every use, staged as the
c lane expects. No network: a wrong file is made here; the real one comes from the cache
``dev.py setup`` filled (tests needing it skip, saying how to fill it)."""

from __future__ import annotations

import io
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from wbcore_lane_zig.builtins import jqsrc
from wbcore_runtime.contract.errors import InvalidArgs


@pytest.fixture
def tree() -> Path:
    have = jqsrc.sources()
    if have is None:
        pytest.skip(jqsrc.missing())
    return have


def tarball(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def test_a_file_that_is_not_the_pinned_sdist_is_refused_and_nothing_is_kept(tmp_path: Path) -> None:
    env = {"WB_JQ_CACHE": str(tmp_path / "cache")}
    fake = tarball(tmp_path / "jq-1.13.0.tar.gz", {jqsrc.TARBALL_MEMBER: b"not jq"})
    with pytest.raises(InvalidArgs, match="is not the pinned"):
        jqsrc.fetch(env=env, sdist=fake)
    assert jqsrc.sources(env) is None
    assert [p.name for p in (tmp_path / "cache").iterdir()] == []  # no partial tree, no temp folder
    assert "fetch-jq" in jqsrc.missing(env)


def test_a_tampered_cache_is_not_used(tmp_path: Path, tree: Path) -> None:
    env = {"WB_JQ_CACHE": str(tmp_path / "cache")}
    copy = jqsrc.cache_dir(env)
    shutil.copytree(tree.parent, copy)
    assert jqsrc.sources(env) == copy / "tree"
    (copy / "tree" / "src" / "jv.c").write_text("int evil;\n")
    jqsrc._checked.clear()
    assert jqsrc.sources(env) is None
    with pytest.raises(InvalidArgs, match="not fetched"):
        jqsrc.stage(tmp_path / "stage", env)


def test_a_tree_changed_after_the_check_is_refused_not_staged(tmp_path: Path, tree: Path) -> None:
    env = {"WB_JQ_CACHE": str(tmp_path / "cache")}
    copy = jqsrc.cache_dir(env)
    shutil.copytree(tree.parent, copy)
    assert jqsrc.sources(env) == copy / "tree"  # checked: the stamp is kept for this process
    (copy / "tree" / "src" / "jv.c").write_text("int evil;\n")  # a swap after the check
    assert jqsrc.sources(env) == copy / "tree"  # the check passes still: .pinned did not change
    with pytest.raises(InvalidArgs, match="changed after they were checked") as err:
        jqsrc.stage(tmp_path / "stage", env)
    assert "fetch-jq" in str(err.value)
    assert not (tmp_path / "stage" / "src" / "jv.c").exists()


def test_builtin_inc_is_builtin_jq_as_bytes(tree: Path) -> None:
    src = (tree / "src" / "builtin.jq").read_bytes()
    inc = jqsrc.builtin_inc(src)
    assert bytes(int(tok, 8) for tok in re.findall(r"\b0[0-7]*\b", inc)) == src


def test_stage_lays_out_what_the_c_lane_compiles(tmp_path: Path, tree: Path) -> None:
    out = tmp_path / "stage"
    jqsrc.stage(out)
    compiled = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.c") if ".oniguruma" not in p.parts)
    assert "src/main.c" in compiled and "wb_main.c" in compiled and "src/inject_errors.c" not in compiled
    assert ([c for c in compiled if c.startswith("oniguruma/")]
            == sorted(f"oniguruma/{n}" for n in jqsrc.ONIG_SOURCES))
    # upstream files are staged byte for byte
    assert (out / "src" / "execute.c").read_bytes() == (tree / "src" / "execute.c").read_bytes()
    assert (out / "oniguruma" / "unicode.c").read_text() == '#include "../.oniguruma/unicode.c"\n'
    # #included by unicode.c, not compiled alone
    assert (out / ".oniguruma" / "unicode_fold_data.c").is_file()
    assert (out / "include" / "pthread.h").is_file() and (out / "src" / "builtin.inc").is_file()


def test_flags_stay_inside_the_c_lane_allowlist() -> None:
    from wbcore_lane_zig.lanes import check_c_flags

    check_c_flags(jqsrc.FLAGS)


def test_version_needs_no_staging_and_says_when_sources_are_missing(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                     tree: Path) -> None:
    from wbcore_lane_zig.builtins import version

    have = version("jq")
    assert have.startswith("c-") and have != "c-jq-unfetched"
    monkeypatch.setenv("WB_JQ_CACHE", str(tmp_path / "empty"))
    assert version("jq") == "c-jq-unfetched"  # the first build fetches (or says how)
