"""The component shape: typed calls, caps as host interfaces, limits, cancellation, cache."""

from __future__ import annotations

import base64
import threading
import time
from pathlib import Path

import cbor2
import pytest

from wbcore_runtime.trust import policy
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound, Timeout

wasmtime = pytest.importorskip("wasmtime")

from wbcore_wasmtime import component as comp  # noqa: E402

#: How late a deadline or a cancel may show on a loaded 2-core CI machine. The bounds below rule
#: out waiting for what the deadline cuts (a 30 s sleep, a spin), an order of magnitude longer;
#: how fast the cut is belongs to bench/, not to a test.
SLACK_S = 3.0

DATA = Path(__file__).parent / "data"


def _put(rt, name: str) -> str:
    wasm = bytes(wasmtime.wat2wasm((DATA / f"{name}.wat").read_text()))
    return comp.artifact_store(rt).put_bytes(wasm).sha256


def _req(sha: str, fn: str, args: dict, **kw) -> comp.ComponentRequest:
    return comp.ComponentRequest(
        name=kw.pop("name", "calc"), sha256=sha, function=fn, args=args,
        profile=policy.profile(kw.pop("profile", "compute")), timeout_s=kw.pop("timeout", 5.0),
        principal=Principal(toolkit="calc"), **kw,
    )


@pytest.fixture
def calc(make_runtime):
    rt = make_runtime()
    return rt, comp.ComponentRunner(rt), _put(rt, "calc")


def test_functions_and_schemas_come_from_wit_types(calc) -> None:
    _, runner, sha = calc
    fns = {f.name: f for f in runner.functions(sha)}
    assert set(fns) == {"add", "spin", "echo", "div"}
    assert fns["add"].input_schema()["properties"]["a"] == {"type": "integer", "minimum": 0,
                                                            "maximum": 4294967295}
    assert fns["echo"].output_schema() == {"type": "string"}
    assert {"ok", "err"} == {next(iter(c["properties"])) for c in fns["div"].output_schema()["oneOf"]}


def test_typed_calls(calc) -> None:
    _, runner, sha = calc
    assert runner.call(_req(sha, "add", {"a": 2, "b": 40})).value == 42
    assert runner.call(_req(sha, "echo", {"text": "héllo"})).value == "héllo"
    assert runner.call(_req(sha, "div", {"a": 7, "b": 2})).value == {"ok": 3}


def test_result_err_is_an_execution_error_with_detail(calc) -> None:
    _, runner, sha = calc
    with pytest.raises(comp.ComponentError) as info:
        runner.call(_req(sha, "div", {"a": 1, "b": 0}))
    assert info.value.detail == "division by zero"


@pytest.mark.parametrize("args, match", [
    ({"a": -1, "b": 0}, "outside u32"),
    ({"a": 1}, "missing argument"),
    ({"a": 1, "b": 2, "c": 3}, "unknown argument"),
    ({"a": "1", "b": 2}, "expected an integer"),
])
def test_bad_arguments_are_invalid_args(calc, args, match) -> None:
    _, runner, sha = calc
    with pytest.raises(InvalidArgs, match=match):
        runner.call(_req(sha, "add", args))


def test_unknown_function_lists_known(calc) -> None:
    _, runner, sha = calc
    with pytest.raises(NotFound, match="known: add, div, echo, spin"):
        runner.call(_req(sha, "nope", {}))


def test_runaway_guest_stops_at_deadline_and_host_carries_on(calc) -> None:
    _, runner, sha = calc
    t0 = time.monotonic()
    with pytest.raises(Timeout, match="deadline"):
        runner.call(_req(sha, "spin", {}, timeout=0.2))
    assert time.monotonic() - t0 < 0.2 + SLACK_S
    assert runner.call(_req(sha, "add", {"a": 1, "b": 1})).value == 2


def test_cancel_event_stops_the_guest(calc) -> None:
    _, runner, sha = calc
    cancel = threading.Event()
    threading.Timer(0.1, cancel.set).start()
    with pytest.raises(comp.Cancelled, match="cancelled"):
        runner.call(_req(sha, "spin", {}, timeout=30.0, cancel=cancel))


def test_ungranted_cap_interface_does_not_instantiate(make_runtime) -> None:
    rt = make_runtime()
    sha = _put(rt, "capuser")
    runner = comp.ComponentRunner(rt)
    req = _req(sha, "raw", {"request": base64.b64encode(cbor2.dumps({"op": "count"})).decode()},
               name="capuser")
    with pytest.raises(CapabilityDenied, match=r"wb:host/kv@0.1.0 \(cap 'kv'\), which is not granted"):
        runner.call(req)


def test_granted_cap_interface_reaches_the_broker(make_runtime) -> None:
    rt = make_runtime()
    if "kv" not in rt.brokers:
        pytest.skip("no kv broker installed")
    sha = _put(rt, "capuser")
    runner = comp.ComponentRunner(rt)

    def call(request: dict) -> dict:
        raw = base64.b64encode(cbor2.dumps(request)).decode()
        res = runner.call(_req(sha, "raw", {"request": raw}, name="capuser", profile="minimal",
                               caps=frozenset({"kv"}), toolkit="capuser"))
        return cbor2.loads(base64.b64decode(res.value))

    call({"op": "put", "key": "k", "value": b"v1"})
    got = call({"op": "get", "key": "k"})
    assert b"v1" in cbor2.dumps(got)


def test_compiled_component_is_cached_across_processes(make_runtime) -> None:
    rt = make_runtime()
    sha = _put(rt, "calc")
    comp.components.clear()
    comp.ComponentRunner(rt).load(sha)
    assert comp.components.last_built is True
    comp.components.clear()  # a new process: nothing in memory, the serialized form on disk
    comp.ComponentRunner(rt).load(sha)
    assert comp.components.last_built is False
    cached = list(comp.artifact_store(rt).root.glob(f"{sha[:2]}/{sha}.component-*.cwasm"))
    assert len(cached) == 1


def test_wasi_http_is_never_linked_even_with_net(make_runtime) -> None:
    rt = make_runtime()
    sha = _put(rt, "http")
    with pytest.raises(CapabilityDenied, match="bypass the SSRF guard"):
        comp.ComponentRunner(rt).call(_req(sha, "f", {}, name="http", profile="network",
                                           caps=frozenset({"net"})))
