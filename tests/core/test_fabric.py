"""The fabric's contract in the core: resolve once, engines as plugins, inputs coerced lazily."""

from __future__ import annotations

import dataclasses

import pytest

from wbcore_runtime.dispatch import batch, fabric
from wbcore_runtime import hookimpl
from wbcore_runtime.contract.calls import CallResult
from wbcore_runtime.contract.errors import ErrorKind, InvalidArgs, NotFound, PluginError
from wbcore_runtime.contract.drivers import Availability
from wbcore_runtime.contract.records import Check, ExecShape, FabricEngine
from wbcore_runtime.store.registry import Entry


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
        from wbcore_runtime.dispatch import tiers

        self.jobs.append(job)
        target = tiers.target_for(self.runtime, job.entry, job.tier)
        for i, payload in work:  # one input per chunk
            if isinstance(payload, Exception):
                yield fabric.ResultChunk(i, [None], {i: payload})
            else:
                yield fabric.ResultChunk(i, [batch.run_command(self.runtime, job, target, payload)])


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
    with pytest.raises(NotFound, match="pip install wbcore-fabric-local"):
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
    for kw, what in (({"width": 0}, "width"), ({"kind": "component"}, "fabric kind"),
                     ({"deadline": -1}, "deadline")):
        with pytest.raises(InvalidArgs, match=what):
            fabric.map(rt, "say", [], engine="inline", **kw)


def test_map_chunks_through_an_engine_and_map_is_those_chunks_flattened(registered):
    rt, _ = registered
    inputs = [{"argv": ["a"]}, {"argv": 3}, {"stdin": "z"}]
    chunks = list(fabric.map_chunks(rt, "say", inputs, engine="inline"))
    assert [(c.start, c.stop, c.ok) for c in chunks] == [(0, 1, True), (1, 2, False), (2, 3, True)]
    assert chunks[1].values == [None] and chunks[1].errors[1].kind is ErrorKind.INVALID_ARGS
    flat = list(fabric.map(rt, "say", inputs, engine="inline"))
    assert [(r.index, r.value and r.value.stdout, r.error and r.error.kind) for r in flat] == [
        (0, b"a", None), (1, None, ErrorKind.INVALID_ARGS), (2, b"z", None)]


def test_outputs_is_one_buffer_read_as_a_sequence():
    import pickle

    outs = [b"ab", b"", b"cde", b"f"]
    o = fabric.Outputs.join(outs)
    assert o.data == b"abcde" + b"f" and list(o.lengths) == [2, 0, 3, 1] and o.offsets() == [0, 2, 2, 5, 6]
    assert list(o) == outs and len(o) == 4 and o[2] == b"cde" and o[-1] == b"f" and o[1:3] == [b"", b"cde"]
    assert o == outs and o == fabric.Outputs.join(list(outs)) and o != [b"ab"] and o != outs[::-1]
    assert o != [b"ab", None, b"cde", b"f"] and o != "abcdef"
    with pytest.raises(IndexError):
        o[4]
    back = pickle.loads(pickle.dumps(o))
    assert back == o and list(back) == outs and isinstance(back.lengths, type(o.lengths))
    assert list(fabric.Outputs.join([])) == []


def test_chunk_results_put_each_error_at_its_input_index(registered):
    rt, _ = registered
    job = fabric.job(rt, "say", kind="command")
    kjob = dataclasses.replace(job, kind="kernel")
    chunk = fabric.Chunk(10, [b"a", None, b"c", b"d"], {1: InvalidArgs("not bytes")})
    done = batch.chunk_results(kjob, chunk, [b"A", b"", b"", b"D"], [(2, "timeout", "too slow")])
    assert done.start == 10 and done.stop == 14 and not done.ok and list(done.errors) == [11, 12]
    assert done.errors[12].kind is ErrorKind.TIMEOUT and done.errors[11].message == "not bytes"
    assert [(r.index, r.value, r.error and r.error.kind) for r in done.results()] == [
        (10, b"A", None), (11, None, ErrorKind.INVALID_ARGS), (12, None, ErrorKind.TIMEOUT), (13, b"D", None)]
    lost = batch.failed_results(dataclasses.replace(kjob, joined=True), chunk, InvalidArgs("worker gone"))
    assert isinstance(lost.values, fabric.Outputs) and list(lost.values) == [b""] * 4
    assert ([e.message for e in lost.errors.values()]
            == ["worker gone", "not bytes", "worker gone", "worker gone"])
    assert batch.failed_results(job, chunk, None).values == [None] * 4
    assert batch.failed_results(kjob, chunk, None).values == [b""] * 4


def test_an_error_kind_crosses_a_boundary_as_its_class():
    from wbcore_runtime.contract import errors

    for exc in (NotFound("x"), InvalidArgs("y"), errors.Timeout("z"), errors.CapabilityDenied("w")):
        back = batch.error_from_wire(*batch.error_wire(exc))
        assert type(back) is type(exc) and back.message == exc.message
    assert type(errors.of_kind("no-such-kind", "m")) is errors.Internal
