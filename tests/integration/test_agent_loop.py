"""The agent loop end to end: scripted OpenAI-compatible and Anthropic-format servers on
loopback (real HTTP, the vendors' SDKs), real toolkits built and run as WebAssembly, the
run's VFS in the vfs broker, toolkits the agent makes through the build cap."""

from __future__ import annotations

import json
import os

import pytest

from wbcore_runtime.build import builder
from wbcore_testing.scripted_llm import ScriptedLlm, failure, reply, tool

pytest.importorskip("wbcore_agent")
pytest.importorskip("wbcore_llm_openai")
pytest.importorskip("wbcore_llm_anthropic")

PLUGINS = ["wasmtime", "sources", "brokers-state", "brokers-build", "agent", "act", "install", "llm-openai",
           "llm-anthropic"]
KEY = "sk-integration-secret"

SHOUT_WAT = r"""
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello from shout\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 17))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
"""

MADE_WAT = (SHOUT_WAT.replace("hello from shout\\n", "made in session!\\n")
            .replace("(i32.const 17)", "(i32.const 17)"))

SHOUT_MANIFEST = """#+TITLE: shout
#+TOOLKIT: shout
#+VERSION: 0.1.0
#+STATUS: stable
#+TAGLINE: Says hello loudly.
#+EXEC: command
#+BUILD_LANG: wat
#+BUILD_SRC: path:main.wat
#+CLI_BIN: shout

* shout :toolkit:
  :PROPERTIES:
  :ID: shout
  :STATUS: stable
  :END:

Says hello loudly.
"""

AGENT = """* Greeter :agent:
  :PROPERTIES:
  :ID: greeter
  :MODEL: {model}
  :TOOLKITS: shout
  :END:
** System prompt
You greet people with the shout toolkit.
"""


def made_manifest(ident: str) -> str:
    return SHOUT_MANIFEST.replace("shout", ident).replace("Says hello loudly.", f"{ident}: made by an agent")


@pytest.fixture(params=["openai", "anthropic"])
def llm(request):
    with ScriptedLlm(request.param) as server:
        yield server


@pytest.fixture
def world(make_runtime, make_toolkit, tmp_path, llm, toolkit_root, wb_home):
    make_toolkit("shout", SHOUT_MANIFEST, files={"main.wat": SHOUT_WAT},
                 skills={"overview": "#+TITLE: shout overview\n\nRun `shout`: it prints a greeting.\n"})
    env = {"WB_LLM_BASE_URL": llm.base_url, "WB_LLM_API_KEY": KEY, "WB_LLM_BACKOFF": "0.01",
           "WB_LLM_RETRIES": "2"}
    # the home's toolkits folder is where promotion installs
    rt = make_runtime(plugins=PLUGINS, env=env, roots=[toolkit_root, wb_home / "toolkits"])
    builder.build(rt, "shout")
    agent = tmp_path / "greeter.org"
    agent.write_text(AGENT.format(model=f"{llm.format}:scripted-model"))
    return rt, agent


def steps(rec):
    return [json.loads(x) for x in (rec.workdir / "_steps.jsonl").read_text().splitlines()]


def offered(body) -> list[str]:
    return [t.get("name") or t["function"]["name"] for t in body.get("tools", [])]


