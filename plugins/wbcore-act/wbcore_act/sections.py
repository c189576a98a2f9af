"""Read custom sections (``act:component``, ``act:skill``) from a WASM binary without running it.

A module and a component share the preamble (magic + version/layer) and the section
framing (id byte, LEB128 size); custom sections have id 0 in both. ACT sections are
looked up at any nesting depth: a component's core modules (section id 1) and nested
components (id 4) are whole binaries of their own, and toolchains (``cargo component``,
wit-bindgen) leave ``act:component``/``act:skill`` in the nested core module where the
guest's linker put them. The outermost occurrence wins (breadth-first); the depth and
the number of binaries walked are bounded, so a hostile nesting cannot stall a reader.
"""

from __future__ import annotations

from collections.abc import Iterator

from wbcore_runtime.contract import cbor
from wbcore_runtime.contract.tools import ComponentInfo
from wbcore_act.wire import component_info
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.guard import unpack

MAGIC = b"\x00asm"
ACT_COMPONENT = "act:component"
ACT_SKILL = "act:skill"
#: Nesting bounds of the walk: components nest a few levels in practice.
MAX_DEPTH = 16
MAX_BINARIES = 4096
#: Section ids of a component that hold a whole nested binary: core module, component.
NESTED_IDS = (1, 4)


def _leb(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 35:
            raise InvalidArgs("truncated or oversized LEB128 in WASM binary")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


def _sections(wasm: bytes | memoryview, where: str = "binary") -> Iterator[tuple[int, int, memoryview]]:
    """(id, offset, body) of every section of one binary (no nesting), in order."""
    view = memoryview(wasm)
    if bytes(view[:4]) != MAGIC or len(view) < 8:
        raise InvalidArgs(f"{where}: not a WASM binary (bad magic)")
    pos = 8
    while pos < len(view):
        sid = view[pos]
        size, body = _leb(view, pos + 1)  # type: ignore[arg-type]
        end = body + size
        if end > len(view):
            raise InvalidArgs(f"{where}: WASM section at byte {pos} runs past the end of the binary")
        yield sid, pos, view[body:end]
        pos = end


def _custom(body: memoryview, pos: int, where: str) -> tuple[str, bytes]:
    nlen, npos = _leb(body, 0)  # type: ignore[arg-type]
    if npos + nlen > len(body):
        raise InvalidArgs(f"{where}: custom section name at byte {pos} runs past its section")
    return bytes(body[npos : npos + nlen]).decode("utf-8", errors="replace"), bytes(body[npos + nlen :])


def custom_sections(wasm: bytes) -> Iterator[tuple[str, bytes]]:
    """(name, payload) of every top-level custom section, in order."""
    for sid, pos, body in _sections(wasm):
        if sid == 0:
            yield _custom(body, pos, "binary")


def nested_custom_sections(wasm: bytes) -> Iterator[tuple[str, bytes]]:
    """(name, payload) of every custom section at any depth: the outer binary's first,
    then each nested binary's, breadth-first. Only a component's sections 1 and 4 nest
    (a core module's section 1 is its type section)."""
    queue: list[tuple[memoryview, int, str]] = [(memoryview(wasm), 0, "binary")]
    walked = 0
    while queue:
        view, depth, where = queue.pop(0)
        walked += 1
        if walked > MAX_BINARIES:
            raise InvalidArgs(f"WASM binary nests more than {MAX_BINARIES} modules/components; refusing to "
                              "read further")
        component = bytes(view[6:8]) == b"\x01\x00"
        for sid, pos, body in _sections(view, where):
            if sid == 0:
                yield _custom(body, pos, where)
            elif component and sid in NESTED_IDS:
                if depth + 1 > MAX_DEPTH:
                    raise InvalidArgs(f"{where}: nesting deeper than {MAX_DEPTH} levels at byte {pos}")
                kind = "module" if sid == 1 else "component"
                queue.append((body, depth + 1, f"{where} > nested {kind} at byte {pos}"))


def custom_section(wasm: bytes, name: str) -> bytes | None:
    """The outermost custom section called ``name`` at any nesting depth, or ``None``."""
    for found, payload in nested_custom_sections(wasm):
        if found == name:
            return payload
    return None


def is_component(wasm: bytes) -> bool:
    """Components have layer 1 in the preamble (bytes 6..8), modules layer 0."""
    return wasm[:4] == MAGIC and len(wasm) >= 8 and wasm[6:8] == b"\x01\x00"


MAX_SKILL_BYTES = 1 << 20


def skill_text(raw: bytes) -> str:
    """The ``act:skill`` payload as text: a tar archive of the skill's folder (what
    act-cli's toolchain embeds) gives its ``SKILL.md``; anything else is read as UTF-8
    markdown. The archive is read in memory only (nothing is extracted to disk) and
    ``SKILL.md`` is capped at ``MAX_SKILL_BYTES``."""
    if len(raw) >= 512 and raw[257:262] == b"ustar":
        # The core's unpacker reads it (names checked, entries and bytes capped), in memory.
        found = unpack.read_files(raw, unpack.Caps(max_files=4096, max_bytes=8 * MAX_SKILL_BYTES),
                                  what="act:skill archive", only=lambda n: n.rsplit("/", 1)[-1] == "SKILL.md",
                                  max_file=MAX_SKILL_BYTES)
        if not found:
            raise InvalidArgs("act:skill archive has no SKILL.md")
        data = found[min(found, key=lambda n: (n.count("/"), n))]
        return data.decode("utf-8", errors="replace")
    return raw.decode("utf-8", errors="replace")


def read_act_info(wasm: bytes) -> ComponentInfo | None:
    """The component's ACT info from its sections, or ``None`` when it carries none."""
    raw = custom_section(wasm, ACT_COMPONENT)
    skill_raw = custom_section(wasm, ACT_SKILL)
    skill = skill_text(skill_raw) if skill_raw is not None else None
    if raw is None:
        return None if skill is None else component_info({}, skill=skill)
    return component_info(cbor.loads(raw), skill=skill)
