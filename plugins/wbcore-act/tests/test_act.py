"""ACT revision adapters: every error kind and event in every accepted revision, component info
sections written and read back, ``wbx act`` (the model itself is tested in the core's
tests/test_act_model.py)."""

from __future__ import annotations

import json

import cbor2
import pytest

from wbcore_act import revisions
from wbcore_runtime.contract import cbor
from wbcore_act import sections, wire
from wbcore_runtime.contract.tools import (
    Content,
    ContentPart,
    Error,
    ToolErrorKind,
    LocalizedString,
    Metadata,
    MetadataEvent,
    ToolCall,
    ToolError,
)
from wbcore_runtime.contract.errors import CapabilityDenied, ErrorKind as WbKind, InvalidArgs, WbError
from wbcore_testing.fixtures import add_custom_section

# --- CBOR --------------------------------------------------------------------------------
# --- error kinds ---------------------------------------------------------------------

WELL_KNOWN = ["not-found", "invalid-args", "timeout", "capability-denied", "internal"]


@pytest.mark.parametrize("kind", WELL_KNOWN)
@pytest.mark.parametrize("rev", revisions.REVISIONS)
def test_each_error_kind_round_trips_in_each_revision(kind: str, rev: str) -> None:
    err = ToolError(ToolErrorKind(kind), LocalizedString(plain=f"{kind} happened"))
    wire = revisions.tool_error_to_wire(err, rev)
    back = revisions.tool_error(wire, rev)
    assert back.kind is ToolErrorKind(kind) and back.text == f"{kind} happened"
    assert ToolError.from_wb(WbError("x", kind=WbKind(kind))).kind is ToolErrorKind(kind)


def test_other_error_kind() -> None:
    err = ToolError(ToolErrorKind.OTHER, LocalizedString(plain="x"), other="acme:quota")
    assert revisions.tool_error(revisions.tool_error_to_wire(err, "seed"), "seed").other == "acme:quota"
    assert revisions.tool_error(revisions.tool_error_to_wire(err, "0.4"), "0.4").kind_name == "acme:quota"
    with pytest.raises(ValueError):
        ToolError(ToolErrorKind.OTHER)


def test_wb_errors_map_to_act_kinds() -> None:
    assert ToolError.from_wb(CapabilityDenied("no kv")).kind is ToolErrorKind.CAPABILITY_DENIED


# --- revision vectors (wire forms as each specification text writes them) -------------

V01_TOOL = {
    "name": "get-weather",
    "parameters": [
        {"name": "city", "description": [("en", "City name")], "schema": '{"type": "string"}',
         "required": True, "extensions": []},
        {"name": "days", "description": [("en", "Days")], "schema": '{"type": "integer"}', "required": False,
         "extensions": []},
    ],
    "annotations": {
        "description": [("en", "Weather forecast"), ("ru", "Прогноз погоды")], "usage-hints": None,
        "anti-usage-hints": None, "examples": [], "read-only": True, "idempotent": True, "destructive": False,
        "tags": ["weather"], "timeout-ms": 3000, "extensions": [],
    },
}
SEED_TOOL = {
    "name": "get-weather",
    "description": {"tag": "plain", "value": "Weather forecast"},
    "input-schema": '{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}',
    "annotations": [("std:read-only", cbor2.dumps(True)), ("std:idempotent", cbor2.dumps(True))],
    "extensions": None,
}
V04_TOOL = {
    "name": "get-weather",
    "description": {"localized": [("en", "Weather forecast")]},
    "parameters-schema": '{"type": "object", "properties": {"city": {"type": "string"}}, "required": '
                         '["city"]}',
    "metadata": [("std:read-only", cbor2.dumps(True)), ("std:idempotent", cbor2.dumps(True))],
}


@pytest.mark.parametrize("wire, rev",
                         [(V01_TOOL, "0.1"), (SEED_TOOL, "seed"), (V04_TOOL, "0.4"), (V04_TOOL, "0.2")])
def test_tool_definition_of_each_revision(wire, rev) -> None:
    if rev != "0.2":
        assert revisions.detect_tool_definition(wire) == rev
    td = revisions.tool_definition(wire, rev)
    assert td.name == "get-weather"
    assert td.description.text("en") == "Weather forecast"
    assert (td.input_schema["properties"]["city"] == {"type": "string"}
            or td.input_schema["properties"]["city"]["type"] == "string")
    assert "city" in td.input_schema["required"]
    assert td.read_only and td.idempotent and not td.destructive
    again = revisions.tool_definition(revisions.tool_definition_to_wire(td, rev), rev)
    assert (again.name == td.name and again.read_only
            and again.input_schema["required"] == td.input_schema["required"])


def test_v01_localized_resolution_and_annotations() -> None:
    td = revisions.tool_definition(V01_TOOL)
    assert td.description.text("ru") == "Прогноз погоды"
    assert td.annotations["std:timeout-ms"] == 3000 and td.annotations["std:tags"] == ["weather"]
    assert td.input_schema["properties"]["city"]["description"] == "City name"


@pytest.mark.parametrize("rev", revisions.REVISIONS)
def test_tool_call_round_trip_each_revision(rev) -> None:
    call = ToolCall("get-weather", cbor.dumps({"city": "Oslo", "days": 3}),
                    Metadata({"std:request-id": "req-7"}))
    wire = revisions.tool_call_to_wire(call, rev)
    back = revisions.tool_call(wire, rev)
    assert back.name == "get-weather" and back.args() == {"city": "Oslo", "days": 3}
    assert back.metadata["std:request-id"] == "req-7"


