"""exec / commands / parallel: registered-only, structural argv, depth <= 8, <= 64 in flight."""

from __future__ import annotations

import re
import threading
import time

import cbor2
import pytest

from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound
from wbcore_brokers_exec.broker import encode_request, parse_request

from wbexec_guests import HELLO, SPIN, call_and_print


@pytest.fixture
def rt(make_runtime):
    pytest.importorskip("wbcore_wasmtime",
                        reason="nested commands need the wasmtime run engine (wbcore-wasmtime)")
    return make_runtime(plugins=["wasmtime", "brokers-exec"])


def ctx(rt, caps=("exec", "commands", "parallel"), **kw):
    return rt.dock.context(principal=Principal("t", "caller"), caps=caps, **kw)


def test_wire_format_roundtrip_and_truncation():
    wire = encode_request("grep", ["-n", "a b", ""], b"in\x00put") + b"trailing"
    assert parse_request(wire) == ("grep", ["-n", "a b", ""], b"in\x00put")
    with pytest.raises(InvalidArgs, match="truncated"):
        parse_request(wire[:9])


@pytest.mark.parametrize("field, wire", [
    ("name", b"\x02\0\0\0\xffh" + b"\0" * 8),
    ("argv[0]", encode_request("hello", ["ok"])[:13] + b"\x01\0\0\0\xff" + b"\0" * 4),
])
def test_wire_text_that_is_not_utf8_is_invalid_args_naming_it(field, wire):
    # argv reaches the guest as text: a byte that is not UTF-8 was a broker failure (internal)
    with pytest.raises(InvalidArgs, match=re.escape(f"exec: wire {field} is not UTF-8 text")):
        parse_request(wire)


def test_exec_runs_registered_commands_only(rt, register_guest):
    register_guest(rt, "hello", HELLO)
    c = ctx(rt)
    assert rt.dock.call(c, "exec", "run", {"name": "hello"}) == {"exit": 0, "stdout": b"hello", "stderr": b""}
    got = rt.dock.call(c, "exec", "wire", {"request": encode_request("hello", ["a; rm -rf /"])})
    assert got["stdout"] == b"hello"
    with pytest.raises(NotFound, match="not a registered command"):
        rt.dock.call(c, "exec", "run", {"name": "sh"})
    with pytest.raises(InvalidArgs, match="list of at most"):
        rt.dock.call(c, "exec", "run", {"name": "hello", "argv": "echo hi"})
    assert "hello" in rt.dock.call(c, "commands", "list")["commands"]


def test_the_ninth_nested_exec_is_refused(rt, register_guest):
    register_guest(rt, "nest", call_and_print("exec", {"op": "run", "name": "nest"}), caps="exec")
    out = rt.call("nest").stdout
    levels = 0
    while True:
        doc = cbor2.loads(out)
        if "error" in doc:
            break
        levels += 1
        out = doc["stdout"]
    assert levels == 8
    assert doc["reason"] == "depth" and "exceeds 8" in doc["message"]


def _hold_all_slots(rt, register_guest, limit: int, spin_s: float) -> None:
    register_guest(rt, "spin", SPIN, profile="posix")  # a 60 s profile: the spinners end at spin_s
    c = ctx(rt)
    broker = rt.dock.driver("exec")
    broker.slots.limit = limit
    outcomes: list[str] = []

    def hold():
        try:
            rt.dock.call(c, "exec", "run", {"name": "spin", "timeout": spin_s})
        except Exception as exc:  # noqa: BLE001 - each spinner ends by its deadline
            outcomes.append(getattr(getattr(exc, "kind", None), "value", type(exc).__name__))

    threads = [threading.Thread(target=hold) for _ in range(limit)]
    for t in threads:
        t.start()
    end = time.monotonic() + spin_s
    while broker.slots.in_flight(str(c.principal)) < limit and time.monotonic() < end:
        time.sleep(0.01)
    assert broker.slots.in_flight(str(c.principal)) == limit
    with pytest.raises(CapabilityDenied, match=f"{limit} nested calls in flight") as exc:
        rt.dock.call(c, "exec", "run", {"name": "spin", "timeout": 1})
    assert exc.value.reason == "concurrency"
    other = rt.dock.context(principal=Principal("t", "someone-else"), caps={"exec"})
    register_guest(rt, "hello", HELLO)
    assert rt.dock.call(other, "exec", "run", {"name": "hello"})["stdout"] == b"hello"
    for t in threads:
        t.join()
    assert len(outcomes) == limit and set(outcomes) == {"timeout"}, outcomes
    assert broker.slots.in_flight(str(c.principal)) == 0