def test_five_step_run_over_real_http(world, llm):
    rt, agent = world
    llm.script = [
        reply(tool("wb", op="list"), text="Looking at the toolkits."),
        reply(tool("wb", op="skill", toolkit="shout", skill="overview")),
        reply(tool("shell", script="shout | upper"), tool("shout__shout")),
        reply(tool("vfs_write", path="greeting.txt", content="hello from shout")),
        reply(tool("done", result="greeted")),
    ]
    rec = rt.agent(agent, "greet the world")
    assert rec.status == "done" and rec.result == "greeted" and rec.steps == 5, rec.error
    got = steps(rec)
    assert [s["step"] for s in got] == [1, 2, 3, 4, 5, 5] and got[-1]["event"] == "done"
    assert any(t["id"] == "shout" for t in json.loads(got[0]["results"][0]["text"]))
    assert "prints a greeting" in got[1]["results"][0]["text"]
    shell_out, typed_out = got[2]["results"]
    # through shout and the upper built-in
    assert shell_out["ok"] and shell_out["text"] == "HELLO FROM SHOUT\n"
    assert typed_out["ok"] and typed_out["text"] == "hello from shout\n", typed_out
    assert got[3]["results"][0]["ok"]
    # what the model was offered: the base tools and the toolkit's typed tool, no OS shell
    names = offered(llm.requests[0].body)
    assert names == ["shell", "wb", "search", "fetch", "vfs_read", "vfs_write", "file_issue", "done",
                     "review_decisions", "shout__shout"]
    system = (llm.requests[0].body["system"] if llm.format == "anthropic"
              else llm.requests[0].body["messages"][0]["content"])
    assert "You greet people" in system and "- shout: Says hello loudly." in system
    assert rec.usage.input_tokens == 55 and rec.usage.output_tokens == 35
    assert KEY not in (rec.workdir / "_steps.jsonl").read_text()
    # the VFS write landed in the run's VFS, where a resumed run (or a person) finds it
    from wbcore_runtime.contract.calls import Principal

    ctx = rt.dock.context(principal=Principal("dev", "agent.greeter"), caps={"vfs"},
                          instance=f"agent-{rec.run_id}")
    assert rt.dock.call(ctx, "vfs", "read", {"path": "greeting.txt"})["data"] == b"hello from shout"


def test_tool_choice_per_step_reaches_the_wire_and_an_unoffered_name_ends_the_run(world, llm, tmp_path):
    """``:TOOL_CHOICE: shout__shout done``: step 1 names shout, step 2 and later name done,
    in each vendor's form; a name not offered ends the run with a message naming the offer."""
    rt, agent = world
    agent.write_text(agent.read_text().replace(":TOOLKITS: shout\n",
                                               ":TOOLKITS: shout\n  :TOOL_CHOICE: shout__shout done\n"))
    llm.script = [reply(tool("shout__shout")), reply(tool("done", result="ok"))]
    rec = rt.agent(agent, "greet")
    assert rec.status == "done" and rec.result == "ok", rec.error
    sent = [r.body.get("tool_choice") for r in llm.requests]
    if llm.format == "openai":
        assert sent == [{"type": "function", "function": {"name": n}} for n in ("shout__shout", "done")]
    else:
        assert sent == [{"type": "tool", "name": n} for n in ("shout__shout", "done")]
    agent.write_text(agent.read_text().replace(":TOOL_CHOICE: shout__shout done", ":TOOL_CHOICE: nosuch"))
    rec = rt.agent(agent, "greet")
    assert rec.status == "error" and rec.steps == 0
    assert ("tool_choice 'nosuch' is neither auto, required, none nor an offered tool (offered: shell,"
            in rec.error)


def test_provider_error_mid_run_is_retried_then_surfaced(world, llm):
    rt, agent = world
    llm.script = [reply(tool("wb", op="list")), failure(503), reply(tool("wb", op="list")), failure(500),
                  failure(502), failure(500)]
    rec = rt.agent(agent, "flaky endpoint")
    got = steps(rec)
    assert got[1]["attempts"] == 2  # the 503 was retried
    assert rec.status == "error" and "HTTP 500" in rec.error and "after 3 attempts" in rec.error
    assert got[-1]["event"] == "error" and KEY not in rec.error


