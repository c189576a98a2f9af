"""wbx engine serve: auth, toolkits, push (dry run, tampered), calls, audit and session streams."""

from __future__ import annotations

import base64
import io
import json
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from wbcore_audit_trail import reader
from wbcore_install import install, lockfile
from wbcore_runtime.trust import signing
from wbcore_testing.fixtures import write_toolkit

SEED0 = base64.b64encode(bytes(32)).decode()

#: The engine and the plugins its routes ask the runtime for (push: the installer; audit: the reader).
ENGINE = ["engine", "install", "audit-trail", "http-server"]


def snapshot(home: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    root = home / "toolkits"
    if root.exists():
        for p in sorted(root.rglob("*")):
            out[p.relative_to(home).as_posix()] = p.read_bytes() if p.is_file() else "dir"
    lock = home / lockfile.LOCKFILE
    out["LOCK"] = lock.read_bytes() if lock.exists() else None
    return out


@pytest.fixture
def signed(tmp_path, monkeypatch):
    """``signed(version, caps)``: a folder holding signed third-party toolkit 'tp'."""
    monkeypatch.setenv("WB_SIGNING_KEY", SEED0)
    from wbcore_runtime.trust import identity

    def make(version: str = "0.1.0", caps: str = "net", where: str = "src") -> Path:
        base = tmp_path / where
        d = write_toolkit(base, "tp", trust="third-party", caps=caps, version=version,
                          files={"bin/tool.wasm": b"\0asm\x01\0\0\0"})
        signing.sign(d, identity.Identity.from_seed(bytes(32)))
        return base

    return make


def test_requests_without_the_token_get_401(make_runtime, serve_engine):
    eng = serve_engine(make_runtime(plugins=ENGINE))
    with httpx.Client(base_url=eng.url, timeout=10) as c:
        r = c.get("/v1/toolkits")
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert "Bearer" in r.json()["error_description"]
        for bad in ("Bearer nope-nope-nope-nope", eng.token, f"Basic {eng.token}", f"Bearer {eng.token}x"):
            assert c.get("/v1/toolkits", headers={"authorization": bad}).status_code == 401, bad
        assert c.post("/v1/toolkits", content=b"x" * 100).status_code == 401  # before the body is read
        assert c.get("/v1/toolkits", headers=eng.auth).status_code == 200
        # DNS rebinding: a Host or Origin that is not this server's is refused, token or not
        assert c.get("/v1/toolkits", headers={**eng.auth, "host": "evil.example"}).status_code == 421
        assert c.get("/v1/toolkits", headers={**eng.auth, "origin": "http://evil.example"}).status_code == 403
        assert c.get("/v1/toolkits",
                     headers={**eng.auth, "origin": "http://localhost:3000"}).status_code == 200


def test_openapi_document_lists_every_route(make_runtime, serve_engine):
    eng = serve_engine(make_runtime(plugins=ENGINE))
    doc = httpx.get(eng.url + "/openapi.json", headers=eng.auth, timeout=10).json()
    assert (doc["openapi"].startswith("3.1")
            and doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer")
    for path in ("/v1/toolkits", "/v1/toolkits/{ident}/verify", "/v1/calls/{name}",
                 "/v1/sessions/{sid}/events", "/v1/sessions/{sid}/review", "/v1/audit/events"):
        assert path in doc["paths"], path


def test_push_dry_run_shows_the_caps_diff_and_lands_nothing(signed, make_runtime, serve_engine, wbx, wb_home):
    install.install(wb_home, str(signed("0.1.0", "net", "v1") / "tp"))
    server = make_runtime(plugins=ENGINE, roots=[wb_home / "toolkits"])
    eng = serve_engine(server)
    before = snapshot(wb_home)
    client = make_runtime(roots=[signed("0.2.0", "net kv", "v2")])
    r = wbx("toolkit", "push", "tp", eng.url, "--dry-run", "--token", eng.token, runtime=client)
    assert r.exit_code == 0 and "refused tp 0.2.0 (installed: 0.1.0): already installed" in r.stdout, r.stderr
    r = wbx("toolkit", "push", "tp", eng.url, "--dry-run", "--force", "--token", eng.token, runtime=client)
    assert r.exit_code == 0, r.stderr
    assert "replace tp 0.2.0 (installed: 0.1.0)" in r.stdout
    assert "caps: +kv" in r.stdout and "(dry run: nothing landed)" in r.stdout
    assert snapshot(wb_home) == before
    # the same push for real replaces it (with --force), and the engine shows the new caps
    r = wbx("toolkit", "push", "tp", eng.url, "--force", "--token", eng.token, runtime=client)
    assert (r.exit_code == 0 and "installed tp 0.2.0" in r.stdout
            and "requests caps: net kv" in r.stdout), r.stderr
    pushed = [e for e in reader.entries(server.dock.audit) if e["cap"] == "engine"]
    assert [(e["op"], e["outcome"], e["target"]) for e in pushed] == [("push", "allowed", "tp")]
    shown = httpx.get(eng.url + "/v1/toolkits/tp", headers=eng.auth, timeout=10).json()
    assert (shown["version"] == "0.2.0" and shown["caps"] == ["net", "kv"]
            and shown["signer"].startswith("did:key:"))
    verdict = httpx.get(eng.url + "/v1/toolkits/tp/verify", headers=eng.auth, timeout=10)
    assert verdict.json()["toolkit"] == "tp"


def test_push_of_a_new_toolkit_diff_and_signer(signed, make_runtime, serve_engine, wbx, wb_home):
    eng = serve_engine(make_runtime(plugins=ENGINE, roots=[wb_home / "toolkits"]))
    client = make_runtime(roots=[signed("0.1.0", "net")])
    r = wbx("toolkit", "push", "tp", eng.url, "--dry-run", "--json", "--token", eng.token, runtime=client)
    change = json.loads(r.stdout)["changes"][0]
    assert change["action"] == "new" and change["caps"] == {"installed": None, "incoming": ["net"]}
    assert change["trust"] == [None, "third-party"] and change["signer"][1].startswith("did:key:z6Mk")
    assert not (wb_home / "toolkits" / "tp").exists()


def test_a_tampered_signed_toolkit_is_refused_and_nothing_lands(signed, make_runtime, serve_engine, wbx,
                                                                wb_home):
    install.install(wb_home, str(signed("0.1.0", "net", "v1") / "tp"))
    eng = serve_engine(make_runtime(plugins=ENGINE, roots=[wb_home / "toolkits"]))
    src = signed("0.2.0", "net", "v2")
    (src / "tp" / "bin" / "tool.wasm").write_bytes(b"\0asm\x01\0\0\0evil")
    before = snapshot(wb_home)
    client = make_runtime(roots=[src])
    for extra in ((), ("--dry-run",)):
        r = wbx("toolkit", "push", "tp", eng.url, "--force", *extra, "--token", eng.token, runtime=client)
        assert r.exit_code == 2, r.stdout
        assert "refusing to install tp: signature tampered" in r.stderr and "bin/tool.wasm" in r.stderr
        assert snapshot(wb_home) == before
    assert not list((wb_home / ".staging").iterdir())
    refused = [e for e in reader.entries(eng.runtime.dock.audit) if e["cap"] == "engine"]
    assert [(e["op"], e["outcome"], e["kind"]) for e in refused] == [("push", "denied", "invalid-args")]


def test_a_push_without_an_installer_is_refused_naming_it_and_audited(make_runtime, serve_engine):
    eng = serve_engine(make_runtime(plugins=["engine", "audit-trail", "http-server"]))  # no wbcore-install
    with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=10) as c:
        for dry in ("1", "0"):
            r = c.post("/v1/toolkits", content=b"abc", params={"name": "tp.tar.gz", "dry_run": dry})
            assert r.status_code == 404 and "wbcore-install" in r.json()["message"], r.text
    eng.runtime.dock.audit.flush()
    refused = [e for e in reader.entries(eng.runtime.dock.audit) if e["cap"] == "engine"]
    # the dry run lands nothing and is not audited (as with an installer); the push is, once
    assert [(e["op"], e["outcome"], e["reason"], e["target"]) for e in refused] == [
        ("push", "denied", "no-installer", "tp.tar.gz")]


def test_push_is_bounded_and_checks_its_input(make_runtime, serve_engine, wb_home):
    from wbcore_engine.app import EngineLimits

    eng = serve_engine(make_runtime(plugins=ENGINE), limits=EngineLimits(max_push=1000))
    with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=10) as c:
        big = c.post("/v1/toolkits", content=b"\0" * 5000, params={"name": "tp.tar.gz"})
        assert big.status_code == 413 and "1000-byte cap" in big.json()["message"]

        def chunks():  # no content-length: refused while it arrives
            for _ in range(50):
                yield b"\0" * 100

        assert c.post("/v1/toolkits", content=chunks(), params={"name": "tp.tar.gz"}).status_code == 413
        bad_name = c.post("/v1/toolkits", content=b"abc", params={"name": "../x.tar.gz"})
        assert bad_name.status_code == 400
        # an archive escaping its folder is refused by the core's safe unpack
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w:gz") as tf:
            info = tarfile.TarInfo("../evil/manifest.org")
            info.size = 3
            tf.addfile(info, io.BytesIO(b"abc"))
        esc = c.post("/v1/toolkits", content=raw.getvalue()[:1000], params={"name": "tp.tar.gz"})
        assert esc.status_code == 400, esc.text
    assert not (wb_home / "evil").exists() and not (wb_home.parent / "evil").exists()


