"""Read custom sections (``act:component``, ``act:skill``) from a WASM binary without running it.

A module and a component share the preamble (magic + version/layer) and the section
framing (id byte, LEB128 size); custom sections have id 0 in both. Only the top level
is read: nested core modules keep their own sections, which ACT does not use.
"""

from __future__ import annotations

from collections.abc import Iterator

from wbcore.act import cbor
from wbcore.act.model import ComponentInfo
from wbcore.act.wire import component_info
from wbcore.errors import InvalidArgs

MAGIC = b"\x00asm"
ACT_COMPONENT = "act:component"
ACT_SKILL = "act:skill"


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


def custom_sections(wasm: bytes) -> Iterator[tuple[str, bytes]]:
    """(name, payload) of every top-level custom section, in order."""
    if wasm[:4] != MAGIC or len(wasm) < 8:
        raise InvalidArgs("not a WASM binary (bad magic)")
    pos = 8
    while pos < len(wasm):
        sid = wasm[pos]
        size, body = _leb(wasm, pos + 1)
        end = body + size
        if end > len(wasm):
            raise InvalidArgs(f"WASM section at byte {pos} runs past the end of the binary")
        if sid == 0:
            nlen, npos = _leb(wasm, body)
            if npos + nlen > end:
                raise InvalidArgs(f"custom section name at byte {pos} runs past its section")
            name = wasm[npos : npos + nlen].decode("utf-8", errors="replace")
            yield name, wasm[npos + nlen : end]
        pos = end


def custom_section(wasm: bytes, name: str) -> bytes | None:
    for found, payload in custom_sections(wasm):
        if found == name:
            return payload
    return None


def is_component(wasm: bytes) -> bool:
    """Components have layer 1 in the preamble (bytes 6..8), modules layer 0."""
    return wasm[:4] == MAGIC and len(wasm) >= 8 and wasm[6:8] == b"\x01\x00"


def read_act_info(wasm: bytes) -> ComponentInfo | None:
    """The component's ACT info from its sections, or ``None`` when it carries none."""
    raw = custom_section(wasm, ACT_COMPONENT)
    skill_raw = custom_section(wasm, ACT_SKILL)
    skill = skill_raw.decode("utf-8", errors="replace") if skill_raw is not None else None
    if raw is None:
        return None if skill is None else component_info({}, skill=skill)
    return component_info(cbor.loads(raw), skill=skill)
