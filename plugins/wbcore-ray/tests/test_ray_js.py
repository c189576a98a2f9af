"""js toolkits on the ray engine and the node tier: the artifact (QuickJS's reactor with the
app's sources inside, one sha256) is all the lane's runner needs, so it travels through the
object store like any module and each node runs it with the js lane's runner."""

from __future__ import annotations

import importlib.util
import json
import types

import pytest

from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.dispatch import fabric
from wbcore_runtime.store.registry import Entry

needs_js = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None
        for m in ("wbcore_lane_js", "wbcore_wasmtime", "wbcore_fabric_local")),
    reason="needs wbcore-lane-js, wbcore-wasmtime and wbcore-fabric-local",
)

MAIN = """import { shout } from './lib/shout.js';
const input = std.in.readAsString();
console.log(JSON.stringify({ args: scriptArgs.slice(1), out: shout(input) }));
if (input.startsWith('!')) process.exitCode = 3;
"""
SHOUT = "export const shout = (s) => s.toUpperCase() + '!';\n"


@needs_js
def test_a_js_module_may_leave_the_machine_but_caps_and_host_folders_may_not(make_runtime):
    from wbcore_ray.cluster import lane_runner, refuse_remote

    rt = make_runtime()
    js = Entry(kind="command", name="x", sha256="0" * 64, shape="command", options={"lane": "js"})
    # its artifact carries its sources
    refuse_remote(rt, "command", "x", frozenset(), None, js, "fabric engine 'ray'")
    assert lane_runner(rt, js) == "js"  # the node is told which lane's runner runs it
    plain = Entry(kind="command", name="y", sha256="0" * 64, shape="command", options={"lane": "rust"})
    assert lane_runner(rt, plain) is None  # a compile-to-wasm lane's artifact is a plain WASI command
    with pytest.raises(InvalidArgs, match="granted caps"):
        refuse_remote(rt, "command", "x", frozenset({"kv"}), None, js, "fabric engine 'ray'")
    with pytest.raises(InvalidArgs, match="preopens a host folder"):
        refuse_remote(rt, "command", "x", frozenset(),
                      types.SimpleNamespace(preopens=(("/srv", "/data"),), scratch=None), js, "tier node")
    assert rt.tiers.get("node").hosts_lane_runners


def test_a_node_without_the_lane_refuses_its_modules(make_runtime):
    from wbcore_ray.actor import need_lane

    bare = make_runtime(plugins=["ray"])  # a node whose wbcore has no js lane
    job = types.SimpleNamespace(kind="command", name="jsup")
    with pytest.raises(InvalidArgs, match="built by the js lane.*install the same wbcore plugins"):
        need_lane(bare, "js", "f" * 56, job)  # type: ignore[arg-type]


@needs_js
@pytest.mark.slow
def test_a_js_toolkit_runs_on_the_cluster_and_the_node_tier_as_it_does_locally(make_toolkit, make_runtime,
                                                                               wbx,
                                                                              two_nodes):
    import ray

    from wbcore_runtime.dispatch import tiers

    make_toolkit("jsup", exec="command",
                 extra={"BUILD_LANG": "js", "BUILD_SRC": "path:src", "CLI_BIN": "jsup"},
                 drawer={"CLI_BIN": "jsup"}, files={"src/main.js": MAIN, "src/lib/shout.js": SHOUT})
    rt = make_runtime()
    built = wbx("toolkit", "build", "jsup", runtime=rt)
    assert built.exit_code == 0, built.stderr
    assert rt.registry.get("command", "jsup").options.get("lane") == "js"

    inputs = [{"argv": [f"n{i}"], "stdin": f"line {i}" if i % 4 else f"!bang {i}"} for i in range(24)]
    ran = list(fabric.map(rt, "jsup", inputs, width=2, engine="local"))
    assert all(r.ok for r in ran), [(r.index, r.error) for r in ran if not r.ok]
    local = [(r.value.exit_code, r.value.stdout) for r in ran]  # type: ignore[union-attr]
    assert local[1] == (0, b'{"args":["n1"],"out":"LINE 1!"}\n') and local[0][0] == 3
    # the ray engine: two actors, one per node, each running the js lane's runner on the artifact it received
    got = [(r.value.exit_code, r.value.stdout) for r in fabric.map(rt, "jsup", inputs, width=2, engine="ray",
                                                                    deadline=600) if r.ok]
    assert got == local
    stats = fabric.engine(rt, "ray").stats
    assert len({s["node"] for s in stats}) == 2 and sum(s["inputs"] for s in stats) == len(inputs), stats

    # the node tier: one call on the other node, through dispatch (this answered 127: no tier could host js)
    here = rt.call("jsup", argv=["far"], stdin=b"away")
    there = rt.call("jsup", argv=["far"], stdin=b"away", tier="node")
    assert ((there.exit_code, there.stdout) == (here.exit_code, here.stdout)
            == (0, b'{"args":["far"],"out":"AWAY!"}\n'))
    tier = tiers.target_for(rt, rt.resolve("command", "jsup").entry, "node")
    (handle,) = tier._actors.values()
    where = ray.get(handle.stats.remote())
    assert where["node"] != ray.get_runtime_context().get_node_id() and where["inputs"] == 1

    # the CLI: wbx fan on the cluster and wbx run --tier node print what they print locally
    lines = "".join(json.dumps(i) + "\n" for i in inputs[:6])
    fan_local = wbx("fan", "jsup", "--engine", "local", "--width", "1", runtime=rt, input=lines)
    fan_ray = wbx("fan", "jsup", "--engine", "ray", "--width", "2", runtime=rt, input=lines)
    assert fan_ray.stdout == fan_local.stdout and fan_ray.stdout.count("\n") == 6, fan_ray.stderr
    run = wbx("run", "--tier", "node", "jsup", "x", runtime=rt, input="y")
    assert (run.exit_code, run.stdout) == (0, '{"args":["x"],"out":"Y!"}\n'), run.stderr


@needs_js
def test_dispatch_sends_a_js_module_to_the_node_tier_and_not_to_tiers_that_cannot_host_its_runner(
        make_runtime, monkeypatch):
    from wbcore_runtime.contract.errors import NotFound
    from wbcore_runtime.dispatch.tiers import choose_tier

    monkeypatch.setenv("WB_RAY_ADDRESS", "ray://head.example:10001")  # available; nothing is joined here
    rt = make_runtime()
    js = Entry(kind="command", name="x", sha256="0" * 64, shape="command", toolkit="t",
               options={"lane": "js"})
    assert choose_tier(rt, js, "first-party", frozenset(), "node").name == "node"  # answered 127 before
    choice = choose_tier(rt, js, "third-party", frozenset())
    assert choice.name == "node", choice  # the first rung above instance that can host the js runner
    hosting = {t.name for t in rt.tiers if t.hosts_lane_runners}
    assert hosting == {"node"}
    assert all("cannot host the js lane's runner" in why for _, why in choice.considered), choice
    for name in {t.name for t in rt.tiers if "command" in t.kinds} - hosting - {"instance"}:
        with pytest.raises(NotFound, match="cannot host the js lane's runner"):
            choose_tier(rt, js, "first-party", frozenset(), name)