def test_calls_go_through_dispatch(make_runtime, serve_engine):
    pytest.importorskip("wbcore_wasmtime")
    eng = serve_engine(make_runtime(plugins=["engine", "http-server", "install", "wasmtime"]))
    with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=30) as c:
        r = c.post("/v1/calls/upper", json={"stdin": "hello engine"})
        assert r.status_code == 200, r.text
        assert r.json()["exit_code"] == 0 and r.json()["stdout"] == "HELLO ENGINE"
        missing = c.post("/v1/calls/nope", json={})
        assert missing.status_code == 404 and missing.json()["error"] == "not-found"
        assert c.post("/v1/calls/upper", json={"timeout": 10**9}).status_code == 400
        assert c.post("/v1/calls/upper", content=b"[1]").status_code == 400


def read_sse(resp: Any, want: int, deadline_s: float = 20.0) -> list[tuple[str, Any]]:
    """Parse events off a streaming httpx response until ``want`` non-ready events came."""
    out: list[tuple[str, Any]] = []
    event, data = "message", []
    end = time.monotonic() + deadline_s
    for line in resp.iter_lines():
        assert time.monotonic() < end, f"SSE: only {out} within {deadline_s} s"
        if not line:
            if data:
                out.append((event, json.loads("\n".join(data))))
                if len([e for e in out if e[0] != "ready"]) >= want or event == "end":
                    return out
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    return out


