"""ACT custom sections at any nesting depth of a component, bounded; ``act:skill`` archives."""

from __future__ import annotations

import re

import io
import tarfile

import cbor2
import pytest

from wbcore_act import sections
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_testing.fixtures import add_custom_section

MODULE = b"\x00asm\x01\x00\x00\x00"
COMPONENT = b"\x00asm\x0d\x00\x01\x00"


def _uleb(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _nest(outer: bytes, sid: int, inner: bytes) -> bytes:
    return outer + bytes([sid]) + _uleb(len(inner)) + inner


def _info(name: str) -> bytes:
    return cbor2.dumps({"std": {"name": name, "version": "1.0.0"}})


def test_sections_in_a_nested_core_module_are_found() -> None:
    core = add_custom_section(MODULE, sections.ACT_COMPONENT, _info("inner"))
    core = add_custom_section(core, sections.ACT_SKILL, b"# inner skill")
    wasm = _nest(COMPONENT, 1, core)
    assert sections.custom_section(wasm, sections.ACT_COMPONENT) == _info("inner")
    info = sections.read_act_info(wasm)
    assert info is not None and info.name == "inner" and info.skill == "# inner skill"


def test_outermost_wins_and_nested_components_are_walked() -> None:
    deep = _nest(COMPONENT, 4,
                 _nest(COMPONENT, 1, add_custom_section(MODULE, sections.ACT_COMPONENT, _info("deep"))))
    assert sections.read_act_info(deep).name == "deep"
    outer = add_custom_section(deep, sections.ACT_COMPONENT, _info("outer"))
    assert sections.read_act_info(outer).name == "outer"


def test_a_core_modules_type_section_is_not_read_as_nesting() -> None:
    # section id 1 of a core module is its type section: (func) with no params/results
    module = MODULE + b"\x01\x04\x01\x60\x00\x00"
    assert list(sections.nested_custom_sections(module)) == []


def test_nesting_is_bounded() -> None:
    wasm = add_custom_section(MODULE, sections.ACT_COMPONENT, _info("too-deep"))
    for _ in range(sections.MAX_DEPTH + 1):
        wasm = _nest(COMPONENT, 4, wasm)
    with pytest.raises(InvalidArgs, match="nesting deeper than"):
        sections.read_act_info(wasm)


def test_a_truncated_nested_binary_is_refused_with_where() -> None:
    wasm = _nest(COMPONENT, 1, MODULE + b"\x00\x7f")  # a custom section claiming 127 bytes
    with pytest.raises(InvalidArgs, match="nested module at byte 8"):
        sections.read_act_info(wasm)


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def test_act_skill_tar_gives_its_skill_md() -> None:
    raw = _tar({"references/x.md": b"ref", "SKILL.md": b"---\nname: t\n---\n# T"})
    assert sections.skill_text(raw) == "---\nname: t\n---\n# T"
    assert sections.skill_text(b"# plain markdown") == "# plain markdown"
    with pytest.raises(InvalidArgs, match="no SKILL.md"):
        sections.skill_text(_tar({"README.md": b"x"}))


def test_act_skill_tar_path_tricks_are_only_read_in_memory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    import pytest

    from wbcore_runtime.guard.unpack import UnsafeArchive

    # The core's unpacker reads it: a path trick refuses the archive, naming the entry.
    for name, says in (("../../evil/SKILL.md", "climbs out with '..'"), ("/abs/SKILL.md", "absolute path")):
        with pytest.raises(UnsafeArchive, match=re.escape(says)):
            sections.skill_text(_tar({name: b"# evil"}))
    assert sections.skill_text(_tar({"skill/SKILL.md": b"# fine"})) == "# fine"
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere
