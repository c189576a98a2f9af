"""Async component exports and types-only imports, on a real ACT component: act-cli's
``time.wasm`` fixture (``tests/data/act``, MIT/Apache-2.0), whose ``list-tools`` and
``call-tool`` are async-lifted and which imports the types-only ``act:core/types``."""

from __future__ import annotations

import base64
from pathlib import Path

import cbor2
import pytest

from wbcore import policy
from wbcore.calls import Principal
from wbcore.errors import CapabilityDenied

wasmtime = pytest.importorskip("wasmtime")

from wb_wasmtime import component as comp

TIME_WASM = Path(__file__).resolve().parents[3] / "tests" / "data" / "act" / "time.wasm"
PROVIDER = "act:tools/tool-provider@0.1.0"

pytestmark = pytest.mark.skipif(not TIME_WASM.is_file(), reason="tests/data/act/time.wasm is not in this checkout")


@pytest.fixture
def timed(make_runtime):
    rt = make_runtime(plugins=["wasmtime"])
    sha = comp.artifact_store(rt).put_bytes(TIME_WASM.read_bytes()).sha256
    return rt, comp.ComponentRunner(rt), sha


def _req(sha: str, fn: str, args: dict, **kw) -> comp.ComponentRequest:
    return comp.ComponentRequest(
        name=kw.pop("name", "time"), sha256=sha, function=fn, args=args, profile=policy.profile("compute"),
        timeout_s=kw.pop("timeout", 30.0), principal=Principal(toolkit="time"), **kw,
    )


def _call_tool(runner, sha, name: str, args: dict, **kw):
    encoded = base64.b64encode(cbor2.dumps(args)).decode()
    return runner.call(_req(sha, "call-tool", {"name": name, "arguments": encoded, "metadata": []}, name="time", **kw)).value


def test_async_exports_are_found_and_flagged(timed) -> None:
    _, runner, sha = timed
    fns = {f.name: f for f in runner.functions(sha)}
    assert {"list-tools", "call-tool"} <= set(fns)
    assert fns["call-tool"].export == (PROVIDER, "call-tool") and fns["call-tool"].is_async


def test_types_only_import_is_accepted_and_grants_nothing(timed) -> None:
    _, runner, sha = timed
    loaded = runner.load(sha)
    assert loaded.types_only == frozenset({"act:core/types@0.4.0"})
    assert loaded.needed_caps("time", frozenset()) == frozenset()


def test_list_tools_of_the_real_fixture(timed) -> None:
    _, runner, sha = timed
    value = runner.call(_req(sha, "list-tools", {"metadata": []}, name="time")).value
    (tool,) = value["ok"]["tools"]
    assert tool["name"] == "get_current_time"
    assert tool["description"] == {"tag": "plain", "value": "Get current time in a specified timezone"}
    assert "timezone" in tool["parameters-schema"]
    assert [k for k, _ in tool["metadata"]] == ["std:read-only"]
    assert cbor2.loads(base64.b64decode(tool["metadata"][0][1])) is True


def test_call_tool_with_cbor_arguments(timed) -> None:
    _, runner, sha = timed
    value = _call_tool(runner, sha, "get_current_time", {"timezone": "Asia/Tokyo"})
    assert value["tag"] == "immediate"
    (event,) = value["value"]
    assert event["tag"] == "content" and event["value"]["mime-type"] == "text/plain"
    assert base64.b64decode(event["value"]["data"]).decode().endswith("+09:00")


@pytest.mark.parametrize("name, args, kind", [
    ("get_current_time", {"timezone": "Mars/Olympus_Mons"}, "std:invalid-args"),
    ("no_such_tool", {}, "std:not-found"),
])
def test_call_tool_error_kinds(timed, name, args, kind) -> None:
    _, runner, sha = timed
    (event,) = _call_tool(runner, sha, name, args)["value"]
    assert event["tag"] == "error" and event["value"]["kind"] == kind


def test_async_calls_repeat_in_one_process(timed) -> None:
    _, runner, sha = timed
    for tz in ("UTC", "Europe/Moscow", "America/New_York"):
        (event,) = _call_tool(runner, sha, "get_current_time", {"timezone": tz})["value"]
        assert event["tag"] == "content"


# --- types-only means types only -------------------------------------------------------

FUNC_IMPORT = """(component
  (import "act:core/types@0.4.0" (instance (export "sneaky" (func (result u32))))))"""
TYPES_IMPORT = """(component
  (import "acme:shapes/types@1.0.0" (instance
    (type $r (record (field "a" u32)))
    (export "point" (type (eq $r))))))"""


def _load_wat(rt, wat: str):
    sha = comp.artifact_store(rt).put_bytes(bytes(wasmtime.wat2wasm(wat))).sha256
    return comp.ComponentRunner(rt).load(sha)


def test_an_import_with_a_function_is_not_types_only(make_runtime) -> None:
    """The name act:core/types grants nothing by itself: an import exporting a function
    under that name is an ordinary ungranted import and is refused."""
    loaded = _load_wat(make_runtime(plugins=["wasmtime"]), FUNC_IMPORT)
    assert loaded.types_only == frozenset()
    with pytest.raises(CapabilityDenied, match="act:core/types@0.4.0"):
        loaded.needed_caps("sneaky", frozenset())


def test_any_types_only_interface_is_accepted(make_runtime) -> None:
    loaded = _load_wat(make_runtime(plugins=["wasmtime"]), TYPES_IMPORT)
    assert loaded.types_only == frozenset({"acme:shapes/types@1.0.0"})
    assert loaded.needed_caps("shapes", frozenset()) == frozenset()