def test_tool_call_vectors_detect_revision() -> None:
    args = cbor2.dumps({"city": "Oslo"})
    assert revisions.detect_tool_call({"id": "1", "name": "x", "arguments": args, "extensions": []}) == "0.1"
    assert revisions.detect_tool_call({"name": "x", "arguments": None, "metadata": [],
                                       "extensions": None}) == "seed"
    assert revisions.detect_tool_call({"name": "x", "arguments": args, "metadata": []}) == "0.4"
    # non-deterministic input is canonicalized before it could reach a guest
    call = revisions.tool_call({"name": "x", "arguments": bytes.fromhex("a2616201616102"), "metadata": []})
    assert call.arguments.hex() == "a2616102616201"


def test_stream_vectors_each_revision() -> None:
    text = {"tag": "content", "value": {"data": b"hi", "mime-type": "text/plain", "metadata": []}}
    err = {"tag": "error",
           "value": {"kind": "std:timeout", "message": {"tag": "plain", "value": "slow"}, "metadata": []}}
    ev = revisions.stream([text, err], "0.2")
    assert isinstance(ev[0], Content) and ev[0].part.value() == "hi"
    assert isinstance(ev[1], Error) and ev[1].error.kind is ToolErrorKind.TIMEOUT
    # 0.4 wraps events in tool-result (immediate | streaming)
    ev4 = revisions.stream({"tag": "immediate", "value": [text]}, "0.4")
    assert ev4[0].part.data == b"hi"
    # 0.1: absent MIME type means CBOR
    ev1 = revisions.stream([{"content": {"data": cbor2.dumps({"t": 21}), "mime-type": None,
                                         "extensions": []}}], "0.1")
    assert ev1[0].part.value() == {"t": 21}
    # the seed adds a metadata event
    evs = revisions.stream([{"tag": "metadata", "value": [("std:traceparent", cbor2.dumps("00-1-2-01"))]}],
                           "seed")
    assert isinstance(evs[0], MetadataEvent) and evs[0].metadata["std:traceparent"] == "00-1-2-01"
    with pytest.raises(InvalidArgs, match="no case 'metadata'"):
        revisions.stream([{"tag": "metadata", "value": []}], "0.4")
    with pytest.raises(InvalidArgs, match="is an error but 1 event"):
        revisions.stream([err, text], "0.2")


@pytest.mark.parametrize("rev", revisions.REVISIONS)
def test_stream_event_round_trip(rev) -> None:
    events = [Content(ContentPart(b"ok", "text/plain")),
              Error(ToolError(ToolErrorKind.NOT_FOUND, LocalizedString(plain="gone")))]
    if rev == "seed":
        events.insert(1, MetadataEvent(Metadata({"std:request-id": "1"})))
    wire = [revisions.stream_event_to_wire(e, rev) for e in events]
    back = revisions.stream(wire, rev)
    assert back[0].part.value() == "ok" and back[-1].error.kind is ToolErrorKind.NOT_FOUND


# --- the act:component and act:skill sections -------------------------------------------

MINIMAL_COMPONENT = bytes.fromhex("0061736d0d000100")  # an empty component (layer 1)


@pytest.mark.parametrize("payload, rev", [
    ({"std": {"name": "weather-tools", "version": "1.2.0", "description": "Weather data tools",
              "default-language": "en", "capabilities": {"wasi:http": {}}}}, "0.4"),
    ({"std:name": "weather-tools", "std:version": "1.2.0", "std:description": "Weather data tools",
      "std:default-language": "en", "std:capabilities": {"wasi:http": {}}}, "0.2"),
])
def test_act_component_section_each_revision(payload, rev) -> None:
    wasm = add_custom_section(MINIMAL_COMPONENT, sections.ACT_COMPONENT, cbor2.dumps(payload))
    wasm = add_custom_section(wasm, sections.ACT_SKILL, "# Weather\nUse get-weather.".encode())
    assert sections.is_component(wasm)
    info = sections.read_act_info(wasm)
    assert (info.name, info.version, info.revision) == ("weather-tools", "1.2.0", rev)
    assert info.description.text() == "Weather data tools" and "wasi:http" in info.capabilities
    assert info.skill.startswith("# Weather")
    again = wire.component_info(cbor2.loads(revisions.component_info_to_section(info, rev)))
    assert again.name == "weather-tools"
def test_wbx_act_info_reads_sections_without_running(wbx, tmp_path) -> None:
    wasm = add_custom_section(MINIMAL_COMPONENT, sections.ACT_COMPONENT,
                              cbor2.dumps({"std": {"name": "w", "version": "0.1.0"}}))
    wasm = add_custom_section(wasm, sections.ACT_SKILL, b"# w")
    path = tmp_path / "w.wasm"
    path.write_bytes(wasm)
    res = wbx("act", "info", str(path))
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert (data["name"], data["revision"], data["skill"], data["component"]) == ("w", "0.4", "# w", True)
    res = wbx("act", "tools", "--revision", "nope")
    assert res.exit_code == 2 and "known: 0.1" in res.stderr
