"""wbcore-otel: spans of a pipeline, its stages, an agent step, tool calls and broker decisions,
received by a real OTLP/HTTP server in the test (loopback), decoded with opentelemetry-proto."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from wbcore_runtime.contract import telemetry


@pytest.fixture
def receiver(otlp_receiver):
    return otlp_receiver


def test_no_tracer_and_no_call_hooks_when_the_endpoint_is_unset(make_runtime, monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    rt = make_runtime(plugins=["otel"])
    assert rt.tracer is None and rt.call_hooks is None  # the call path is the one without telemetry
    assert telemetry.span(rt, "wb.x") is telemetry.span(rt, "wb.y")  # one shared no-op
    disabled = make_runtime(plugins=["otel"], env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                                                   "OTEL_SDK_DISABLED": "true"})
    assert disabled.tracer is None


def test_settings_follow_the_standard_variables_and_hide_headers():
    from wbcore_otel.settings import Settings

    from wbcore_runtime.contract.errors import InvalidArgs

    s = Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
                           "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer s3cret,x-team=a",
                           "OTEL_SERVICE_NAME": "svc"})
    assert s.endpoint == "http://collector:4318/v1/traces" and s.service == "svc"
    assert s.headers == {"authorization": "Bearer s3cret", "x-team": "a"} and "s3cret" not in repr(s)
    assert (Settings.from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:1/t"}).endpoint
            == "http://c:1/t")
    with pytest.raises(InvalidArgs, match="http/protobuf"):
        Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
                           "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})


def test_a_broken_setting_leaves_telemetry_off_not_the_runtime(make_runtime, caplog):
    rt = make_runtime(plugins=["otel"], env={"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://nope"})
    assert rt.tracer is None and "telemetry is off" in caplog.text


def test_an_endpoints_credentials_reach_neither_the_warning_nor_a_repr(make_runtime, caplog):
    # a collector's basic-auth in the endpoint URL is a credential like a header's value
    from wbcore_otel.settings import Settings

    rt = make_runtime(plugins=["otel"],
                      env={"OTEL_EXPORTER_OTLP_ENDPOINT": "grpcs://u:s3cret@collector:4317"})
    assert rt.tracer is None and "telemetry is off" in caplog.text and "collector:4317" in caplog.text
    s = Settings.from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":
                           "https://u:s3cret@collector/v1/traces?k=s3cret"})
    assert s.endpoint.startswith("https://u:s3cret@")  # the exporter still gets it
    assert "s3cret" not in caplog.text + repr(s) and "https://collector/v1/traces" in repr(s)


def test_pipeline_stage_agent_step_call_and_broker_spans_reach_an_otlp_receiver(make_runtime, receiver):
    pytest.importorskip("wbcore_wasmtime")
    from wbcore_runtime.contract.calls import Principal
    from wbcore_runtime.contract.errors import CapabilityDenied
    pytest.importorskip("wbcore_fabric_local", reason="pipelines are served by wbcore-fabric-local")
    from wbcore_fabric_local.pipeline import Box, Pipeline

    rt = make_runtime(plugins=["otel", "wasmtime"], env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                                                         "OTEL_SERVICE_NAME": "wb-test"})
    assert rt.tracer is not None and rt.call_hooks is not None
    res = Pipeline.named("shout", Box("upper")).fan_out([Box("upper"), Box("upper")]).run(
        rt, b"hi", keep=False)
    assert res.success, res.error
    # the agent loop's seam: a step with its model and usage, a tool call and a broker decision inside
    with telemetry.agent_step(rt, step=1, agent="helper", model="gpt-test", provider="openai") as step:
        step.set(telemetry.TOKENS_IN, 120)
        step.set(telemetry.TOKENS_OUT, 30)
        step.set(telemetry.COST, 0.0021)
        assert rt.call("upper", stdin=b"x").stdout == b"X"
        ctx = rt.dock.context(principal=Principal("t", "helper"), caps=set(), toolkit="helper")
        with pytest.raises(CapabilityDenied):
            rt.dock.call(ctx, "kv", "get", {"key": "k"})
    assert rt.tracer.flush(10)
    spans = receiver.spans
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    by_id = {s["id"]: s for s in spans}
    names = sorted(s["name"] for s in spans)
    assert (names.count("wb.pipeline") == 1 and names.count("wb.stage") == 2
            and names.count("wb.call upper") == 4)
    pipe = next(s for s in spans if s["name"] == "wb.pipeline")
    assert pipe["attrs"]["wb.pipeline"] == "shout" and pipe["attrs"]["wb.pipeline.stages"] == 2
    assert pipe["attrs"]["wb.outcome"] == "ok" and pipe["parent"] == "" and pipe["service"] == "wb-test"
    stages = sorted((s for s in spans if s["name"] == "wb.stage"), key=lambda s: s["attrs"]["wb.stage.index"])
    assert [s["attrs"]["wb.stage.op"] for s in stages] == ["pipe", "fan_out"]
    assert all(s["parent"] == pipe["id"] and s["trace"] == pipe["trace"] for s in stages)
    assert stages[1]["attrs"]["wb.stage.boxes"] == ["upper", "upper"]
    calls = [s for s in spans if s["name"] == "wb.call upper"]
    in_stage = [c for c in calls if by_id.get(c["parent"], {}).get("name") == "wb.stage"]
    # one call under the pipe stage, two under the fan-out stage (from pool threads)
    assert sorted(by_id[c["parent"]]["attrs"]["wb.stage.index"] for c in in_stage) == [0, 1, 1]
    for c in calls:
        assert c["attrs"]["wb.tier"] == "instance" and c["attrs"]["wb.outcome"] == "ok"
        assert c["attrs"]["wb.exit_code"] == 0 and c["attrs"]["wb.shape"] == "command"
    step_span = next(s for s in spans if s["name"] == "wb.agent.step")
    assert (step_span["attrs"]["gen_ai.request.model"] == "gpt-test"
            and step_span["attrs"]["gen_ai.system"] == "openai")
    assert (step_span["attrs"]["gen_ai.usage.input_tokens"] == 120
            and step_span["attrs"]["gen_ai.usage.output_tokens"] == 30)
    assert step_span["attrs"]["wb.cost_usd"] == pytest.approx(0.0021) and step_span["parent"] == ""
    step_call = next(c for c in calls if c["parent"] == step_span["id"])
    assert step_call["trace"] == step_span["trace"]
    broker = next(s for s in spans if s["name"] == "wb.broker")
    assert broker["parent"] == step_span["id"]
    assert broker["attrs"]["wb.cap"] == "kv" and broker["attrs"]["wb.outcome"] == "denied"
    assert broker["attrs"]["wb.reason"] == "not-granted" and broker["attrs"]["wb.toolkit"] == "helper"
    assert broker["status"] == 2  # STATUS_CODE_ERROR


def test_broker_decisions_nest_under_the_call_that_made_them(make_runtime, receiver):
    """A guest's broker call (here the Dock used from inside a call hook's span, as a
    wasmtime host import does on the calling thread) is a child of the wb.call span."""
    from wbcore_runtime.contract.calls import CallRecord, Principal
    from wbcore_runtime.contract.errors import CapabilityDenied

    rt = make_runtime(plugins=["otel"], env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
    record = CallRecord(name="probe", shape="command", principal=Principal("t", "tk"), toolkit="tk",
                        tier="instance", caps=frozenset({"net"}))
    rt.call_hooks.wbcore_call_started(call=record)
    ctx = rt.dock.context(principal=record.principal, caps=set(), toolkit="tk")
    with pytest.raises(CapabilityDenied):
        rt.dock.call(ctx, "net", "fetch", {"url": "http://x"})
    rt.call_hooks.wbcore_call_finished(call=record, result=CapabilityDenied("no"))
    assert rt.tracer.flush(10)
    call = next(s for s in receiver.spans if s["name"] == "wb.call probe")
    broker = next(s for s in receiver.spans if s["name"] == "wb.broker")
    assert broker["parent"] == call["id"] and call["attrs"]["wb.caps"] == ["net"]
    assert call["attrs"]["wb.outcome"] == "error" and call["attrs"]["wb.error"] == "capability-denied"


class _Shout:
    """A test shape runner: upper-cases stdin, and asks the Dock for a cap it was not
    granted first (as a guest's host import would, on the calling thread)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def call(self, req: Any) -> Any:
        from wbcore_runtime.contract.calls import CallResult
        from wbcore_runtime.contract.errors import CapabilityDenied

        ctx = self.runtime.dock.context(principal=req.principal, caps=req.caps, toolkit="shout-tk")
        with pytest.raises(CapabilityDenied):
            self.runtime.dock.call(ctx, "kv", "get", {"key": "k"})
        return CallResult(req.stdin.upper(), b"", 0)


class ShoutShape:
    from wbcore_runtime import hookimpl

    @hookimpl
    def wbcore_exec_shapes(self):
        from wbcore_runtime.contract.records import ExecShape

        yield ExecShape(name="test-shout", summary="test shape", verify=lambda ctx: (), runner=_Shout)


def test_pipeline_to_broker_chain_with_only_the_core_and_wb_otel(make_runtime, receiver):
    """pipeline → stage → call → broker decision, end to end, with no engine plugin: the
    call runs through dispatch on an in-process test shape."""
    pytest.importorskip("wbcore_fabric_local", reason="pipelines are served by wbcore-fabric-local")
    from wbcore_fabric_local.pipeline import Box, Pipeline
    from wbcore_runtime.store.registry import Entry

    rt = make_runtime(plugins=["otel", ShoutShape()], env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
    sha = rt.artifacts.put_bytes(b"\0asm\x01\0\0\0").sha256
    rt.registry.register(Entry(kind="command", name="shout", sha256=sha, shape="test-shout"))
    res = Pipeline.named("chain", Box("shout")).fan_out([Box("shout"), Box("shout")]).run(
        rt, b"hey", keep=False)
    assert res.success and json.loads(res.output) == ["HEY", "HEY"]
    assert rt.tracer.flush(10)
    spans = receiver.spans
    by_id = {s["id"]: s for s in spans}

    def chain(span: dict[str, Any]) -> list[str]:
        out = [span["name"]]
        while span["parent"]:
            span = by_id[span["parent"]]
            out.append(span["name"])
        return out

    brokers = [s for s in spans if s["name"] == "wb.broker"]
    assert len(brokers) == 3
    for b in brokers:
        assert chain(b) == ["wb.broker", "wb.call shout", "wb.stage", "wb.pipeline"]
        assert b["attrs"]["wb.outcome"] == "denied" and b["attrs"]["wb.cap"] == "kv"
    call = by_id[brokers[0]["parent"]]
    assert call["attrs"]["wb.tier"] == "instance" and call["attrs"]["wb.shape"] == "test-shout"
    assert call["attrs"]["wb.outcome"] == "ok" and call["attrs"]["wb.exit_code"] == 0
    assert len({s["trace"] for s in spans}) == 1


def test_fabric_worker_calls_nest_under_the_map_span(make_runtime, receiver):
    """Worker processes get the map span's context (TRACEPARENT in their environment):
    their call spans, exported by each worker, are children of wb.fabric.map."""
    pytest.importorskip("wbcore_wasmtime")
    pytest.importorskip("wbcore_fabric_local")
    import time

    rt = make_runtime(plugins=["otel", "wasmtime", "fabric-local"],
                      env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
    rt.install_builtins(["upper"])
    results = list(rt.fabric("upper", [{"stdin": "a"}, {"stdin": "b"}, {"stdin": "c"}], width=2))
    assert [r.value.stdout for r in results] == [b"A", b"B", b"C"]
    assert rt.tracer.flush(10)
    deadline = time.monotonic() + 20
    while (time.monotonic() < deadline
           and len([s for s in receiver.spans if s["name"] == "wb.call upper"]) < 3):
        time.sleep(0.1)
    fan = next(s for s in receiver.spans if s["name"] == "wb.fabric.map")
    assert (fan["attrs"]["wb.items"] == 3 and fan["attrs"]["wb.outcome"] == "ok"
            and fan["attrs"]["wb.engine"] == "local")
    calls = [s for s in receiver.spans if s["name"] == "wb.call upper"]
    assert len(calls) == 3 and all(c["parent"] == fan["id"] and c["trace"] == fan["trace"] for c in calls)


def test_threads_engine_calls_nest_under_the_map_span(make_runtime, receiver):
    """The in-process threads engine runs each call in a copy of the context the map's span
    is current in: its call spans are children of wb.fabric.map, in its trace."""
    pytest.importorskip("wbcore_wasmtime")
    pytest.importorskip("wbcore_fabric_local")

    rt = make_runtime(plugins=["otel", "wasmtime", "fabric-local"],
                      env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
    rt.install_builtins(["upper"])
    results = list(rt.fabric("upper", [{"stdin": "a"}, {"stdin": "b"}, {"stdin": "c"}], width=2,
                             engine="threads"))
    assert [r.value.stdout for r in results] == [b"A", b"B", b"C"]
    assert rt.tracer.flush(10)
    fan = next(s for s in receiver.spans if s["name"] == "wb.fabric.map")
    assert fan["attrs"]["wb.engine"] == "threads" and fan["attrs"]["wb.items"] == 3
    calls = [s for s in receiver.spans if s["name"] == "wb.call upper"]
    assert len(calls) == 3 and all(c["parent"] == fan["id"] and c["trace"] == fan["trace"] for c in calls)


#: A js toolkit that makes two granted broker calls (kv put, kv get) and one that is denied (net).
_JS_MAIN = """import { wb, DockError } from './wb_dock.js';
wb.kv.put({ key: 'k', value: new TextEncoder().encode('v') });
console.log(new TextDecoder().decode(wb.kv.get({ key: 'k' }).value));
try { wb.net.fetch({ url: 'http://127.0.0.1/' }); } catch (e) {
  if (!(e instanceof DockError)) throw e;
  console.log(e.kind);
}
"""


def test_a_js_toolkits_broker_calls_nest_under_its_call_span(make_toolkit, make_runtime, wbx, receiver):
    """The js lane answers its guest's Dock calls from wasmtime's stdout callback; every
    broker span of the call is still a child of its wb.call span, in the call's one trace."""
    for mod in ("wbcore_lane_js", "wbcore_wasmtime", "wbcore_sources", "wbcore_brokers_state"):
        pytest.importorskip(mod,
                            reason="a js toolkit with kv needs wbcore-lane-js, -wasmtime, -sources, "
                                   "-brokers-state")
    make_toolkit("jsotel", exec="command", caps="kv",
                 extra={"BUILD_LANG": "js", "BUILD_SRC": "path:src", "CLI_BIN": "jsotel"},
                 drawer={"CLI_BIN": "jsotel"}, files={"src/main.js": _JS_MAIN})
    rt = make_runtime(env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
    assert rt.tracer is not None
    built = wbx("toolkit", "build", "jsotel", runtime=rt)
    assert built.exit_code == 0, built.stderr
    res = rt.call("jsotel")
    assert (res.exit_code, res.stdout) == (0, b"v\ncapability-denied\n"), res.stderr
    assert rt.tracer.flush(10)
    calls = [s for s in receiver.spans if s["name"] == "wb.call jsotel"]
    assert len(calls) == 1, [s["name"] for s in receiver.spans]
    call = calls[0]
    assert call["attrs"]["wb.outcome"] == "ok" and call["attrs"]["wb.caps"] == ["kv"]
    brokers = [s for s in receiver.spans
               if s["name"] == "wb.broker" and s["attrs"].get("wb.toolkit") == "jsotel"]
    assert sorted((b["attrs"]["wb.cap"], b["attrs"]["wb.outcome"]) for b in brokers) == [
        ("kv", "allowed"), ("kv", "allowed"), ("net", "denied")], brokers
    for b in brokers:
        assert b["trace"] == call["trace"] and b["parent"] == call["id"], (b, call)


def test_broker_calls_bridged_from_an_os_process_worker_nest_under_the_call_span(make_runtime, receiver):
    """A tier that runs the guest away from this process answers its caps on threads of its
    own (wbcore_runtime.wire.capbridge.HostBridge): those broker spans are children of the
    call span too, in its trace."""
    for mod in ("wasmtime", "wbcore_process", "wbcore_brokers_state"):
        pytest.importorskip(mod,
                            reason="needs wasmtime, wbcore-process and the kv broker (wbcore-brokers-state)")
    import cbor2
    import wasmtime
    from wbcore_process.sandbox import probe
    from wbcore_process.tiers import OsProcessTier

    from wbcore_runtime.contract.calls import CallRecord
    from wbcore_runtime.trust.policy import profile
    from wbcore_testing.conformance import command_request, kv_wat

    if not probe()[0]:
        pytest.skip(f"the os_process sandbox is unavailable here: {probe()[1]}")
    rt = make_runtime(env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
    put = cbor2.dumps({"op": "put", "key": "k", "value": b"v"})
    get = cbor2.dumps({"op": "get", "key": "k"})
    req = command_request(rt, wasmtime.wat2wasm(kv_wat(put, get)), profile=profile("minimal"),
                          caps=frozenset({"kv"}))
    record = CallRecord(name="bridged", shape="command", principal=req.principal, toolkit="tk",
                        tier="os_process", caps=req.caps)
    rt.call_hooks.wbcore_call_started(call=record)
    res = OsProcessTier(rt).call(req)
    rt.call_hooks.wbcore_call_finished(call=record, result=res)
    assert res.exit_code == 0 and cbor2.loads(res.stdout) == {"value": b"v"}, res.stderr
    assert rt.tracer.flush(10)
    call = next(s for s in receiver.spans if s["name"] == "wb.call bridged")
    brokers = [s for s in receiver.spans if s["name"] == "wb.broker"]
    assert [b["attrs"]["wb.outcome"] for b in brokers] == ["allowed", "allowed"]
    for b in brokers:
        assert b["trace"] == call["trace"] and b["parent"] == call["id"], (b, call)


def test_the_collectors_headers_never_follow_a_redirect_elsewhere():
    """``OTEL_EXPORTER_OTLP_HEADERS`` carry the collector's key (``x-honeycomb-team=…``): a
    collector answering with a redirect to another host gets the export refused, never resent
    there with the key (requests strips only ``Authorization``)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from wbcore_otel.tracer import OtelTracer

    seen: list[tuple[int, str]] = []
    servers: list[ThreadingHTTPServer] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            port = self.server.server_address[1]
            seen.append((port, self.headers.get("x-honeycomb-team", "-")))
            if port == servers[0].server_address[1]:
                self.send_response(307)
                self.send_header("Location", f"http://127.0.0.1:{servers[1].server_address[1]}/v1/traces")
            else:
                self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    for _ in range(2):
        srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
    try:
        collector, elsewhere = (s.server_address[1] for s in servers)
        tracer = OtelTracer.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector}",
                                      "OTEL_EXPORTER_OTLP_HEADERS": "x-honeycomb-team=s3cret",
                                      "OTEL_EXPORTER_OTLP_TIMEOUT": "2000"})
        with tracer.span("wb.test", {}):
            pass
        tracer.provider.force_flush(5000)
        tracer.shutdown()
        assert (collector, "s3cret") in seen
        assert all(port != elsewhere for port, _ in seen), seen
    finally:
        for srv in servers:
            srv.shutdown()
            srv.server_close()
