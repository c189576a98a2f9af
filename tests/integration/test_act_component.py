"""A real ACT component, end to end: act-cli's ``time.wasm`` test fixture (``tests/data/act``,
MIT/Apache-2.0) registered as a toolkit's component and served by its own ``list-tools``
and ``call-tool`` over ``wbx call``, ``wbx act`` and an MCP client session (stdio)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import cbor2
import pytest

pytest.importorskip("wasmtime")

TIME_WASM = Path(__file__).resolve().parents[1] / "data" / "act" / "time.wasm"
RFC3339_TOKYO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+09:00$")


def _register_time(make_runtime: Any, toolkit_root: Path) -> Any:
    from wbcore_runtime.build import builder
    from wbcore_testing.fixtures import manifest_text, write_toolkit

    write_toolkit(toolkit_root, "time",
                  manifest_text("time", exec="component",
                                tagline="Current time in any timezone (act-cli's fixture)."))
    rt = make_runtime()
    sha = rt.artifacts.put_bytes(TIME_WASM.read_bytes()).sha256
    builder.register_artifact(rt, "time", sha)
    return rt


@pytest.fixture
def time_rt(make_runtime: Any, toolkit_root: Path) -> Any:
    return _register_time(make_runtime, toolkit_root)


def test_provider_lists_the_components_own_tools(time_rt: Any) -> None:
    from wbcore_runtime.contract.tools import STD_READ_ONLY, STD_SKILL
    from wbcore_act.provider import ToolkitProvider

    tools = ToolkitProvider(time_rt).tools()
    assert set(tools) == {"time.get_current_time"}  # not the raw list-tools / call-tool
    tool = tools["time.get_current_time"]
    assert tool.act_tool == "get_current_time"
    assert tool.description.startswith("Get current time in a specified timezone")
    assert tool.definition.input_schema["properties"]["timezone"]["type"] == ["string", "null"]
    assert tool.definition.annotations[STD_READ_ONLY] is True
    # SKILL.md from the act:skill tar
    assert tool.definition.extensions[STD_SKILL].startswith("---\nname: time\n")


def test_wbx_call(wbx: Any, time_rt: Any) -> None:
    res = wbx("call", "time.get_current_time", "--args", '{"timezone": "Asia/Tokyo"}', runtime=time_rt)
    assert res.exit_code == 0, res.stderr
    assert RFC3339_TOKYO.match(res.stdout.strip())


def test_wbx_call_error_kinds_are_the_components(wbx: Any, time_rt: Any) -> None:
    res = wbx("call", "time.get_current_time", "--args", '{"timezone": "Mars/Olympus_Mons"}', runtime=time_rt)
    assert res.exit_code == 2 and "wbx: invalid-args: Unknown timezone: Mars/Olympus_Mons" in res.stderr
    res = wbx("call", "time.get_current_time", "--args", '{"timezone": "Asia/Tokyo"}', "--json",
              runtime=time_rt)
    out = json.loads(res.stdout)
    assert out["is_error"] is False and out["events"][0]["content"]["mime_type"] == "text/plain"


def test_wbx_act_tools_call_and_info(wbx: Any, time_rt: Any) -> None:
    res = wbx("act", "tools", "--only", "time", runtime=time_rt)
    assert res.exit_code == 0, res.stderr
    (td,) = json.loads(res.stdout)
    assert td["name"] == "time.get_current_time" and "timezone" in td["parameters-schema"]
    assert (["std:read-only", {"cbor": True}] in td["metadata"]
            and ["std:destructive", {"cbor": False}] in td["metadata"])

    res = wbx("act", "call", "time.get_current_time", "--args", '{"timezone": "Asia/Tokyo"}',
              "--meta", '{"std:traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}',
              runtime=time_rt)
    assert res.exit_code == 0, res.stderr
    (event,) = json.loads(res.stdout)
    assert event["tag"] == "content" and event["value"]["mime-type"] == "text/plain"
    # text/plain data is shown as the text it is (guessed as CBOR, "2026-…" read as -19)
    assert isinstance(event["value"]["data"], str) and event["value"]["data"].endswith("+09:00"), event

    res = wbx("act", "call", "time.nope", runtime=time_rt)
    assert res.exit_code == 127 and "time.get_current_time" in res.stderr  # unknown tool lists the known ones

    res = wbx("act", "info", str(TIME_WASM), runtime=time_rt)
    info = json.loads(res.stdout)
    assert (info["name"], info["version"], info["component"]) == ("time", "0.2.0", True)
    assert (info["description"] == "Time and timezone utilities"
            and "## Tool: get_current_time" in info["skill"])


def test_act_tool_call_carries_cbor_arguments_and_error_events(time_rt: Any) -> None:
    from wbcore_runtime.contract.tools import Content, Error, ToolErrorKind, ToolCall
    from wbcore_act.provider import ToolkitProvider

    provider = ToolkitProvider(time_rt)
    out = provider.call_tool(ToolCall("time.get_current_time", cbor2.dumps({"timezone": "Asia/Tokyo"})))
    (event,) = out.events
    assert isinstance(event, Content) and RFC3339_TOKYO.match(event.part.value())
    out = provider.call_tool(ToolCall("time.get_current_time", cbor2.dumps({"timezone": 7})))
    assert isinstance(out.events[-1], Error) and out.error.kind is ToolErrorKind.INVALID_ARGS
    out = provider.call_tool(ToolCall("time.get_current_time", cbor2.dumps(["not", "a", "map"])))
    assert out.error.kind is ToolErrorKind.INVALID_ARGS and "must be a map" in out.error.text


def test_mcp_client_lists_and_calls_the_act_tool(make_runtime: Any, toolkit_root: Path,
                                                 wb_home: Path) -> None:
    """A real MCP client session against ``wbx mcp serve`` over stdio."""
    pytest.importorskip("mcp")
    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    _register_time(make_runtime, toolkit_root)
    env = {"WB_HOME": str(wb_home), "WB_TOOLKITS_ROOT": str(toolkit_root), "PATH": os.environ.get("PATH", "")}
    params = StdioServerParameters(command=sys.executable,
                                   args=["-c", "from wbcore_cli.app import run; run()", "mcp",
                                         "serve"], env=env)

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            tool = tools["time.get_current_time"]
            assert "time.list-tools" not in tools and "time.call-tool" not in tools
            assert tool.annotations.read_only_hint is True
            assert "timezone" in tool.input_schema["properties"]
            r = await session.call_tool("time.get_current_time", {"timezone": "Asia/Tokyo"},
                                        read_timeout_seconds=None)
            text = "".join(c.text for c in r.content if getattr(c, "type", "") == "text")
            assert not r.is_error and RFC3339_TOKYO.match(text.strip()), text
            r = await session.call_tool("time.get_current_time", {"timezone": "Nowhere/Void"})
            assert r.is_error and "Unknown timezone" in "".join(getattr(c, "text", "") for c in r.content)

    anyio.run(main)


# --- a provider built here with the same WIT (tests/data/act/echo_provider.wat) -------

ECHO_WAT = Path(__file__).resolve().parents[1] / "data" / "act" / "echo_provider.wat"


@pytest.fixture
def echo_rt(make_runtime: Any, toolkit_root: Path) -> Any:
    import wasmtime

    from wbcore_runtime.build import builder
    from wbcore_testing.fixtures import manifest_text, write_toolkit

    write_toolkit(toolkit_root, "echo", manifest_text("echo", exec="component"))
    rt = make_runtime()
    sha = rt.artifacts.put_bytes(bytes(wasmtime.wat2wasm(ECHO_WAT.read_text()))).sha256
    builder.register_artifact(rt, "echo", sha)
    return rt


def test_built_provider_lists_its_tools_with_annotations(echo_rt: Any) -> None:
    from wbcore_runtime.contract.tools import STD_DESTRUCTIVE, STD_IDEMPOTENT, STD_READ_ONLY, STD_SKILL
    from wbcore_act.provider import ToolkitProvider

    tools = ToolkitProvider(echo_rt).tools()
    assert set(tools) == {"echo.echo", "echo.meta", "echo.two", "echo.fail", "echo.spin", "echo.stream"}
    assert tools["echo.echo"].definition.annotations[STD_IDEMPOTENT] is True
    assert tools["echo.echo"].definition.input_schema["properties"]["text"] == {"type": "string"}
    assert tools["echo.fail"].definition.annotations[STD_DESTRUCTIVE] is True
    assert tools["echo.fail"].definition.annotations[STD_READ_ONLY] is False  # it says destructive
    assert tools["echo.spin"].definition.annotations[STD_READ_ONLY] is True  # says nothing; no write caps
    assert tools["echo.two"].definition.extensions[STD_SKILL].startswith("# echo-provider")  # plain act:skill


def test_arguments_reach_the_provider_as_deterministic_cbor(echo_rt: Any) -> None:
    from wbcore_runtime.contract.tools import ToolCall
    from wbcore_act.provider import ToolkitProvider

    provider = ToolkitProvider(echo_rt)
    out = provider.call_json("echo.echo", {"zeta": 1, "alpha": [1.5, "x"], "text": "héllo"})
    (event,) = out.events
    assert event.part.mime_type == "application/cbor"
    # the host re-encodes canonically: sorted keys, shortest forms, whatever the caller sent
    assert event.part.data == cbor2.dumps({"alpha": [1.5, "x"], "text": "héllo", "zeta": 1}, canonical=True)
    assert out.structured == {"alpha": [1.5, "x"], "text": "héllo", "zeta": 1}
    # a caller's non-canonical CBOR (indefinite-length map) is canonicalized too
    indefinite = b"\xbf\x61\x62\x01\x61\x61\x02\xff"
    out = provider.call_tool(ToolCall("echo.echo", indefinite))
    assert out.events[0].part.data == cbor2.dumps({"a": 2, "b": 1}, canonical=True)


def test_call_metadata_reaches_the_provider(echo_rt: Any) -> None:
    from wbcore_runtime.contract.tools import Metadata, ToolCall
    from wbcore_act.provider import ToolkitProvider

    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    out = ToolkitProvider(echo_rt).call_tool(ToolCall("echo.meta", cbor2.dumps({}),
                                                      Metadata({"std:traceparent": tp})))
    assert out.events[0].part.value() == tp


def test_several_events_and_custom_error_kinds(echo_rt: Any, wbx: Any) -> None:
    from wbcore_runtime.contract.tools import ToolErrorKind
    from wbcore_act.provider import ToolkitProvider

    provider = ToolkitProvider(echo_rt)
    assert provider.call_json("echo.two", {}).text() == "onetwo"
    err = provider.call_json("echo.fail", {}).error
    assert err.kind is ToolErrorKind.OTHER and err.kind_name == "acme:quota" and err.text == "quota exhausted"
    res = wbx("act", "call", "echo.fail", "--revision", "0.4", runtime=echo_rt)
    (event,) = json.loads(res.stdout)
    assert event["value"]["kind"] == "acme:quota" and res.exit_code == 70
    res = wbx("call", "echo.two", runtime=echo_rt)
    assert res.exit_code == 0 and res.stdout == "onetwo\n"


def test_a_spinning_async_call_stops_at_its_deadline(echo_rt: Any, wbx: Any) -> None:
    import time

    started = time.monotonic()
    res = wbx("call", "echo.spin", "--timeout", "0.5", runtime=echo_rt)
    assert res.exit_code == 124 and "deadline" in res.stderr
    assert time.monotonic() - started < 5
    res = wbx("call", "echo.two", runtime=echo_rt)  # the process and the engine carry on
    assert res.exit_code == 0


def test_a_streaming_answer_is_a_clear_error_and_the_host_survives(echo_rt: Any, wbx: Any) -> None:
    """Lifting a stream aborts inside wasmtime-py's C API: the call runs in an isolated
    worker, so the answer is an error event and this process (and the next call) carry on."""
    from wbcore_runtime.contract.tools import ToolErrorKind
    from wbcore_act.provider import ToolkitProvider

    provider = ToolkitProvider(echo_rt)
    err = provider.call_json("echo.stream", {}).error
    assert err is not None and err.kind is ToolErrorKind.INVALID_ARGS and "answered with a stream" in err.text
    assert provider.call_json("echo.two", {}).text() == "onetwo"


def test_cancelling_an_isolated_call_stops_its_worker(echo_rt: Any) -> None:
    import threading
    import time

    from wbcore_act.provider import ToolkitProvider

    provider = ToolkitProvider(echo_rt)
    provider.tools()
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    out = provider.call_json("echo.spin", {}, cancel=cancel, timeout=30)
    assert out.error is not None and "cancelled" in out.error.text
    assert time.monotonic() - started < 5