def test_the_concurrency_cap_refuses_the_next_exec(rt, register_guest):
    _hold_all_slots(rt, register_guest, limit=4, spin_s=4)


@pytest.mark.slow
def test_the_65th_concurrent_exec_is_refused(rt, register_guest):
    from wbcore_brokers_exec.broker import MAX_CONCURRENT

    assert MAX_CONCURRENT == 64
    _hold_all_slots(rt, register_guest, limit=MAX_CONCURRENT, spin_s=15)


def test_parallel_maps_with_per_task_results(rt, register_guest):
    register_guest(rt, "hello", HELLO)
    register_guest(rt, "spin", SPIN)
    c = ctx(rt)
    got = rt.dock.call(c, "parallel", "map",
                       {"name": "hello", "inputs": [{"argv": [str(i)]} for i in range(20)]})
    assert [r["stdout"] for r in got["results"]] == [b"hello"] * 20
    slow = rt.dock.call(c, "parallel", "map", {"name": "spin", "inputs": [{}, {}], "timeout": 0.3})
    assert [r["error"] for r in slow["results"]] == ["timeout", "timeout"]
    with pytest.raises(InvalidArgs, match="1025 inputs exceeds 1024"):
        rt.dock.call(c, "parallel", "map", {"name": "hello", "inputs": [{}] * 1025})


def test_nested_call_uses_the_callees_caps_not_the_callers(rt, register_guest):
    register_guest(rt, "wants-kv", call_and_print("kv", {"op": "get", "key": "x"}))  # declares no caps
    with pytest.raises(CapabilityDenied, match="'kv'"):
        rt.dock.call(ctx(rt, caps=("exec", "kv")), "exec", "run", {"name": "wants-kv"})


def test_a_callers_reach_holds_in_every_nested_call(rt, register_guest):
    """An agent's :TOOLKITS: rides its principal: a relay it may run cannot run another
    toolkit's command through exec, commands or parallel, and list shows only its reach."""
    register_guest(rt, "hello", HELLO)
    register_guest(rt, "relay", call_and_print("exec", {"op": "run", "name": "hello"}), caps="exec")
    register_guest(rt, "relay2", call_and_print("commands", {"op": "run", "name": "hello"}), caps="commands")
    register_guest(rt, "relay3", call_and_print("parallel", {"op": "map", "name": "hello", "inputs": [{}]}),
                   caps="parallel")
    agent = Principal("t", "agent.a", frozenset({"relay", "relay2", "relay3"}))
    with pytest.raises(CapabilityDenied, match="belongs to toolkit 'hello'; this caller may reach only"):
        rt.call("hello", principal=agent)
    for relay in ("relay", "relay2"):
        doc = cbor2.loads(rt.call(relay, principal=agent).stdout)
        assert doc["reason"] == "not-in-reach" and "'hello'" in doc["message"], doc
    doc = cbor2.loads(rt.call("relay3", principal=agent).stdout)
    assert doc["results"][0]["reason"] == "not-in-reach"
    # without a reach (or with hello in it) the same relays run hello
    assert cbor2.loads(rt.call("relay", principal=Principal("t", "x")).stdout)["stdout"] == b"hello"
    wide = Principal("t", "agent.a", frozenset({"relay", "hello"}))
    assert cbor2.loads(rt.call("relay", principal=wide).stdout)["stdout"] == b"hello"
    listed = rt.dock.call(rt.dock.context(principal=agent, caps={"commands"}), "commands", "list")["commands"]
    assert "hello" not in listed and {"relay", "relay2", "relay3"} <= set(listed)
