"""The ray fabric engine and the node tier: what runs without a cluster, and (slow) the same
fabric.map on the local engine and on a real 2-node Ray cluster on loopback."""

from __future__ import annotations

import pytest
from ray_fixtures import ECHO, K_UPPER

from wbcore_runtime.dispatch import fabric
from wbcore_runtime.contract.errors import ErrorKind, InvalidArgs


def test_the_engine_and_the_tier_are_registered(make_runtime, monkeypatch):
    rt = make_runtime()
    monkeypatch.delenv("WB_RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert "ray" in rt.fabric_engines
    node = rt.tiers.get("node")
    assert node.rung >= 3  # above os_process (1) and container (2): never the first rung escalation reaches
    assert not node.bridges_caps
    avail = node.available()
    assert not avail.ok and "WB_RAY_ADDRESS" in avail.reason  # no cluster: no other node, never a local Ray
    monkeypatch.setenv("WB_RAY_ADDRESS", "ray://head.example:10001")
    assert node.available().ok


def test_calls_granted_caps_or_host_folders_never_leave_the_machine(make_runtime):
    rt = make_runtime()
    from wbcore_ray.cluster import refuse_remote

    from wbcore_runtime.store.registry import Entry

    entry = Entry(kind="command", name="x", sha256="0" * 64, shape="command")
    with pytest.raises(InvalidArgs, match="granted caps.*local or threads"):
        refuse_remote(rt, "command", "x", frozenset({"kv"}), None, entry, "fabric engine 'ray'")

    class Req:
        preopens = (("/srv/data", "/data"),)
        scratch = None

    with pytest.raises(InvalidArgs, match="preopens a host folder"):
        refuse_remote(rt, "command", "x", frozenset(), Req(), entry, "fabric engine 'ray'")


def test_a_job_leaves_without_the_drivers_environment(rt, register):
    from wbcore_ray.engine import dataclasses_replace_env

    register("kup", K_UPPER, kind="kernel")
    job = fabric.job(rt, "kup", kind="kernel", width=2, deadline=30)
    sent = dataclasses_replace_env(job)
    assert sent.env == {} and sent.deadline is None and job.remaining() > 0


@pytest.mark.slow
def test_same_outputs_on_local_and_on_a_two_node_cluster_each_node_compiling_once(rt, register, two_nodes):
    register("kup", K_UPPER, kind="kernel")
    inputs = [f"word {i} abc".encode() for i in range(10_000)]
    expected = [w.upper() for w in inputs]
    if "local" in rt.fabric_engines:  # wbcore-fabric-local installed beside: the same map on the local engine
        local = [r.value for r in fabric.map(rt, "kup", inputs, kind="kernel", width=2, engine="local")]
        assert local == expected
    # 4 actors over 2 nodes: two per node, and each node compiles the module once
    got = [r.value
           for r in fabric.map(rt, "kup", iter(inputs), kind="kernel", width=4, engine="ray", deadline=600)]
    assert got == expected
    stats = fabric.engine(rt, "ray").stats
    assert len(stats) == 4 and sum(s["inputs"] for s in stats) == 10_000
    by_node: dict[str, list[bool]] = {}
    for s in stats:
        by_node.setdefault(s["node"], []).append(s["compiled"])
    assert len(by_node) == 2, stats  # both nodes ran inputs
    assert all(flags.count(True) == 1 for flags in by_node.values()), stats  # one compile per node


@pytest.mark.slow
def test_commands_with_per_input_errors_on_the_cluster_and_the_node_tier(rt, register, two_nodes):
    register("echo", ECHO)
    inputs = [{"stdin": f"line {i}" if i % 5 else f"!trap {i}"} for i in range(200)]
    inputs[7] = {"argv": "not a list"}
    out = list(fabric.map(rt, "echo", inputs, width=2, engine="ray", deadline=600))
    assert [r.index for r in out] == list(range(200))
    for i, r in enumerate(out):
        if i == 7:
            assert r.error.kind is ErrorKind.INVALID_ARGS
        elif i % 5 == 0:
            assert r.error is not None and "unreachable" in r.error.message
        else:
            assert r.value.stdout == f"line {i}".encode()
    # the node tier: one call on the other node (not the driver's), through dispatch
    assert rt.tiers.get("node").available().ok
    result = rt.call("echo", stdin=b"far away", tier="node")
    assert result.stdout == b"far away"
    import ray

    from wbcore_runtime.dispatch import tiers

    tier = tiers.target_for(rt, rt.resolve("command", "echo").entry, "node")
    (handle,) = tier._actors.values()
    where = ray.get(handle.stats.remote())
    assert where["node"] != ray.get_runtime_context().get_node_id() and where["inputs"] == 1


SPIN = """(module (memory (export "memory") 1) (func (export "_start") (loop $l (br $l))))"""


@pytest.mark.slow
def test_the_batch_deadline_ends_spinning_calls_on_the_cluster(rt, register, two_nodes):
    import time

    import ray

    from wbcore_runtime.contract.errors import Timeout

    register("spin", SPIN)
    t0 = time.monotonic()
    with pytest.raises(Timeout):
        # under the profile's own call timeout
        list(fabric.map(rt, "spin", [{}] * 4, width=2, engine="ray", deadline=8))
    assert time.monotonic() - t0 < 60
    # the actors were killed: the cluster's CPUs are free again for the next map
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU", 0) >= 2
