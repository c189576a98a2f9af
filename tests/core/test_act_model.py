"""The ACT model in the core (wbcore_runtime.act): CBOR vectors, metadata, sections, model helpers."""

from __future__ import annotations

import json

import cbor2
import pytest

from wbcore_runtime.act import cbor, sections, wire
from wbcore_runtime.act.model import (
    STD_DESTRUCTIVE,
    STD_IDEMPOTENT,
    STD_READ_ONLY,
    ContentPart,
    LocalizedString,
    Metadata,
    ToolCall,
    ToolDefinition,
)
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_testing.fixtures import add_custom_section

MINIMAL_COMPONENT = bytes.fromhex("0061736d0d000100")  # an empty component (layer 1)


@pytest.mark.parametrize("value", [
    {}, {"a": 1, "b": [1, 2, {"c": None}]}, {"bytes": b"\x00\xff", "f": 1.5, "neg": -(2**40)},
    {"unicode": "héllo ✓", "big": 2**63 - 1, "t": True},
])
def test_cbor_argument_round_trip(value) -> None:
    call = ToolCall("t.x", cbor.dumps(value))
    assert call.args() == value
    assert cbor.canonicalize(call.arguments) == call.arguments


def test_deterministic_encoding_vector() -> None:
    # RFC 8949 §4.2: shortest integers, map keys sorted by encoded bytes.
    assert cbor.dumps({"b": 1, "a": 2}).hex() == "a2616102616201"
    assert cbor.dumps(500).hex() == "1901f4"
    non_canonical = bytes.fromhex("a2616201616102")  # {"b":1,"a":2}
    assert cbor.canonicalize(non_canonical) != non_canonical
    assert cbor.canonicalize(non_canonical).hex() == "a2616102616201"


def test_malformed_cbor_is_invalid_args() -> None:
    with pytest.raises(InvalidArgs, match="malformed CBOR"):
        cbor.loads(b"\xa1\x61")


def test_metadata_wire_round_trip_and_secret_redaction() -> None:
    meta = {"std:traceparent": "00-abc-def-01", "std:request-id": "r1", "std:api-key": "sekrit"}
    wire = cbor.encode_metadata(meta)
    assert all(isinstance(v, bytes) for _, v in wire)
    assert cbor.decode_metadata(wire) == meta
    assert "sekrit" not in repr(Metadata(meta))


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


def test_model_helpers() -> None:
    td = ToolDefinition("t", annotations=Metadata({STD_READ_ONLY: True, STD_DESTRUCTIVE: False, STD_IDEMPOTENT: True}))
    assert td.read_only and td.idempotent and not td.destructive
    assert ContentPart(json.dumps({"a": 1}).encode(), "application/json").value() == {"a": 1}
    assert ContentPart(cbor.dumps([1, 2]), "application/cbor").value() == [1, 2]
    assert LocalizedString(localized=(("en", "x"), ("de", "y"))).text("de-AT") == "y"


def test_act_component_section_is_read_without_running() -> None:
    payload = {"std": {"name": "weather-tools", "version": "1.2.0", "description": "Weather data tools"}}
    wasm = add_custom_section(MINIMAL_COMPONENT, sections.ACT_COMPONENT, cbor2.dumps(payload))
    wasm = add_custom_section(wasm, sections.ACT_SKILL, b"# Weather")
    assert sections.is_component(wasm) and not sections.is_component(b"\0asm\x01\0\0\0")
    info = sections.read_act_info(wasm)
    assert (info.name, info.version, info.revision, info.skill) == ("weather-tools", "1.2.0", "0.4", "# Weather")
    assert info.description.text() == "Weather data tools"
