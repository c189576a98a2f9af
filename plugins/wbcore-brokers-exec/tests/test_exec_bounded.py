"""exec, commands and parallel answers are bounded while they are gathered: a result that
passes the caller's ``max_response`` is refused with ``too-large``, and ``parallel`` stops
running and keeping results once their total passes it (not after all 1024 ran)."""

from __future__ import annotations

import threading

import pytest

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import InvalidArgs

from wbexec_guests import HELLO, MEGABYTE

MiB = 1 << 20


class Finished:
    """Counts nested calls that ran to an end (a test plugin)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.names: list[str] = []

    @hookimpl
    def wbcore_call_finished(self, call, result):
        with self.lock:
            self.names.append(call.name)


@pytest.fixture
def finished():
    return Finished()


@pytest.fixture
def rt(make_runtime, finished):
    pytest.importorskip("wbcore_wasmtime",
                        reason="nested commands need the wasmtime run engine (wbcore-wasmtime)")
    return make_runtime(plugins=["wasmtime", "brokers-exec", finished])


def ctx(rt, **kw):
    return rt.dock.context(principal=Principal("t", "caller"), caps=("exec", "commands", "parallel"), **kw)


def test_exec_result_over_the_callers_cap_is_refused(rt, register_guest):
    register_guest(rt, "mega", MEGABYTE)
    assert len(rt.dock.call(ctx(rt), "exec", "run", {"name": "mega"})["stdout"]) == MiB
    for cap, op, args in (("exec", "run", {"name": "mega"}), ("commands", "run", {"name": "mega"})):
        with pytest.raises(InvalidArgs, match="262144-byte cap") as exc:
            rt.dock.call(ctx(rt, max_response=256 << 10), cap, op, args)
        assert exc.value.reason == "too-large"


def test_parallel_stops_once_results_pass_the_cap(rt, register_guest, finished):
    register_guest(rt, "mega", MEGABYTE)
    register_guest(rt, "hello", HELLO)
    c = ctx(rt, max_response=4 * MiB)
    with pytest.raises(InvalidArgs, match="4194304-byte cap") as exc:
        rt.dock.call(c, "parallel", "map", {"name": "mega", "inputs": [{}] * 64, "width": 2})
    assert exc.value.reason == "too-large"
    ran = finished.names.count("mega")
    assert 5 <= ran <= 5 + 2, ran  # the 5th MiB passes 4 MiB; at most the in-flight ones end after it
    got = rt.dock.call(c, "parallel", "map", {"name": "hello", "inputs": [{}] * 64, "width": 4})
    assert [r["stdout"] for r in got["results"]] == [b"hello"] * 64
