"""The build cap through the Dock, with a test lane and a test runner (fakes live here,
in tests only), so this distribution's tests pass installed alone with the core."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from wbcore_brokers_build import plugin
from wbcore_runtime import hookimpl
from wbcore_runtime.build import BuildFailed, BuildOutput
from wbcore_runtime.contract.calls import CallResult, Principal
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound
from wbcore_runtime.contract.drivers import Availability
from wbcore_runtime.contract.records import BuildLane, Check, ExecShape


class EchoLane:
    """Compiles by concatenating the sources; 'runs' by echoing argv and the artifact."""

    version = "echo-1"
    calls = 0
    gate: threading.Event | None = None

    def build(self, request):
        EchoLane.calls += 1
        if EchoLane.gate is not None:
            EchoLane.gate.wait(5)
        src = request.source.dir
        if (src / "fail").exists():
            raise BuildFailed("echo lane: told to fail", log="error: fail marker present")
        request.outdir.mkdir(parents=True, exist_ok=True)
        out = request.outdir / "a.bin"
        out.write_bytes(b"".join(p.read_bytes() for p in sorted(src.rglob("*")) if p.is_file()))
        return BuildOutput(artifact=out, log="echo: ok")


class EchoRunner:
    seen = []

    def __init__(self, runtime):
        self.runtime = runtime

    def call(self, req):
        EchoRunner.seen.append(req)
        body = req.artifact.read_bytes()
        return CallResult(stdout=body + b"|" + " ".join(req.argv).encode() + b"|" + req.stdin, stderr=b"",
                          exit_code=3)


class TestPlugin:
    @hookimpl
    def wbcore_build_lanes(self):
        yield BuildLane(name="echo", summary="test", where="in-process test lane",
                        factory=lambda rt: EchoLane())
        yield BuildLane(name="absent", summary="test", where="nowhere", factory=lambda rt: EchoLane(),
                        available=lambda: Availability.no("not installed in this test"))

    @hookimpl
    def wbcore_exec_shapes(self):
        yield ExecShape(name="command", summary="test", verify=lambda ctx: [Check(True, "exec", "t")],
                        runner=EchoRunner)


@pytest.fixture
def rt(make_runtime):
    EchoLane.calls, EchoLane.gate = 0, None
    return make_runtime(plugins=[plugin, TestPlugin()])


def ctx(rt, tenant="acme", caps=("build",)):
    return rt.dock.context(principal=Principal(tenant, "builder"), caps=caps)


def test_compile_run_caches_and_runs_without_caps(rt):
    c = ctx(rt)
    files = {"main.txt": b"hello", "lib/util.txt": "world"}
    out = rt.dock.call(c, "build", "compile_run",
                       {"lang": "echo", "files": files, "argv": ["a", "b"], "stdin": b"in"})
    assert out["stdout"] == b"worldhello|a b|in" and out["exit_code"] == 3 and out["cached"] is False
    req = EchoRunner.seen[-1]
    assert req.caps == frozenset() and req.profile.name == "compute" and req.timeout_s <= 5.0
    again = rt.dock.call(c, "build", "compile", {"lang": "echo", "files": files})
    assert again["cached"] is True and again["sha256"] == out["sha256"] and EchoLane.calls == 1
    assert rt.dock.call(c, "build", "lanes")["lanes"][0]["name"] in ("absent", "echo")


def test_denied_without_the_cap(rt):
    with pytest.raises(CapabilityDenied):
        rt.dock.call(ctx(rt, caps=("kv",)), "build", "lanes")


def test_run_only_what_this_tenant_built(rt):
    built = rt.dock.call(ctx(rt, "acme"), "build", "compile", {"lang": "echo", "files": {"x": b"1"}})
    with pytest.raises(CapabilityDenied, match="was not built by the build cap for tenant 'other'"):
        rt.dock.call(ctx(rt, "other"), "build", "run", {"sha256": built["sha256"]})
    other = rt.artifacts.put_bytes(b"\0asm\1\0\0\0")  # in the store, but not built by the broker
    with pytest.raises(CapabilityDenied):
        rt.dock.call(ctx(rt, "acme"), "build", "run", {"sha256": other.sha256})


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"../escape.c": b""}, "without '..'"),
        ({"/etc/passwd": b""}, "without '..'"),
        ({"a\\b": b""}, "backslash"),
        ({"x" * 300: b""}, "characters"),
        ({}, "empty"),
        ({f"f{i}": b"" for i in range(257)}, "256-file cap"),
        ({"big": b"x" * ((4 << 20) + 1)}, "byte cap"),
        ({"n": 5}, "bytes or text"),
    ],
)
def test_bad_sources_are_refused(rt, files, message):
    with pytest.raises(InvalidArgs, match=message):
        rt.dock.call(ctx(rt), "build", "compile", {"lang": "echo", "files": files})
    assert EchoLane.calls == 0


def test_unknown_and_unavailable_lanes(rt):
    with pytest.raises(NotFound, match="unknown BUILD_LANG lane 'cobol'; known: absent, echo"):
        rt.dock.call(ctx(rt), "build", "compile", {"lang": "cobol", "files": {"a": b""}})
    with pytest.raises(NotFound, match="not installed in this test"):
        rt.dock.call(ctx(rt), "build", "compile", {"lang": "absent", "files": {"a": b""}})


def test_compiler_errors_reach_the_caller(rt):
    with pytest.raises(BuildFailed, match="told to fail"):
        rt.dock.call(ctx(rt), "build", "compile", {"lang": "echo", "files": {"fail": b""}})


def test_concurrent_builds_per_principal_are_bounded(rt):
    EchoLane.gate = threading.Event()
    c = ctx(rt)
    errors: list[Exception] = []

    def build(i: int) -> None:
        try:
            rt.dock.call(c, "build", "compile", {"lang": "echo", "files": {"f": str(i)}})
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for _ in range(200):
        if EchoLane.calls == 2:
            break
        threading.Event().wait(0.01)
    with pytest.raises(InvalidArgs, match="2 builds already running") as exc:
        rt.dock.call(c, "build", "compile", {"lang": "echo", "files": {"f": "third"}})
    assert exc.value.reason == "busy"
    EchoLane.gate.set()
    for t in threads:
        t.join(5)
    assert not errors
    rt.dock.call(c, "build", "compile", {"lang": "echo", "files": {"f": "after"}})  # the slots came back


def test_nothing_left_behind(rt):
    rt.dock.call(ctx(rt), "build", "compile", {"lang": "echo", "files": {"a": b"1"}})
    tmp = Path(rt.home) / "brokers" / "build" / "tmp"
    assert list(tmp.iterdir()) == []
