"""An agent's :TOOLKITS: is its allowlist (docs/agents.md "Allowlist"): through its shell and
through the exec / commands brokers of a toolkit it may use, it reaches no other toolkit's
command. Real HTTP to a scripted model server, real WebAssembly guests."""

from __future__ import annotations

import json
from pathlib import Path

import cbor2
import pytest

from wbcore_runtime.build import builder
from wbcore_testing.scripted_llm import ScriptedLlm, reply, tool

pytest.importorskip("wbcore_agent")
pytest.importorskip("wbcore_llm_openai")
pytest.importorskip("wbcore_brokers_exec")
wasmtime = pytest.importorskip("wasmtime")

PLUGINS = ["wasmtime", "brokers-state", "brokers-exec", "agent", "act", "llm-openai"]
WASI_WRITE = ('(import "wasi_snapshot_preview1" "fd_write" '
              '(func $fd_write (param i32 i32 i32 i32) (result i32)))')
SECRET = f"""(module {WASI_WRITE}
  (memory (export "memory") 1)
  (data (i32.const 100) "the other toolkit")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 100)) (i32.store (i32.const 4) (i32.const 17))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""


def relay(cap: str, request: dict) -> str:
    req = cbor2.dumps(request)
    data = "".join(f"\\{b:02x}" for b in req)
    return f"""(module {WASI_WRITE}
  (import "wb" "{cap}" (func $call (param i32 i32 i32 i32) (result i64)))
  (import "wb" "fetch" (func $fetch (param i32 i32) (result i64)))
  (memory (export "memory") 64)
  (data (i32.const 64) "{data}")
  (func (export "_start") (local $n i64)
    (local.set $n (call $call (i32.const 64) (i32.const {len(req)}) (i32.const 65536) (i32.const 3000000)))
    (if (i64.lt_s (local.get $n) (i64.const 0))
      (then (local.set $n (call $fetch (i32.const 65536) (i32.const 3000000)))))
    (i32.store (i32.const 0) (i32.const 65536))
    (i32.store (i32.const 4) (i32.wrap_i64 (local.get $n)))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""


AGENT = """* Narrow :agent:
  :PROPERTIES:
  :ID: narrow
  :MODEL: openai:m
  :TOOLKITS: viaexec viacommands
  :END:
** System prompt
Use only what you are given.
"""


@pytest.fixture
def world(make_runtime, make_toolkit, tmp_path):
    with ScriptedLlm("openai") as llm:
        rt = make_runtime(plugins=PLUGINS,
                          env={"WB_LLM_BASE_URL": llm.base_url, "WB_LLM_API_KEY": "sk-reach-test-key",
                                                "WB_LLM_BACKOFF": "0.01"})
        for name, wat, caps in (("secret", SECRET, ""),
                                ("viaexec", relay("exec", {"op": "run", "name": "secret"}), "exec"),
                                ("viacommands", relay("commands", {"op": "run", "name": "secret"}),
                                 "commands")):
            make_toolkit(name, exec="command", caps=caps, extra={"CLI_BIN": name})
            rt.discover(refresh=True)
            builder.register_artifact(rt, name, rt.artifacts.put_bytes(bytes(wasmtime.wat2wasm(wat))).sha256)
        agent = tmp_path / "narrow.org"
        agent.write_text(AGENT)
        yield rt, llm, agent


def test_shell_commands_and_exec_reach_only_the_listed_toolkits(world):
    rt, llm, agent = world
    assert rt.call("secret").stdout == b"the other toolkit"  # it runs for a caller without a reach
    llm.script = [reply(tool("shell", script="secret"), tool("shell", script="viaexec"),
                        tool("shell", script="viacommands")), reply(tool("done", result="checked"))]
    rec = rt.agent(agent, "try to reach secret")
    assert rec.status == "done"
    answers = [m for m in llm.requests[1].body["messages"] if m["role"] == "tool"]
    assert len(answers) == 3
    direct, via_exec, via_commands = (a["content"] for a in answers)
    assert "capability-denied" in direct and "belongs to toolkit 'secret'" in direct and ":REACH:" in direct
    for text in (via_exec, via_commands):
        assert "not-in-reach" in text and "the other toolkit" not in text, text
    steps = [json.loads(line) for line in (rec.workdir / "_steps.jsonl").read_text().splitlines()]
    assert [r["ok"] for r in steps[0]["results"]] == [False, True, True]


def test_reach_star_opts_out(world):
    rt, llm, agent = world
    agent.write_text(AGENT.replace(":TOOLKITS: viaexec viacommands", ":TOOLKITS: viaexec\n  :REACH: *"))
    llm.script = [reply(tool("shell", script="secret")), reply(tool("done", result="ok"))]
    rec = rt.agent(agent, "reach it")
    answer = [m for m in llm.requests[1].body["messages"] if m["role"] == "tool"][0]["content"]
    assert rec.status == "done" and answer == "the other toolkit"


SPIN = """(module (memory (export "memory") 1) (func (export "_start") (loop $l (br $l))))"""


def test_wbx_max_steps_one_with_twelve_slow_tools_ends_within_the_run_budget(world, make_toolkit, wbx):
    """The issue's case: 12 slow tool calls in one reply with --max-steps 1 took 12 x the
    tool timeout; now the run budget bounds it, the rest are refused, the exit says so."""
    import time

    rt, llm, agent = world
    make_toolkit("spinner", exec="command", extra={"CLI_BIN": "spinner"})
    rt.discover(refresh=True)
    builder.register_artifact(rt, "spinner", rt.artifacts.put_bytes(bytes(wasmtime.wat2wasm(SPIN))).sha256)
    agent.write_text(AGENT.replace(":TOOLKITS: viaexec viacommands", ":TOOLKITS: spinner"))
    llm.script = [reply(*[tool("shell", script="spinner")] * 12)]
    t0 = time.monotonic()
    res = wbx("agent", "run", str(agent), "spin", "--max-steps", "1", "--tool-timeout", "5", "--run-timeout",
              "2", "--json", runtime=rt)
    took = time.monotonic() - t0
    assert took < 6, took  # not 12 x 5 s
    rec = json.loads(res.stdout)
    assert res.exit_code == 124 and rec["status"] in ("max-steps", "timeout"), res.stderr
    results = json.loads((Path(rec["workdir"]) / "_steps.jsonl").read_text().splitlines()[0])["results"]
    assert results[0]["text"].startswith("timeout: tool shell did not finish within")
    assert all(r["text"].startswith("refused: the run's time budget of 2 s is spent") for r in results[1:])
