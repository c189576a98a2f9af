"""Reading a tool provider's own answers (``act:tools/tool-provider``: list-tools, call-tool)."""

from __future__ import annotations

import base64

import cbor2
import pytest

from wbcore_act import wire
from wbcore_runtime.contract.tools import Content, Error, ToolErrorKind, MetadataEvent
from wbcore_runtime.contract.errors import InvalidArgs


def _b64(value: object) -> str:
    return base64.b64encode(cbor2.dumps(value)).decode()


def test_tool_definition_in_every_lifted_form() -> None:
    for meta_value in (cbor2.dumps(True), list(cbor2.dumps(True)), _b64(True)):
        td = wire.provided_tool({"name": "t", "description": {"tag": "plain", "value": "d"},
                                 "parameters-schema": '{"type": "object"}',
                                 "metadata": [("std:read-only", meta_value)]})
        assert td.read_only and td.description.text() == "d" and td.input_schema == {"type": "object"}


@pytest.mark.parametrize("wire_def, match", [
    ({"name": ""}, "without a name"),
    ({"name": "t", "parameters-schema": "{nope"}, "not JSON"),
    ({"name": "t", "parameters-schema": "[1]"}, "must be a JSON object"),
    ({"name": "t", "metadata": [("k", "%%%")]}, "not base64"),
    ({"name": "t", "metadata": [("k",)]}, "pair"),
])
def test_bad_tool_definitions_say_what_is_wrong(wire_def, match) -> None:
    with pytest.raises(InvalidArgs, match=match):
        wire.provided_tool(wire_def)


@pytest.mark.parametrize("kind, want", [
    ("std:not-found", ToolErrorKind.NOT_FOUND), ("std:invalid-args", ToolErrorKind.INVALID_ARGS),
    ("std:timeout", ToolErrorKind.TIMEOUT), ("std:capability-denied", ToolErrorKind.CAPABILITY_DENIED),
    ("std:internal", ToolErrorKind.INTERNAL), ("acme:quota", ToolErrorKind.OTHER),
    ("std:other", ToolErrorKind.OTHER),
])
def test_error_kinds(kind, want) -> None:
    err = wire.provided_error({"kind": kind, "message": {"tag": "localized", "value": [("en", "x")]},
                               "metadata": []})
    assert err.kind is want and err.text == "x"
    if want is ToolErrorKind.OTHER:
        assert err.kind_name == kind


def test_immediate_results_and_their_events() -> None:
    content = {"tag": "content",
               "value": {"data": base64.b64encode(b"hi").decode(), "mime-type": "text/plain",
                                           "metadata": []}}
    error = {"tag": "error", "value": {"kind": "std:timeout", "message": {"tag": "plain", "value": "slow"},
                                       "metadata": []}}
    events = wire.provided_result({"tag": "immediate",
                                   "value": [content, {"tag": "metadata", "value": []}, error]})
    assert [type(e) for e in events] == [Content, MetadataEvent, Error]
    assert events[0].part.value() == "hi" and events[-1].error.kind is ToolErrorKind.TIMEOUT


def test_an_error_must_be_last_and_streams_are_refused_clearly() -> None:
    error = {"tag": "error", "value": {"kind": "std:internal", "message": {"tag": "plain", "value": "x"}}}
    content = {"tag": "content", "value": {"data": b"", "mime-type": None}}
    with pytest.raises(InvalidArgs, match="is an error but 1 event"):
        wire.provided_result({"tag": "immediate", "value": [error, content]})
    with pytest.raises(InvalidArgs, match="cannot read in-process"):
        wire.provided_result({"tag": "streaming", "value": "<stream>"})
    with pytest.raises(InvalidArgs, match="no case 'later'"):
        wire.provided_result({"tag": "later", "value": None})