def test_max_steps_and_tool_timeout_end_the_run(world, llm, make_toolkit):
    rt, agent = world
    spin = '(module (memory (export "memory") 1) (func (export "_start") (loop $l (br $l))))'
    make_toolkit("spin", SHOUT_MANIFEST.replace("shout", "spin"), files={"main.wat": spin})
    rt.discover(refresh=True)
    builder.build(rt, "spin")
    agent.write_text(agent.read_text().replace(":TOOLKITS: shout", ":TOOLKITS: shout spin"))
    llm.default = reply(tool("spin__spin"))
    rec = rt.agent(agent, "spin", max_steps=2, tool_timeout=0.5)
    assert rec.status == "max-steps" and rec.error.startswith("max-steps")
    res = steps(rec)[0]["results"][0]
    assert not res["ok"] and res["text"].startswith("timeout")


def test_every_run_option_the_engine_takes_is_one_a_session_runs(world, llm):
    """The engine refuses a run option outside its range with a 400 before a session starts
    (docs/engine.md); each end of each range must then be a run, not a session that fails."""
    engine_sessions = pytest.importorskip("wbcore_engine.sessions")
    rt, agent = world
    llm.default = reply(tool("done", result="ok"))
    for key, (low, high) in engine_sessions.RUN_RANGES.items():
        for value in (low, high):
            options = engine_sessions.check_options({key: int(value) if key in ("max_steps", "max_calls")
                                                     else value})
            session = rt.agents.sessions.start(agent, "t", **options)
            rec = session.wait(60)
            assert rec is not None and rec.status == "done", (options, session.error)


def test_crashed_run_resumes_from_its_vfs(world, llm):
    rt, agent = world

    class HostDied(BaseException):
        pass

    def die(step):
        if step.get("step") == 2 and "event" not in step:
            raise HostDied

    llm.script = [reply(tool("vfs_write", path="a.txt", content="one")),
                  reply(tool("vfs_write", path="b.txt", content="two"))]
    with pytest.raises(HostDied):
        rt.agent(agent, "write two files", run_id="crash-1", on_step=die)
    llm.script = [reply(tool("vfs_read", path="b.txt")), reply(tool("done", result="resumed"))]
    rec = rt.agent(agent, None, resume="crash-1")
    assert rec.status == "done" and rec.result == "resumed" and rec.steps == 4
    assert steps(rec)[2]["results"][0]["text"] == "two"


