"""The ACT sections and wire readers of wbcore-act: component info in every revision, custom sections."""

from __future__ import annotations

import cbor2
import pytest

from wbcore_act import sections, wire
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_testing.fixtures import add_custom_section

MINIMAL_COMPONENT = bytes.fromhex("0061736d0d000100")  # an empty component (layer 1)


def test_v01_get_info_record() -> None:
    info = wire.component_info({
        "name": "w", "version": "0.1.0", "default-language": "en", "description": [("en", "W")],
        "capabilities": {"required": [{"id": "wasi:sockets/tcp"}], "optional": []}, "extensions": [],
    })
    assert info.revision == "0.1" and info.capabilities["wasi:sockets/tcp"]["required"]


def test_no_sections_and_bad_binaries() -> None:
    assert sections.read_act_info(MINIMAL_COMPONENT) is None
    with pytest.raises(InvalidArgs, match="bad magic"):
        list(sections.custom_sections(b"nope"))
    with pytest.raises(InvalidArgs, match="past the end"):
        list(sections.custom_sections(MINIMAL_COMPONENT + b"\x00\x7f"))


def test_act_component_section_is_read_without_running() -> None:
    payload = {"std": {"name": "weather-tools", "version": "1.2.0", "description": "Weather data tools"}}
    wasm = add_custom_section(MINIMAL_COMPONENT, sections.ACT_COMPONENT, cbor2.dumps(payload))
    wasm = add_custom_section(wasm, sections.ACT_SKILL, b"# Weather")
    assert sections.is_component(wasm) and not sections.is_component(b"\0asm\x01\0\0\0")
    info = sections.read_act_info(wasm)
    assert ((info.name, info.version, info.revision, info.skill)
            == ("weather-tools", "1.2.0", "0.4", "# Weather"))
    assert info.description.text() == "Weather data tools"
