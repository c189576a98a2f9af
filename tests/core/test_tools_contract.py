"""The tools contract in the core (wbcore_runtime.contract.tools, .cbor): CBOR vectors, metadata, model
helpers."""

from __future__ import annotations

import json

import pytest

from wbcore_runtime.contract import cbor
from wbcore_runtime.contract.tools import (
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


def test_model_helpers() -> None:
    td = ToolDefinition("t", annotations=Metadata({STD_READ_ONLY: True, STD_DESTRUCTIVE: False,
                                                   STD_IDEMPOTENT: True}))
    assert td.read_only and td.idempotent and not td.destructive
    assert ContentPart(json.dumps({"a": 1}).encode(), "application/json").value() == {"a": 1}
    assert ContentPart(cbor.dumps([1, 2]), "application/cbor").value() == [1, 2]
    assert LocalizedString(localized=(("en", "x"), ("de", "y"))).text("de-AT") == "y"


def test_no_tool_provider_installed_names_the_distribution(make_runtime) -> None:
    from wbcore_runtime.contract import tools
    from wbcore_runtime.contract.errors import NotFound

    rt = make_runtime(plugins=[])  # the core alone serves no tools
    with pytest.raises(NotFound, match="no tool provider is installed.*pip install wbcore-act"):
        tools.service(rt)


def test_a_call_takes_a_map_and_its_timeout_metadata_only_shortens_the_deadline() -> None:
    assert ToolCall("t.x").args_map() == {}
    assert ToolCall("t.x", cbor.dumps({"a": 1})).args_map() == {"a": 1}
    with pytest.raises(InvalidArgs, match=r"t\.x: arguments must be a map \(JSON object\), got list"):
        ToolCall("t.x", cbor.dumps([1, 2])).args_map()
    asks = ToolCall("t.x", metadata=Metadata({"std:timeout-ms": 2500}))
    assert asks.deadline(None) == 2.5 and asks.deadline(10.0) == 2.5 and asks.deadline(1.0) == 1.0
    for ms in (0, -5, "2500", None):  # not a positive whole number of milliseconds: ignored
        assert ToolCall("t.x", metadata=Metadata({"std:timeout-ms": ms})).deadline(7.0) == 7.0
    assert ToolCall("t.x").deadline(None) is None
