"""The engine console (/console): login, CSRF on every form, Host/Origin, no secret shown,
grant/revoke with a confirmation, review decisions, audit paging. Fast: httpx, no browser
(test_console_browser.py drives chromium)."""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from wbcore_engine import console
from wbcore_runtime.trust import signing
from wbcore_testing.fixtures import write_toolkit

SEED0 = base64.b64encode(bytes(32)).decode()
SECRET = "sk-console-secret-value-0123"

#: The engine and the plugins its routes ask the runtime for (push: the installer; audit: the reader).
ENGINE = ["engine", "install", "audit-trail", "http-server"]


def _hidden(html: str, name: str) -> str:
    m = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert m, f"no hidden {name} in the page"
    return m.group(1)


def login(c: httpx.Client, token: str) -> str:
    """Log in through the form; returns the page CSRF token."""
    page = c.get("/console/login")
    assert page.status_code == 200
    r = c.post("/console/login", data={"login_csrf": _hidden(page.text, "login_csrf"), "token": token,
                                       "next": "/console/toolkits"})
    assert r.status_code == 303 and r.headers["location"] == "/console/toolkits", r.text
    return _hidden(c.get("/console/toolkits").text, "csrf")


class Host:
    """A session host with a review queue that keeps decisions (the protocol's optional ops)."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = [{"title": "publish the report", "body": "ready"}]
        self.decided: dict[int, dict[str, Any]] = {}
        self.runs: dict[str, dict[str, Any]] = {}

    def create(self, *, agent: Any, task: str, options: Any) -> str:
        sid = f"s{len(self.runs) + 1}"
        self.runs[sid] = {"id": sid, "agent": agent, "status": "running", "step": 0}
        return sid

    def status(self, session: str) -> dict[str, Any]:
        from wbcore_runtime.contract.errors import NotFound

        if session not in self.runs:
            raise NotFound(f"no session {session}")
        return dict(self.runs[session])

    def events(self, session: str, *, after: int, timeout: float) -> list[dict[str, Any]]:
        evs = [{"seq": 1, "type": "step", "t": time.time(),
                "data": {"step": 1, "text": "Listing.",
                         "tool_calls": [{"id": "c1", "name": "wb", "arguments": {"op": "list"}}],
                         "results": [{"id": "c1", "name": "wb", "ok": True, "text": "[]", "ms": 3.0}]}}]
        return [e for e in evs if e["seq"] > after]

    def put_review(self, session: str, item: Any) -> Any:
        self.items.append(dict(item))
        return item

    def take_review(self, session: str, *, limit: int) -> list[Any]:
        return []

    def cancel(self, session: str) -> dict[str, Any]:
        self.runs[session]["status"] = "cancelled"
        return self.status(session)

    def review_items(self, session: str) -> list[dict[str, Any]]:
        return [{"position": i, "item": it, "decision": self.decided.get(i)}
                for i, it in enumerate(self.items)]

    def decide_review(self, session: str, position: int, decision: str, note: str) -> dict[str, Any]:
        self.decided[position] = {"decision": decision, "note": note}
        return self.decided[position]


@pytest.fixture
def served(tmp_path, monkeypatch, make_runtime, serve_engine, wb_home):
    """An engine with a signed third-party toolkit 'tp' (requests net and kv) and a session host."""
    monkeypatch.setenv("WB_SIGNING_KEY", SEED0)
    from wbcore_runtime.trust import identity

    root = tmp_path / "tks"
    d = write_toolkit(root, "tp", trust="third-party", caps="net kv",
                      files={"bin/tool.wasm": b"\0asm\x01\0\0\0"})
    signing.sign(d, identity.Identity.from_seed(bytes(32)))
    host = Host()
    rt = make_runtime(plugins=ENGINE, roots=[root, wb_home / "toolkits"],
                      env={"SOME_API_KEY": SECRET})
    eng = serve_engine(rt, sessions=host)
    with httpx.Client(base_url=eng.url, timeout=30) as c:
        csrf = login(c, eng.token)
        host_sid = c.post("/console/sessions", data={"csrf": csrf, "agent": "helper", "task": "t"})
        assert host_sid.status_code == 303
    return eng, host, wb_home


#: Every state-changing form of the console, with a body that would be accepted.
FORMS = {
    "/console/logout": {},
    "/console/toolkits/{ident}/{action:str}": {"caps": "net", "confirm": "1"},
    "/console/push": {"staged": "x"},
    "/console/sessions": {"agent": "helper", "task": "again"},
    "/console/sessions/{sid}/cancel": {},
    "/console/review/{sid}/{pos}": {"decision": "approved", "note": "fine"},
    "/console/audit/verify": {},
}
CONCRETE = {"/console/toolkits/{ident}/{action:str}": "/console/toolkits/tp/grant",
            "/console/sessions/{sid}/cancel": "/console/sessions/s1/cancel",
            "/console/review/{sid}/{pos}": "/console/review/s1/0"}
GETS = ["/console/toolkits", "/console/toolkits/tp", "/console/push", "/console/sessions",
        "/console/sessions/s1", "/console/review", "/console/audit", "/console/pipelines"]


def test_every_form_is_listed_here():
    posts = {console.PREFIX + path for path, methods, _, _ in console.ROUTES if "POST" in methods}
    assert posts - {"/console/login"} == set(FORMS), "a console form without CSRF/Origin/token tests"


def _state(home: Path) -> tuple[bytes | None, int]:
    consent = home / "consent.json"
    return (consent.read_bytes() if consent.exists() else None), len(Host().items)


def test_without_login_every_page_only_says_the_token_is_needed(served):
    eng, host, _ = served
    with httpx.Client(base_url=eng.url, timeout=30) as c:
        for path in GETS + ["/console/sessions/s1/events", "/console/audit/events"]:
            r = c.get(path)
            assert r.status_code == 401, path
            assert "token is needed" in r.text, path
            # nothing of the engine's: no table, no toolkit's caps, no session, no form but the link to log in
            assert "<table" not in r.text and "net kv" not in r.text and "<form" not in r.text, path
        for path in FORMS:
            r = c.post(CONCRETE.get(path, path), data={**FORMS[path], "csrf": "guess"})
            assert r.status_code == 401, path
        # a console login cookie that was never issued is no login
        c.cookies.set(console.COOKIE, "made-up", path="/console")
        assert c.get("/console/toolkits").status_code == 401
    assert not host.decided and host.runs["s1"]["status"] == "running"


def test_every_form_refuses_a_missing_or_wrong_csrf_token_and_changes_nothing(served):
    eng, host, home = served
    before = _state(home)
    with httpx.Client(base_url=eng.url, timeout=30) as c:
        csrf = login(c, eng.token)
        with httpx.Client(base_url=eng.url, timeout=30) as other:  # another login's token is not this one's
            other_csrf = login(other, eng.token)
        for path, body in FORMS.items():
            url = CONCRETE.get(path, path)
            for bad in ({}, {"csrf": ""}, {"csrf": csrf + "x"}, {"csrf": other_csrf}):
                r = c.post(url, data={**body, **bad})
                assert r.status_code == 403 and "CSRF" in r.text, (url, bad, r.status_code)
        # still logged in, nothing changed
        assert c.get("/console/toolkits").status_code == 200
    assert _state(home) == before and not host.decided and host.runs["s1"]["status"] == "running"
    assert len(host.runs) == 1


def test_every_page_and_form_keeps_the_engines_host_and_origin_rules(served):
    eng, host, home = served
    with httpx.Client(base_url=eng.url, timeout=30) as c:
        csrf = login(c, eng.token)
        for path in GETS + ["/console/login"]:
            assert c.get(path, headers={"host": "evil.example"}).status_code == 421, path
            assert c.get(path, headers={"origin": "http://evil.example"}).status_code == 403, path
        for path, body in FORMS.items():
            url = CONCRETE.get(path, path)
            r = c.post(url, data={**body, "csrf": csrf}, headers={"origin": "http://evil.example"})
            assert r.status_code == 403 and "invalid-origin" in r.text, url
            r = c.post(url, data={**body, "csrf": csrf}, headers={"host": "rebound.example"})
            assert r.status_code == 421, url
        # the login form too: a page of another site cannot post the token for you
        page = c.get("/console/login")
        r = c.post("/console/login",
                   data={"login_csrf": _hidden(page.text, "login_csrf"), "token": eng.token},
                   headers={"origin": "http://evil.example"})
        assert r.status_code == 403
    assert not host.decided and host.runs["s1"]["status"] == "running" and len(host.runs) == 1


def test_login_takes_the_engine_token_once_and_keeps_only_an_http_only_cookie(served):
    eng, _, _ = served
    with httpx.Client(base_url=eng.url, timeout=30) as c:
        page = c.get("/console/login")
        login_csrf = _hidden(page.text, "login_csrf")
        # the login form's own CSRF (double submit): a post without the cookie's twin is refused
        assert c.post("/console/login", data={"login_csrf": "other", "token": eng.token}).status_code == 403
        wrong = c.post("/console/login", data={"login_csrf": login_csrf, "token": "not-the-token-at-all"})
        assert wrong.status_code == 401 and "not this engine" in wrong.text
        ok = c.post("/console/login", data={"login_csrf": login_csrf, "token": eng.token})
        assert ok.status_code == 303
        cookie = next(h for h in ok.headers.get_list("set-cookie") if h.startswith(console.COOKIE + "="))
        low = cookie.lower()
        assert "httponly" in low and "samesite=strict" in low and "path=/console" in low
        assert eng.token not in cookie
        for path in GETS:
            r = c.get(path)
            assert r.status_code == 200, (path, r.text[:300])
            assert eng.token not in r.text and SECRET not in r.text, path
            assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        # the cookie is the console's: the API still wants the bearer token
        assert c.get("/v1/toolkits").status_code == 401
        # logging out ends the login
        csrf = _hidden(c.get("/console/toolkits").text, "csrf")
        assert c.post("/console/logout", data={"csrf": csrf}).status_code == 303
        c.cookies.set(console.COOKIE, cookie.split(";")[0].split("=", 1)[1], path="/console")
        assert c.get("/console/toolkits").status_code == 401
        # a login goes back only to a console page, never another site
        page = c.get("/console/login")
        r = c.post("/console/login", data={"login_csrf": _hidden(page.text, "login_csrf"), "token": eng.token,
                                           "next": "//evil.example/x"})
        assert r.headers["location"] == "/console/toolkits"


def test_grant_shows_what_changes_then_grants_and_audits_and_revoke_withdraws(served):
    eng, _, home = served
    with httpx.Client(base_url=eng.url, timeout=30) as c:
        csrf = login(c, eng.token)
        page = c.get("/console/toolkits/tp").text
        assert "✓" in page and "net kv" in page
        preview = c.post("/console/toolkits/tp/grant", data={"csrf": csrf, "caps": "net"})
        assert (preview.status_code == 200
                and '<tr class="add"><th>+</th><td class="mono">net</td>' in preview.text)
        assert 'id="effective-after">net<' in preview.text  # what the grant would leave in force
        assert not (home / "consent.json").exists()  # the confirmation changed nothing
        done = c.post("/console/toolkits/tp/grant", data={"csrf": csrf, "caps": "net", "confirm": "1"})
        assert done.status_code == 303
        shown = c.get(done.headers["location"]).text
        assert 'id="granted">net' in shown
        # a cap the toolkit does not request is refused by the one grant decision, with the reason
        bad = c.post("/console/toolkits/tp/grant", data={"csrf": csrf, "caps": "exec", "confirm": "1"})
        assert bad.status_code == 400 and "exec" in bad.text
        audit = c.get("/console/audit", params={"cap": "consent"}).text
        assert "grant" in audit and "tp:net" in audit
        rev = c.post("/console/toolkits/tp/revoke", data={"csrf": csrf, "caps": "net"})
        assert '<tr class="del"><th>−</th><td class="mono">net</td>' in rev.text
        assert c.post("/console/toolkits/tp/revoke",
                      data={"csrf": csrf, "caps": "net", "confirm": "1"}).status_code == 303
        assert 'id="granted">none' in c.get("/console/toolkits/tp").text


def test_review_decision_reaches_the_host_and_audit_pages_older_lines(served):
    eng, host, _ = served
    rt = eng.runtime
    for i in range(120):
        rt.dock.audit.record(principal=f"tk{i % 3}", cap="net", op="fetch", args_digest="", outcome="allowed")
    with httpx.Client(base_url=eng.url, timeout=30) as c:
        csrf = login(c, eng.token)
        step = c.get("/console/sessions/s1").text  # each tool call: its input, output and time
        assert "<td>wb</td>" in step and "&#34;op&#34;: &#34;list&#34;" in step and "3.0 ms" in step
        assert "publish the report" in c.get("/console/review").text
        r = c.post("/console/review/s1/0", data={"csrf": csrf, "decision": "approved", "note": "ship it"})
        assert r.status_code == 303 and host.decided[0] == {"decision": "approved", "note": "ship it"}
        assert "approved: ship it" in c.get("/console/review").text
        assert c.post("/console/review/s1/0", data={"csrf": csrf, "decision": "maybe"}).status_code == 400
        # cancel, from the session's page
        assert c.post("/console/sessions/s1/cancel", data={"csrf": csrf}).status_code == 303
        assert host.runs["s1"]["status"] == "cancelled" and "cancelled" in c.get("/console/sessions").text
        # a session started over the API is listed too
        api = httpx.post(eng.url + "/v1/sessions", json={"agent": "helper", "task": "from the API"},
                         headers=eng_auth(eng), timeout=30)
        assert api.status_code == 201 and api.json()["id"] in c.get("/console/sessions").text
        first = c.get("/console/audit").text
        older = re.search(r'before=(\d+)" rel="next"', first)
        assert older, "no link to older lines"
        second = c.get(f"/console/audit?before={older.group(1)}").text
        seqs = lambda html: [int(s) for s in re.findall(r"<tr class=\"[a-z]*\"><td>(\d+)</td>", html)]  # noqa: E731
        assert seqs(first) and seqs(second) and max(seqs(second)) < min(seqs(first))
        only = c.get("/console/audit", params={"toolkit": "tk1"}).text
        assert "tk1" in only and "tk2" not in only
        assert c.get("/console/audit", params={"before": "x"}).status_code == 400
        # the chain's verify status
        assert c.post("/console/audit/verify", data={"csrf": csrf}).status_code == 303
        assert "the chain holds" in c.get("/console/audit").text


def test_a_console_form_body_is_bounded(served):
    eng, _, _ = served
    with httpx.Client(base_url=eng.url, timeout=30) as c:
        csrf = login(c, eng.token)
        r = c.post("/console/sessions",
                   data={"csrf": csrf, "agent": "a", "task": "x" * (console.MAX_FORM + 1)})
        assert r.status_code == 413


def test_push_shows_the_dry_run_diff_before_landing(tmp_path, served):
    from wbcore_cli import engine_client
    from wbcore_runtime.trust import identity

    eng, _, home = served
    src = tmp_path / "push-src"
    d = write_toolkit(src, "newtk", trust="third-party", caps="net",
                      files={"bin/tool.wasm": b"\0asm\x01\0\0\0"})
    signing.sign(d, identity.Identity.from_seed(bytes(32)))
    archive = engine_client.toolkit_archive(d, "newtk")
    with httpx.Client(base_url=eng.url, timeout=60) as c:
        csrf = login(c, eng.token)
        files = {"archive": ("newtk.tar.gz", archive, "application/gzip")}
        # the upload form carries the CSRF token too
        assert c.post("/console/push", data={"csrf": "nope"}, files=files).status_code == 403
        preview = c.post("/console/push", data={"csrf": csrf}, files=files)
        assert preview.status_code == 200 and "newtk" in preview.text and 'id="land"' in preview.text
        assert not (home / "toolkits" / "newtk").exists()  # the dry run landed nothing
        landed = c.post("/console/push", data={"csrf": csrf, "staged": _hidden(preview.text, "staged")})
        assert landed.status_code == 200 and "newtk" in landed.text
        assert (home / "toolkits" / "newtk").is_dir()
        # a staged archive lands once
        again = c.post("/console/push", data={"csrf": csrf, "staged": _hidden(preview.text, "staged")})
        assert again.status_code == 400 and "upload it again" in again.text
        audit = c.get("/console/audit", params={"cap": "engine"}).text
        assert "push" in audit and "allowed" in audit


def test_a_pipeline_runs_stages_timings_and_failure_are_shown(served):
    # the console only reads run folders; making a real run needs the plugin that runs pipelines
    pytest.importorskip("wbcore_fabric_local", reason="pipelines are served by wbcore-fabric-local")
    from wbcore_fabric_local.pipeline import Pipeline

    eng, _, _ = served
    # a real run (its box is not installed here: the run fails at stage 0 and says why)
    res = Pipeline.named("shout", "no-such-box").run(eng.runtime, b"hello", timeout=30)
    assert not res.success and res.folder is not None
    with httpx.Client(base_url=eng.url, timeout=30) as c:
        login(c, eng.token)
        listing = c.get("/console/pipelines").text
        assert res.run_id in listing and "✗ failed" in listing
        run = c.get(f"/console/pipelines/{res.run_id}").text
        assert "no-such-box" in run and "unknown command" in run and " s</span>" in run
        assert c.get("/console/pipelines/nope").status_code == 404
        assert c.get("/console/pipelines/..%2Fetc").status_code in (400, 404)


def test_console_streams_share_the_engines_per_client_stream_cap(make_runtime, serve_engine):
    from wbcore_engine.app import EngineLimits
    from wbcore_runtime.contract.http_server import ServerLimits

    eng = serve_engine(make_runtime(plugins=ENGINE),
                       limits=EngineLimits(server=ServerLimits(max_streams_per_client=1), heartbeat_s=0.2))
    with httpx.Client(base_url=eng.url, timeout=30) as c:
        login(c, eng.token)
        # a stream's ?wait= is the API's, bounded the same way
        assert c.get("/console/audit/events", params={"wait": 999999}).status_code == 400
        with c.stream("GET", "/console/audit/events", params={"wait": 5}) as first:
            assert first.status_code == 200 and first.headers["content-type"].startswith("text/event-stream")
            lines = first.iter_lines()  # kept: a dropped line iterator closes the connection
            assert next(lines).startswith("event: ready")
            # a second stream from this client, console or API, is past the cap
            second = c.get("/console/audit/events", params={"wait": 1})
            assert second.status_code == 503, second.text[:500]
            assert c.get("/v1/audit/events", params={"wait": 1}, headers=eng_auth(eng)).status_code == 503


def eng_auth(eng: Any) -> dict[str, str]:
    return {"authorization": f"Bearer {eng.token}"}


def test_a_chunked_push_upload_is_refused_as_it_passes_the_cap(make_runtime, serve_engine):
    """A multipart upload without Content-Length: its file part is counted while it arrives
    (starlette caps form fields, not files, which it spools to disk): one past the push cap is
    answered 413 at once, not read on until the client stops or the request deadline."""
    import socket

    from wbcore_engine.app import EngineLimits
    from wbcore_runtime.contract.http_server import ServerLimits

    limits = EngineLimits(max_push=1 << 20, server=ServerLimits(request_deadline_s=25))
    eng = serve_engine(make_runtime(plugins=["engine", "audit-trail", "http-server"]), limits=limits)
    with httpx.Client(base_url=eng.url, timeout=30) as c:
        csrf = login(c, eng.token)
        cookie = "; ".join(f"{k}={v}" for k, v in c.cookies.items())
    host, port = eng.url.removeprefix("http://").split(":")
    head = (b"--b\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\n" + csrf.encode()
            + b"\r\n--b\r\nContent-Disposition: form-data; name=\"archive\"; filename=\"t.tar.gz\"\r\n"
            b"Content-Type: application/gzip\r\n\r\n")

    def chunk(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"POST /console/push HTTP/1.1\r\nHost: {host}:{port}\r\nCookie: {cookie}\r\n"
                  f"Origin: {eng.url}\r\nContent-Type: multipart/form-data; boundary=b\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n".encode() + chunk(head))
        for _ in range(18):  # just past the cap (1 MiB + 64 KiB), the body left unfinished
            s.sendall(chunk(b"\0" * (64 << 10)))
        t0 = time.monotonic()
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert time.monotonic() - t0 < 10


def test_a_count_is_read_alike_by_the_api_and_the_console(served):
    """Counts and sequence numbers (``?tail``, ``?limit``, ``?after``, ``Last-Event-ID``, the
    console's ``page``, ``max_steps``) go through one parser: a fraction or an exponent is refused
    by both doors (the API once truncated ``1.5`` to 1 where the console refused it), a
    Last-Event-ID byte that looks like a digit (``²``) is a 400, not an internal error, and a
    run option's range is the run options' own, whichever door started it."""
    eng, host, _ = served
    with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=30) as api:
        for query in ("tail=1.5", "tail=1e1", "after=0.5", "after=" + "9" * 5000):
            r = api.get(f"/v1/audit?{query}")
            assert r.status_code == 400 and "is not a whole number" in r.json()["message"], (query, r.text)
        r = api.get("/v1/audit?tail=1001")
        assert r.status_code == 400 and r.json()["message"] == "?tail=1001 is outside 1..1000"
        assert api.get("/v1/audit?tail=2").status_code == 200
        r = api.get("/v1/sessions/s1/review?limit=2.5")
        assert r.status_code == 400 and r.json()["message"] == "?limit='2.5' is not a whole number"
        r = api.get("/v1/audit/events?wait=0.1", headers={"last-event-id": b"\xb2"})
        assert r.status_code == 400 and "Last-Event-ID='²' is not a whole number" in r.json()["message"]
        r = api.get("/v1/sessions/s1/events?wait=0.1", headers={"last-event-id": "0"})
        assert r.status_code == 200  # a reconnecting client's own id is read as before
    with httpx.Client(base_url=eng.url, timeout=30) as c:
        csrf = login(c, eng.token)
        r = c.get("/console/toolkits?page=1.5")
        assert r.status_code == 400 and "is not a whole number" in r.text
        r = c.post("/console/sessions", data={"csrf": csrf, "agent": "helper", "task": "t", "max_steps": "0"})
        assert r.status_code == 400 and "= 0 is outside 1..200" in r.text, r.text
