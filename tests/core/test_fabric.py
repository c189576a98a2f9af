"""The fabric's contract in the core: resolve once, engines as plugins, inputs coerced lazily."""

from __future__ import annotations

import pytest

from wbcore import fabric, hookimpl
from wbcore.calls import CallResult
from wbcore.errors import ErrorKind, InvalidArgs, NotFound, PluginError
from wbcore.records import Availability, Check, ExecShape, FabricEngine
from wbcore.registry import Entry


class EchoRunner:
    """A test shape runner: stdout = argv joined, then stdin."""

    def call(self, req):
        return CallResult(" ".join(req.argv).encode() + req.stdin, b"", 0)


class InlineEngine:
    """A test engine: runs the job's resolved request in order, in this thread."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.jobs = []

    def chunks(self, job, work, *, cancel=None):
        from wbcore import dispatch

        self.jobs.append(job)
        target = dispatch.target_for(self.runtime, job.entry, job.tier)
        for i, payload in work:  # one input per chunk
            if isinstance(payload, Exception):
                yield fabric.ResultChunk(i, [None], {i: payload})
            else:
                yield fabric.ResultChunk(i, [fabric.run_command(self.runtime, job, target, payload)])


def plugin(engines: list[InlineEngine], name: str = "inline", available: Availability | None = None,
           dist: str = "Plugin") -> object:
    def factory(rt):
        engines.append(InlineEngine(rt))
        return engines[-1]

    class Plugin:
        @hookimpl
        def wbcore_exec_shapes(self):
            yield ExecShape(name="command", summary="test", verify=lambda ctx: [Check(True, "t", "ok")],
                            runner=lambda rt: EchoRunner())

        @hookimpl
        def wbcore_fabric_engines(self):
            yield FabricEngine(name=name, summary="inline test engine", factory=factory,
                               available=lambda: available or Availability.yes())

    Plugin.__name__ = Plugin.__qualname__ = dist
    return Plugin()


@pytest.fixture
def registered(make_runtime):
    engines: list[InlineEngine] = []
    rt = make_runtime(plugins=[plugin(engines)])
    art = rt.artifacts.put_bytes(b"\0asm\1\0\0\0")
    rt.registry.register(Entry(kind="command", name="say", sha256=art.sha256, shape="command"))
    return rt, engines


def test_map_resolves_once_and_hands_the_engine_a_job(registered):
    rt, engines = registered
    out = list(rt.fabric("say", [{"argv": ["a"], "stdin": "1"}, ["b"], {"argv": 3}, {"stdin_base64": "eA=="}],
                         engine="inline", width=3, deadline=30))
    assert [r.index for r in out] == [0, 1, 2, 3]
    assert out[0].value.stdout == b"a1" and out[1].value.stdout == b"b" and out[3].value.stdout == b"x"
    assert out[2].error.kind is ErrorKind.INVALID_ARGS and "list of strings" in out[2].error.message
    (job,) = engines[0].jobs
    assert job.tier == "instance" and job.width == 3 and job.caps == frozenset() and job.kind == "command"
    assert 0 < job.remaining() <= 30
    assert job.request.timeout_s <= job.request.profile.timeout_s


def test_no_engine_installed_says_what_to_install(make_runtime):
    rt = make_runtime(plugins=[])
    with pytest.raises(NotFound, match="pip install wb-fabric-local"):
        fabric.engine(rt, "local")


def test_unknown_engine_lists_the_known_and_an_unavailable_one_says_why(make_runtime):
    rt = make_runtime(plugins=[plugin([])])
    with pytest.raises(NotFound, match="inline"):
        fabric.engine(rt, "ray")
    rt = make_runtime(plugins=[plugin([], available=Availability.no("no cores today"))])
    with pytest.raises(NotFound, match="no cores today"):
        fabric.engine(rt, "inline")


def test_two_providers_of_one_engine_name_is_an_error(make_runtime):
    rt = make_runtime(plugins=[plugin([]), plugin([], dist="Other")])
    with pytest.raises(PluginError, match="'inline' is provided twice"):
        fabric.engine(rt, "inline")


@pytest.mark.parametrize("bad", [{"input": "a", "input_base64": "YQ=="}, 3, {"input_base64": "!!"}])
def test_kernel_inputs_are_checked_per_input(bad):
    ((i, err),) = list(fabric.work("kernel", [bad]))
    assert i == 0 and isinstance(err, InvalidArgs)


def test_inputs_are_read_lazily():
    seen = []

    def gen():
        for x in range(10**9):
            seen.append(x)
            yield b"x"

    w = fabric.work("kernel", gen())
    assert next(w) == (0, b"x") and seen == [0]


def test_bad_width_kind_and_deadline_are_refused(registered):
    rt, _ = registered
    for kw, what in (({"width": 0}, "width"), ({"kind": "component"}, "fabric kind"), ({"deadline": -1}, "deadline")):
        with pytest.raises(InvalidArgs, match=what):
            fabric.map(rt, "say", [], engine="inline", **kw)