def test_agent_makes_a_toolkit_used_only_in_its_session_until_promoted(world, llm):
    rt, agent = world
    llm.script = [
        reply(tool("vfs_write", path="tools/echoer/manifest.org", content=made_manifest("echoer")),
              tool("vfs_write", path="tools/echoer/main.wat", content=MADE_WAT)),
        reply(tool("wb", op="build", path="tools/echoer")),
        reply(tool("local__echoer__echoer")),
        reply(tool("wb", op="list"), tool("done", result="made and used")),
    ]
    s = rt.agents.sessions.start(agent, "make a tool", allow_build=True)
    rec = s.wait(60)
    assert rec is not None and rec.status == "done", s.status()
    got = steps(rec)
    assert json.loads(got[1]["results"][0]["text"])["session_local"] is True, got[1]
    assert got[2]["results"][0]["text"] == "made in session!\n"
    assert "local__echoer__echoer" in offered(llm.requests[2].body)
    listed = json.loads(got[3]["results"][0]["text"])
    assert {"id": "echoer", "tagline": "echoer: made by an agent", "session_local": True,
            "granted": True} in listed
    # another session never sees it: not offered, not listed, not in the registry
    llm.script = [reply(tool("wb", op="list"), tool("local__echoer__echoer")),
                  reply(tool("done", result="x"))]
    other = rt.agents.sessions.start(agent, "look around", allow_build=True).wait(60)
    assert "local__echoer__echoer" not in offered(llm.requests[-2].body)
    first = steps(other)[0]["results"]
    assert all(t["id"] != "echoer" for t in json.loads(first[0]["text"]))
    assert not first[1]["ok"] and "no tool" in first[1]["text"]
    assert rt.registry.lookup("command", "echoer") is None
    # a session toolkit never shadows an installed one
    llm.script = [reply(tool("vfs_write", path="s/manifest.org", content=SHOUT_MANIFEST),
                        tool("vfs_write", path="s/main.wat", content=MADE_WAT),
                        tool("wb", op="build", path="s")),
                  reply(tool("done", result="x"))]
    shadow = rt.agent(agent, "shadow shout", allow_build=True)
    assert "may not shadow it" in steps(shadow)[0]["results"][2]["text"]
    # without the build grant the Dock refuses
    llm.script = [reply(tool("vfs_write", path="t/manifest.org", content=made_manifest("other")),
                        tool("vfs_write", path="t/main.wat", content=MADE_WAT),
                        tool("wb", op="build", path="t")),
                  reply(tool("done", result="x"))]
    denied = rt.agent(agent, "try")
    assert steps(denied)[0]["results"][2]["text"].startswith("capability-denied: cap 'build' is not granted")
    # promotion: session → workspace (signed archive), then installed through verify-then-land
    ws = rt.agents.promote(rec.run_id, "echoer", to="workspace")
    assert ws.path.is_file() and len(ws.sha256) == 64
    assert (ws.path.parent / "workspace.org").read_text().startswith("#+WORKSPACE: echoer\n")
    assert not (rt.home / "toolkits" / "echoer").exists() and rt.registry.lookup("command", "echoer") is None
    try:  # the workspace ships as a signed .wbundle holding the signed toolkit in its VFS
        from wbcore_publish import bundle
    except ImportError:
        bundle = None
    if bundle is not None:
        from wbcore_runtime.trust import identity

        shipped = bundle.ship(ws.path.parent, rt.home / "echoer.wbundle", home=rt.home,
                              ident=identity.load(rt.home, rt.env), env=rt.env)
        seen = bundle.inspect(shipped.path, env=rt.env, resolve_web=False)
        assert seen.verified and seen.manifest["workspace"]["instance"] == "ws-echoer"
        from wbcore_publish import vfsfile

        rows = vfsfile.read_rows(vfsfile.db_path(rt.home, "ws-echoer"), ("workspace",))
        assert len(rows) == seen.manifest["vfs"]["rows"]
        assert {r[1] for r in rows} >= {"toolkits/echoer/manifest.org", "toolkits/echoer/main.wat"}

    inst = rt.agents.promote(rec.run_id, "echoer", to="installed")
    assert (inst.path / "manifest.org").read_text().count("#+SIGNATURE:") == 1
    assert rt.toolkit("echoer").manifest.trust == "third-party"
    assert rt.call("echoer").stdout == b"made in session!\n"
    rt.dock.audit.flush()
    audit = (rt.home / "audit" / "audit.jsonl").read_text()
    assert "promote-workspace" in audit and "promote-installed" in audit and "session-toolkit" in audit


@pytest.mark.slow
def test_against_a_real_local_model_server(make_runtime, make_toolkit, tmp_path, real_llm_env):
    """A real model (the local one of wbcore-llm-local, or the deployer's WB_LLM_BASE_URL)
    drives the loop over real HTTP: step 1 names the tool (``:TOOL_CHOICE:``), so a real
    tool call runs and its result goes back to the model in step 2 (``done`` named)."""
    make_toolkit("shout", SHOUT_MANIFEST, files={"main.wat": SHOUT_WAT})
    rt = make_runtime(plugins=PLUGINS, env=dict(real_llm_env))
    builder.build(rt, "shout")
    agent = tmp_path / "greeter.org"
    agent.write_text(AGENT.replace(":MODEL: {model}\n", ":TOOL_CHOICE: shout__shout done\n"))
    rec = rt.agent(agent, "Call the shout__shout tool once, then call done with its output as the result.",
                   max_steps=3)
    rows = steps(rec)
    assert rec.status == "done", rec.error
    first = rows[0]
    assert first["tool_calls"][0]["name"] == "shout__shout" and first["results"][0]["ok"], first
    assert first["results"][0]["text"] == "hello from shout\n"
    # the result reached the model: a second request carried it, and the model called done
    assert rows[1]["step"] == 2 and rows[1]["tool_calls"][0]["name"] == "done"
    assert rows[1]["usage"]["input_tokens"] > first["usage"]["input_tokens"]
    assert rows[-1]["event"] == "done" and rows[-1]["usage"]["input_tokens"] > 0