def test_audit_trail_streams_over_sse(make_runtime, serve_engine):
    from wbcore_runtime.contract.calls import Principal
    from wbcore_runtime.contract.errors import CapabilityDenied

    rt = make_runtime(plugins=ENGINE)
    eng = serve_engine(rt)
    ctx = rt.dock.context(principal=Principal("t", "probe"), caps=set())

    def deny_later() -> None:
        time.sleep(0.3)
        for _ in range(2):
            with pytest.raises(CapabilityDenied):
                rt.dock.call(ctx, "kv", "get", {"key": "k"})
        rt.dock.audit.flush()

    with httpx.Client(timeout=30) as c, c.stream("GET", eng.url + "/v1/audit/events", headers=eng.auth,
                                                  params={"wait": 20}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        threading.Thread(target=deny_later, daemon=True).start()
        events = read_sse(resp, 2)
    got = [d for e, d in events if e == "audit"]
    assert [(d["cap"], d["op"], d["outcome"], d["reason"])
            for d in got] == [("kv", "get", "denied", "not-granted")] * 2
    tail = httpx.get(eng.url + "/v1/audit", headers=eng.auth, params={"tail": 1},
                     timeout=10).json()["entries"]
    assert tail[0]["seq"] == got[-1]["seq"]



def test_the_audit_routes_name_the_reader_to_install_when_none_is_served(make_runtime, serve_engine):
    eng = serve_engine(make_runtime(plugins=["engine", "http-server"]))  # wbcore-audit-trail not chosen
    for path in ("/v1/audit", "/v1/audit/events"):
        r = httpx.get(eng.url + path, headers=eng.auth, timeout=10)
        assert r.status_code == 404 and "pip install wbcore-audit-trail" in r.text, (path, r.text)

def test_sessions_say_501_with_the_reason_when_no_agent_loop_is_installed(make_runtime, serve_engine):
    rt = make_runtime(plugins=ENGINE)  # the agent loop (wbcore-agent) not chosen
    assert not rt.agent_loops.names()
    eng = serve_engine(rt)
    with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=10) as c:
        for method, path in (("POST", "/v1/sessions"), ("GET", "/v1/sessions/s1"),
                             ("GET", "/v1/sessions/s1/events"),
                             ("DELETE", "/v1/sessions/s1"), ("GET", "/v1/sessions/s1/review")):
            r = c.request(method, path, json={"agent": "a", "task": "t"} if method == "POST" else None)
            assert r.status_code == 501 and "agent loop" in r.json()["message"], (method, path)


