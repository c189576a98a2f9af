"""Async component exports and types-only imports, on a real ACT component: act-cli's
``time.wasm`` fixture (``tests/data/act``, MIT/Apache-2.0), whose ``list-tools`` and
``call-tool`` are async-lifted and which imports the types-only ``act:core/types``."""

from __future__ import annotations

import base64
from pathlib import Path

import cbor2
import pytest

from wbcore_runtime.trust import policy
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import CapabilityDenied

wasmtime = pytest.importorskip("wasmtime")

from wbcore_wasmtime import component as comp  # noqa: E402  (after importorskip)

TIME_WASM = Path(__file__).resolve().parents[3] / "tests" / "data" / "act" / "time.wasm"
PROVIDER = "act:tools/tool-provider@0.1.0"

pytestmark = pytest.mark.skipif(not TIME_WASM.is_file(),
                                reason="tests/data/act/time.wasm is not in this checkout")


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
    return runner.call(_req(sha, "call-tool", {"name": name, "arguments": encoded, "metadata": []},
                            name="time", **kw)).value


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


# --- the isolated worker (calls whose answer can be a stream) --------------------------

ECHO_WAT = TIME_WASM.with_name("echo_provider.wat")


@pytest.fixture
def echo(make_runtime):
    rt = make_runtime(plugins=["wasmtime"])
    sha = comp.artifact_store(rt).put_bytes(bytes(wasmtime.wat2wasm(ECHO_WAT.read_text()))).sha256
    return rt, comp.ComponentRunner(rt), sha


def test_only_results_that_can_carry_a_stream_are_isolated(echo) -> None:
    _, runner, sha = echo
    fns = {f.name: f for f in runner.functions(sha)}
    assert fns["call-tool"].isolated and not fns["list-tools"].isolated


def test_a_stream_answer_stops_only_the_worker(echo) -> None:
    from wbcore_wasmtime import isolated

    _, runner, sha = echo
    with pytest.raises(isolated.StreamAnswer, match="answered with a stream/future value"):
        _call_tool(runner, sha, "stream", {})
    (event,) = _call_tool(runner, sha, "two", {})["value"][:1]  # this process carries on
    assert event["tag"] == "content"


def test_isolated_workers_are_reused_and_bounded(echo) -> None:
    from wbcore_wasmtime import isolated

    _, runner, sha = echo
    _call_tool(runner, sha, "two", {})
    before = {w.proc.pid for w in isolated.pool._idle}
    _call_tool(runner, sha, "two", {})
    assert {w.proc.pid for w in isolated.pool._idle} == before and len(before) <= isolated.MAX_IDLE


def test_an_isolated_call_keeps_its_deadline(echo) -> None:
    import time

    from wbcore_runtime.contract.errors import Timeout

    _, runner, sha = echo
    started = time.monotonic()
    with pytest.raises(Timeout, match="deadline"):
        _call_tool(runner, sha, "spin", {}, timeout=0.5)
    assert time.monotonic() - started < 5


def test_an_isolated_call_cannot_link_caps(echo) -> None:
    from wbcore_wasmtime import isolated

    rt, _, sha = echo
    with pytest.raises(CapabilityDenied, match="links no caps"):
        isolated.call(_req(sha, "call-tool", {}), comp.artifact_store(rt).root, frozenset({"kv"}))


def test_concurrent_isolated_calls_each_get_their_answer(echo) -> None:
    from concurrent.futures import ThreadPoolExecutor

    _, runner, sha = echo

    def one(i: int) -> bytes:
        (event,) = _call_tool(runner, sha, "echo", {"i": i})["value"]
        return base64.b64decode(event["value"]["data"])

    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(one, range(6)))
    assert got == [cbor2.dumps({"i": i}) for i in range(6)]