@pytest.mark.slow
def test_shell_runs_in_the_wbox_shell_when_served(make_runtime, make_toolkit, tmp_path):
    """With the wbox built-in installed (wbcore-lane-zig), ``shell`` is the in-WASM shell:
    sequencing and variables work, and every command is a registered one."""
    pytest.importorskip("wbcore_lane_zig")
    from wbcore_lane_zig.toolchain import available

    if not available().ok:
        pytest.skip(f"the wbox built-in cannot be built here: {available().reason}")
    make_toolkit("shout", SHOUT_MANIFEST, files={"main.wat": SHOUT_WAT})
    with ScriptedLlm("openai") as llm:
        env = {"WB_LLM_BASE_URL": llm.base_url, "WB_LLM_API_KEY": KEY, "PATH": os.environ.get("PATH", ""),
               "WB_ZIG_CACHE": os.environ.get("WB_ZIG_CACHE", str(tmp_path / "zig"))}
        rt = make_runtime(plugins=[*PLUGINS, "brokers-exec", "lane-zig", "process"], env=env)
        builder.build(rt, "shout")
        agent = tmp_path / "greeter.org"
        agent.write_text(AGENT.format(model="openai:scripted-model"))
        llm.script = [reply(tool("shell",
                                 script='X=loud; shout | upper; echo "$X" && nosuchcmd || echo fallback')),
                      reply(tool("done", result="ok"))]
        rec = rt.agent(agent, "shell", tool_timeout=120)
    res = steps(rec)[0]["results"][0]
    assert res["ok"] and res["text"].startswith("HELLO FROM SHOUT\nloud\n") and "fallback" in res["text"], res


def test_wbx_agent_run_and_exit_codes(world, llm, wbx):
    rt, agent = world
    llm.script = [reply(tool("wb", op="list")), reply(tool("done", result="all greeted"))]
    res = wbx("agent", "run", str(agent), "greet", runtime=rt)
    assert res.exit_code == 0 and res.stdout == "all greeted\n", res.stderr
    assert "step 1: wb" in res.stderr and "done after 2 step(s)" in res.stderr
    llm.default = reply(tool("wb", op="list"))
    res = wbx("agent", "run", str(agent), "loop", "--max-steps", "2", "--json", runtime=rt)
    assert res.exit_code == 124 and json.loads(res.stdout)["status"] == "max-steps"


# --- an agent as a pipeline stage, traced -------------------------------------------------

SUMMARIZER = """* Summarizer :agent:
  :PROPERTIES:
  :ID: summarizer
  :MODEL: {model}
  :TOOLKITS: shout
  :END:
** System prompt
Read input.json from your VFS and summarize it.
"""