class ScriptedSessions:
    """A test stand-in for the agent loop's session host (the protocol in wbcore_engine.sessions)."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self.cond = threading.Condition()

    def create(self, *, agent: Any, task: str, options: Any) -> str:
        sid = f"s{len(self.runs) + 1}"
        with self.cond:
            self.runs[sid] = {"status": "running", "events": [], "review": [],
                              "agent": agent if isinstance(agent, str) else agent.id}
        threading.Thread(target=self._steps, args=(sid, task), daemon=True).start()
        return sid

    def _steps(self, sid: str, task: str) -> None:
        for n, (kind, text) in enumerate([("step", f"thinking about {task}"), ("tool", "wb list"),
                                          ("done", "ok")], 1):
            time.sleep(0.1)
            with self.cond:
                self.runs[sid]["events"].append({"seq": n, "type": kind, "text": text})
                if kind == "done":
                    self.runs[sid]["status"] = "done"
                self.cond.notify_all()

    def _run(self, sid: str) -> dict[str, Any]:
        from wbcore_runtime.contract.errors import NotFound

        if sid not in self.runs:
            raise NotFound(f"no session {sid!r}")
        return self.runs[sid]

    def status(self, session: str) -> dict[str, Any]:
        run = self._run(session)
        return {"id": session, "status": run["status"], "agent": run["agent"]}

    def events(self, session: str, *, after: int, timeout: float) -> list[dict[str, Any]]:
        with self.cond:
            self.cond.wait_for(lambda: any(e["seq"] > after for e in self._run(session)["events"]),
                               timeout=timeout)
            return [e for e in self._run(session)["events"] if e["seq"] > after]

    def put_review(self, session: str, item: Any) -> dict[str, Any]:
        self._run(session)["review"].append(dict(item))
        return dict(item)

    def take_review(self, session: str, *, limit: int) -> list[dict[str, Any]]:
        q = self._run(session)["review"]
        out, q[:] = q[:limit], q[limit:]
        return out

    def cancel(self, session: str) -> dict[str, Any]:
        self._run(session)["status"] = "cancelled"
        return self.status(session)


def test_a_stream_whose_session_the_host_dropped_ends_saying_so(make_runtime, serve_engine):
    class Dropping(ScriptedSessions):
        gone: set[str] = set()

        def _run(self, sid: str) -> dict[str, Any]:
            from wbcore_runtime.contract.errors import NotFound

            if sid in self.gone:
                raise NotFound(f"session {sid} ended and was dropped")
            return super()._run(sid)

        def events(self, session: str, *, after: int, timeout: float) -> list[dict[str, Any]]:
            got = super().events(session, after=after, timeout=timeout)
            if got:  # dropped from the host's memory once a client follows it
                self.gone.add(session)
            return got

    host = Dropping()
    eng = serve_engine(make_runtime(plugins=ENGINE), sessions=host)
    with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=30) as c:
        sid = c.post("/v1/sessions", json={"agent": "helper", "task": "t"}).json()["id"]
        with c.stream("GET", f"/v1/sessions/{sid}/events", params={"wait": 20}) as resp:
            got = read_sse(resp, 5)
    kinds = [e for e, _ in got]
    assert kinds[:2] == ["ready", "step"] and kinds[-1] == "end", got  # what it had, then the end
    assert got[-1][1]["status"] == "gone" and got[-1][1]["message"] == f"session {sid} ended and was dropped"


HELPER_ORG = "* Helper :agent:\n  :PROPERTIES:\n  :ID: helper2\n  :END:\n** System prompt\nBe brief.\n"


def test_a_definition_sent_as_org_is_read_by_the_agent_loop(make_runtime, serve_engine):
    host = ScriptedSessions()
    eng = serve_engine(make_runtime(plugins=[*ENGINE, "agent"]), sessions=host)
    with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=30) as c:
        made = c.post("/v1/sessions", json={"agent_org": HELPER_ORG, "task": "t"})
        assert made.status_code == 201 and host.runs[made.json()["id"]]["agent"] == "helper2"
        bad = c.post("/v1/sessions", json={"agent_org": "* not an agent\n", "task": "t"})
        assert bad.status_code == 400 and "agent" in bad.json()["message"], bad.text


def test_session_protocol_streams_events_and_keeps_a_review_queue(make_runtime, serve_engine, wbx):
    from wbcore_engine.sessions import SessionHost

    host = ScriptedSessions()
    assert isinstance(host, SessionHost)
    eng = serve_engine(make_runtime(plugins=ENGINE), sessions=host)
    with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=30) as c:
        created = c.post("/v1/sessions", json={"agent": "helper", "task": "count words"})
        assert created.status_code == 201 and created.json()["status"] == "running"
        sid = created.json()["id"]
        with c.stream("GET", f"/v1/sessions/{sid}/events", params={"wait": 20}) as resp:
            events = read_sse(resp, 4)
        kinds = [e for e, _ in events]
        assert kinds == ["ready", "step", "tool", "done", "end"], events
        assert events[-1][1]["status"] == "done"
        assert c.post(f"/v1/sessions/{sid}/review", json={"title": "check this"}).status_code == 201
        assert c.get(f"/v1/sessions/{sid}/review").json()["items"] == [{"title": "check this"}]
        assert c.get(f"/v1/sessions/{sid}/review").json()["items"] == []
        assert c.delete(f"/v1/sessions/{sid}").json()["status"] == "cancelled"
        assert c.get("/v1/sessions/nope").status_code == 404
        assert c.post("/v1/sessions", json={"task": "no agent"}).status_code == 400
        # the engine never reads a path it is sent: ids, or the definition itself
        for bad in ("/etc/passwd", "../x", "helper.org"):
            r = c.post("/v1/sessions", json={"agent": bad, "task": "t"})
            assert r.status_code == 400, bad
        # a definition sent as Org is read by the agent loop (wbcore-agent), not chosen here
        made = c.post("/v1/sessions", json={"agent_org": HELPER_ORG, "task": "t"})
        assert made.status_code == 501 and "pip install wbcore-agent" in made.json()["message"], made.text
    # the client command follows the same stream
    r = wbx("agent", "run", "helper", "say hi", "--engine", eng.url, "--token", eng.token,
            runtime=eng.runtime)
    assert r.exit_code == 0, r.stderr
    assert "[1] step: thinking about say hi" in r.stdout and r.stdout.rstrip().endswith(": done")


def test_a_real_session_streams_events_over_sse(make_runtime, serve_engine, tmp_path):
    """A scripted OpenAI-format model runs the real agent loop (wbcore-agent) in a session.
    Installed alone with the core (``dev.py isolated``) wbcore-engine has no loop: skipped."""
    for mod in ("wbcore_agent", "wbcore_llm_openai", "wbcore_wasmtime", "wbcore_brokers_state"):
        pytest.importorskip(mod,
                            reason=f"{mod} is not installed (the agent loop, a provider, the wasm engine)")
    from wbcore_engine.sessions import host_for
    from wbcore_testing.scripted_llm import ScriptedLlm, reply, tool

    with ScriptedLlm("openai") as llm:
        llm.script = [reply(tool("wb", op="list"), text="Looking."), reply(tool("done", result="listed"))]
        env = {"WB_LLM_BASE_URL": llm.base_url, "WB_LLM_API_KEY": "sk-engine-test-key"}
        rt = make_runtime(plugins=["engine", "http-server", "wasmtime", "agent", "act", "llm-openai",
                                   "brokers-state"], env=env)
        assert host_for(rt) is not None
        agent = tmp_path / "lister.org"
        agent.write_text("* Lister :agent:\n  :PROPERTIES:\n  :ID: lister\n  :MODEL: openai:scripted-model\n"
                         "  :END:\n** System prompt\nList the toolkits, then finish.\n")
        eng = serve_engine(rt)
        with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=60) as c:
            created = c.post("/v1/sessions",
                             json={"agent_org": agent.read_text(), "task": "list toolkits, then done"})
            assert created.status_code == 201, created.text
            with c.stream("GET", f"/v1/sessions/{created.json()['id']}/events", params={"wait": 60}) as resp:
                events = read_sse(resp, 50)
        kinds = [e for e, _ in events]
        assert kinds[0] == "ready" and "step" in kinds and kinds[-1] == "end", events
        assert events[-1][1]["data"]["status"] == "done"
        assert "sk-engine-test-key" not in json.dumps([d for _, d in events])


def test_ended_sessions_are_kept_within_engine_limits_and_a_dropped_one_is_404(make_runtime, serve_engine):
    """A long-running engine keeps only its newest ended sessions (EngineLimits.ended_sessions)."""
    for mod in ("wbcore_agent", "wbcore_llm_openai", "wbcore_wasmtime", "wbcore_brokers_state"):
        pytest.importorskip(mod,
                            reason=f"{mod} is not installed (the agent loop, a provider, the wasm engine)")
    from wbcore_engine.app import EngineLimits
    from wbcore_testing.scripted_llm import ScriptedLlm, reply

    with ScriptedLlm("openai") as llm:
        llm.default = reply(text="finished")
        env = {"WB_LLM_BASE_URL": llm.base_url, "WB_LLM_API_KEY": "sk-engine-test-key"}
        rt = make_runtime(plugins=["engine", "http-server", "wasmtime", "agent", "act", "llm-openai",
                                   "brokers-state"], env=env)
        org = ("* Sayer :agent:\n  :PROPERTIES:\n  :ID: sayer\n  :MODEL: openai:scripted-model\n"
               "  :END:\n** System prompt\nAnswer.\n")
        eng = serve_engine(rt, limits=EngineLimits(ended_sessions=2))
        ids = []
        with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=60) as c:
            for n in range(5):
                created = c.post("/v1/sessions", json={"agent_org": org, "task": f"task {n}"})
                assert created.status_code == 201, created.text
                ids.append(created.json()["id"])
                rt.agents.sessions.get(ids[-1]).wait(30)
            assert [s.id for s in rt.agents.sessions.list()] == ids[-2:]
            assert c.get(f"/v1/sessions/{ids[-1]}").json()["status"] == "done"
            gone = c.get(f"/v1/sessions/{ids[0]}")
            assert gone.status_code == 404, gone.text
            msg = gone.json()["message"]
            assert f"{ids[0]} ended (done) and was dropped" in msg and "the last 2 ended sessions" in msg
            assert "_steps.jsonl" in msg and f"instance agent-{ids[0]}" in msg
            assert c.get(f"/v1/sessions/{ids[0]}/events").status_code == 404


def test_serve_without_a_token_makes_one_and_prints_it(make_runtime, capsys, free_port):
    from wbcore_engine.cli import serve

    rt = make_runtime(plugins=ENGINE)
    port, ready, servers = free_port, threading.Event(), []
    thread = threading.Thread(target=serve, args=(rt,),
                              kwargs={"port": port, "ready": ready, "server_out": servers}, daemon=True)
    thread.start()
    try:
        assert ready.wait(20), "the engine did not start"
        err = capsys.readouterr().err
        token = err.split("WB_ENGINE_TOKEN to choose one): ", 1)[1].split()[0]
        assert len(token) >= 32 and f"http://127.0.0.1:{port}" in err
        url = f"http://127.0.0.1:{port}/v1/toolkits"
        assert httpx.get(url, timeout=10).status_code == 401
        assert httpx.get(url, headers={"authorization": f"Bearer {token}"}, timeout=10).status_code == 200
    finally:
        servers[0].should_exit = True
        thread.join(timeout=15)


def test_engine_cli_is_registered(wbx, make_runtime):
    r = wbx("engine", "serve", "--help", runtime=make_runtime(plugins=ENGINE))
    assert r.exit_code == 0 and "--allow-host" in r.stdout and "WB_ENGINE_TOKEN" in r.stdout


class LoopStandIn:
    """A test stand-in with the agent loop's documented session API (docs/agents.md,
    "Sessions": ``runtime.agents.sessions.start/get``, ``Session.poll/status/...``)."""

    class Session:
        def __init__(self, sid: str, agent: str, task: str) -> None:
            self.id, self.agent, self.cond = sid, agent, threading.Condition()
            self.evs: list[dict[str, Any]] = []
            self.state, self.review, self.taken = "running", [], 0
            threading.Thread(target=self._run, args=(task,), daemon=True).start()

        def _emit(self, type_: str, data: Any) -> None:
            with self.cond:
                self.evs.append({"seq": len(self.evs) + 1, "type": type_, "data": data, "t": time.time()})
                self.cond.notify_all()

        def _run(self, task: str) -> None:
            self._emit("started", {"id": self.id, "agent": self.agent, "task": task})
            time.sleep(0.05)
            self._emit("text", "Hello")
            self._emit("step", {"step": 1, "summary": "wb list", "tokens_in": 10})
            self.state = "done"
            self._emit("end", {"status": "done", "steps": 1})

        def poll(self, after: int = 0, timeout: float = 0.0) -> list[dict[str, Any]]:
            with self.cond:
                self.cond.wait_for(lambda: any(e["seq"] > after for e in self.evs) or self.state != "running",
                                   timeout=timeout)
                return [e for e in self.evs if e["seq"] > after]

        def status(self) -> dict[str, Any]:
            return {"id": self.id, "agent": self.agent, "status": self.state}

        def put_review(self, item: dict[str, Any]) -> int:
            self.review.append(item)
            return len(self.review)

        def take_review(self) -> dict[str, Any] | None:
            if self.taken >= len(self.review):
                return None
            self.taken += 1
            return self.review[self.taken - 1]

        def cancel(self) -> None:
            self.state = "cancelled"

    class Sessions:
        def __init__(self) -> None:
            self.all: dict[str, Any] = {}
            self.started_with: list[dict[str, Any]] = []

        def start(self, agent: str, task: str, **kw: Any) -> Any:
            self.started_with.append(kw)
            s = LoopStandIn.Session(f"run-{len(self.all) + 1}", agent, task)
            self.all[s.id] = s
            return s

        def get(self, sid: str) -> Any:
            from wbcore_runtime.contract.errors import NotFound

            if sid not in self.all:
                raise NotFound(f"no session {sid!r}")
            return self.all[sid]

    def __init__(self) -> None:
        self.sessions = LoopStandIn.Sessions()


def test_the_agent_loops_sessions_are_served_through_the_adapter(make_runtime, serve_engine, wbx):
    from wbcore_engine.sessions import LoopSessions, host_for

    rt = make_runtime(plugins=ENGINE)
    rt.agents = LoopStandIn()  # what the agent loop provides as Runtime.agents
    assert isinstance(host_for(rt), LoopSessions)
    eng = serve_engine(rt)
    with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=30) as c:
        refused = c.post("/v1/sessions", json={"agent": "a", "task": "t", "options": {"workdir": "/etc"}})
        assert refused.status_code == 400 and "cannot be set over HTTP" in refused.json()["message"]
        created = c.post("/v1/sessions",
                         json={"agent": "greeter", "task": "greet", "options": {"max_steps": 5}})
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        assert rt.agents.sessions.started_with[-1] == {"max_steps": 5}
        with c.stream("GET", f"/v1/sessions/{sid}/events", params={"wait": 20}) as resp:
            events = read_sse(resp, 4)
        assert [e for e, _ in events] == ["ready", "started", "text", "step", "end"]
        assert events[-1][1]["data"]["status"] == "done"
        # a client that reconnects with Last-Event-ID gets only what came after
        with c.stream("GET", f"/v1/sessions/{sid}/events", headers={"last-event-id": "2"}) as resp:
            again = read_sse(resp, 2)
        assert [e for e, _ in again] == ["ready", "step", "end"]
        assert (c.post(f"/v1/sessions/{sid}/review", json={"title": "look"}).json()
                == {"position": 1, "item": {"title": "look"}})
        assert c.get(f"/v1/sessions/{sid}/review").json()["items"] == [{"title": "look"}]
        assert c.get(f"/v1/sessions/{sid}/review").json()["items"] == []
    r = wbx("agent", "run", "greeter", "greet", "--engine", eng.url, "--token", eng.token, runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert "Hello" in r.stdout and "[3] step: wb list" in r.stdout and r.stdout.rstrip().endswith(": done")