def test_pipeline_with_an_agent_stage_is_traced_to_an_otlp_receiver(make_runtime, make_toolkit, toolkit_root,
                                                                    wb_home,
                                                                      tmp_path, llm, otlp_receiver):
    """pipe (upper) → agent box (reads the stage input from its VFS as input.json, runs a
    toolkit, answers with done) → pipe (upper): the agent's result is carried on, and the
    spans pipeline → stage → agent step → tool call → broker decision arrive over OTLP with
    their attributes."""
    pytest.importorskip("wbcore_otel")
    from wbcore_fabric_local import pipeline as _pipeline

    make_toolkit("shout", SHOUT_MANIFEST, files={"main.wat": SHOUT_WAT},
                 skills={"overview": "#+TITLE: shout overview\n\nRun `shout`: it prints a greeting.\n"})
    env = {"WB_LLM_BASE_URL": llm.base_url, "WB_LLM_API_KEY": KEY, "WB_LLM_PRICES": "scripted-model=1.0/2.0",
           "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver.endpoint,
           "OTEL_SERVICE_NAME": "wbcore-agent-pipeline"}
    rt = make_runtime(plugins=[*PLUGINS, "otel"], env=env, roots=[toolkit_root])
    builder.build(rt, "shout")
    agent = tmp_path / "summarizer.org"
    agent.write_text(SUMMARIZER.format(model=f"{llm.format}:scripted-model"))
    llm.script = [
        reply(tool("vfs_read", path="input.json")),
        reply(tool("shout__shout")),
        reply(tool("done", result="summary: hello")),
    ]
    org = tmp_path / "flow.org"
    org.write_text(f"""* flow :pipeline:
** pipe :stage:
   :PROPERTIES:
   :RUN: upper
   :END:
** pipe :stage:
   :PROPERTIES:
   :RUN: {agent} "summarize the input"
   :KIND: agent
   :END:
** pipe :stage:
   :PROPERTIES:
   :RUN: upper
   :END:
""")
    res = _pipeline.load(org).run(rt, b'{"msg": "hi"}', keep=False)
    assert res.success, res.error
    assert res.output == b"SUMMARY: HELLO"
    # the agent read exactly the stage input (the first stage's output) from its VFS
    # the model saw it in the vfs_read result of its second turn
    assert ('{\\"MSG\\": \\"HI\\"}' in json.dumps(llm.requests[1].body)
            or '{"MSG": "HI"}' in json.dumps(llm.requests[1].body))
    assert rt.tracer.flush(10)
    spans = otlp_receiver.spans
    by_id = {s["id"]: s for s in spans}

    def parent(s):
        return by_id.get(s["parent"], {})

    pipe = next(s for s in spans if s["name"] == "wb.pipeline")
    stages = sorted((s for s in spans if s["name"] == "wb.stage"), key=lambda s: s["attrs"]["wb.stage.index"])
    assert len(stages) == 3 and all(s["parent"] == pipe["id"] for s in stages)
    steps_ = [s for s in spans if s["name"] == "wb.agent.step"]
    assert len(steps_) == 3 and all(s["parent"] == stages[1]["id"] for s in steps_)
    assert {s["attrs"]["wb.agent"] for s in steps_} == {"summarizer"}
    assert all(s["attrs"]["gen_ai.request.model"] == "scripted-model" for s in steps_)
    assert all(s["attrs"]["gen_ai.usage.input_tokens"] > 0 for s in steps_)
    assert [s["attrs"]["wb.outcome"] for s in steps_] == ["ok", "ok", "done"]
    assert all(s["attrs"]["wb.cost_usd"] > 0 for s in steps_)
    shout = next(s for s in spans if s["name"] == "wb.call shout")
    assert parent(shout)["name"] == "wb.agent.step" and shout["attrs"]["wb.tier"] == "instance"
    vfs = [s for s in spans if s["name"] == "wb.broker" and s["attrs"].get("wb.cap") == "vfs"]
    # the run's own state and the stage input are written under the stage; the agent's
    # vfs_read of input.json is a decision inside its first step
    assert all(s["parent"] in {stages[1]["id"], *(t["id"] for t in steps_)} for s in vfs)
    first = min(steps_, key=lambda s: s["attrs"]["wb.agent.step"])
    assert any(s["parent"] == first["id"] and s["attrs"]["wb.outcome"] == "allowed" for s in vfs)
    assert all(s["trace"] == pipe["trace"] for s in [*stages, *steps_, shout, *vfs])
    assert KEY not in json.dumps(spans)
