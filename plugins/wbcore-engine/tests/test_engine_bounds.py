"""The engine's bounds: its event streams capped per client (the HTTP server's stream gate over
the engine's SSE routes), bounded JSON, run options within their documented ranges, the
live-session cap, the Host check on a non-default loopback bind, a busy port, and no HTTP
server installed. The connection-level bounds themselves (a request's deadline, connection and
header caps, on both of uvicorn's protocols) are the HTTP server's: wbcore-http-server's tests."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from wbcore_runtime.contract.http_server import ServerLimits

ENGINE = ["engine", "audit-trail", "http-server"]
SMALL = ServerLimits(request_deadline_s=1.5, max_connections=64, max_connections_per_client=24,
                     max_streams=8, max_streams_per_client=3)


def _limits(**kw: Any) -> Any:
    from wbcore_engine.app import EngineLimits

    return EngineLimits(server=SMALL, **kw)


def test_streams_are_capped_per_client(make_runtime, serve_engine):
    eng = serve_engine(make_runtime(plugins=ENGINE), limits=_limits())
    with httpx.Client(timeout=10) as c:
        held = []
        try:
            for _ in range(SMALL.max_streams_per_client):
                cm = c.stream("GET", eng.url + "/v1/audit/events", headers=eng.auth, params={"wait": 10})
                resp = cm.__enter__()
                assert resp.status_code == 200
                held.append(cm)
            r = c.get(eng.url + "/v1/audit/events", headers=eng.auth, params={"wait": 10})
            assert (r.status_code == 503 and r.json()["error"] == "too-many-streams"
                    and r.headers["retry-after"])
            # other routes are not streams
            assert c.get(eng.url + "/v1/toolkits", headers=eng.auth).status_code == 200
        finally:
            for cm in held:
                cm.__exit__(None, None, None)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the server notices the streams ended
            r = c.get(eng.url + "/v1/audit/events", headers=eng.auth, params={"wait": 0.1})
            if r.status_code == 200:
                break
            time.sleep(0.1)
        assert r.status_code == 200


def test_deep_and_oversized_json_is_400_or_413_not_500(make_runtime, serve_engine):
    eng = serve_engine(make_runtime(plugins=ENGINE))
    with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=30) as c:
        r = c.post("/v1/calls/anything", content=b"[" * 1000 + b"]" * 1000)
        assert r.status_code == 400 and "1000 levels deep" in r.json()["message"]
        r = c.post("/v1/calls/anything", content=b'{"argv": [' + b'"x",' * (1_100_000) + b'"x"]}')
        assert r.status_code == 413
        assert c.get("/v1/toolkits").status_code == 200


class _Hold:
    """A session host whose runs stay 'running' until cancelled (the live-session cap)."""

    def __init__(self) -> None:
        self.runs: dict[str, str] = {}
        self.lock = threading.Lock()

    def create(self, *, agent: Any, task: str, options: Any) -> str:
        with self.lock:
            sid = f"h{len(self.runs) + 1}"
            self.runs[sid] = "running"
            return sid

    def status(self, session: str) -> dict[str, Any]:
        from wbcore_runtime.contract.errors import NotFound

        if session not in self.runs:
            raise NotFound(f"no session {session!r}")
        return {"id": session, "status": self.runs[session]}

    def events(self, session: str, *, after: int, timeout: float) -> list[dict[str, Any]]:
        return []

    def put_review(self, session: str, item: Any) -> dict[str, Any]:
        return dict(item)

    def take_review(self, session: str, *, limit: int) -> list[Any]:
        return []

    def cancel(self, session: str) -> dict[str, Any]:
        self.runs[session] = "cancelled"
        return self.status(session)


@pytest.mark.parametrize(("options", "says"), [
    ({"max_steps": 0}, "'max_steps' = 0 is outside 1..200"),
    ({"max_steps": 10**9}, "outside 1..200"),
    ({"tool_timeout": -1}, "'tool_timeout' = -1 is outside 0.1..600"),
    ({"tool_timeout": 1e308}, "outside 0.1..600"),
    ({"max_calls": 257}, "'max_calls' = 257 is outside 1..256"),
    ({"tool_timeout": "5"}, "wrong type"),
    ({"max_steps": True}, "wrong type"),
    ({"model": ""}, "1..200 characters"),
    ({"workdir": "/"}, "cannot be set over HTTP"),
])
def test_run_options_outside_their_range_are_400(make_runtime, serve_engine, options, says):
    host = _Hold()
    eng = serve_engine(make_runtime(plugins=ENGINE), sessions=host)
    r = httpx.post(eng.url + "/v1/sessions", headers=eng.auth, timeout=10,
                   json={"agent": "helper", "task": "t", "options": options})
    assert r.status_code == 400 and says in r.json()["message"], r.text
    assert host.runs == {}  # refused before any session started


def test_live_sessions_are_capped(make_runtime, serve_engine):
    host = _Hold()
    eng = serve_engine(make_runtime(plugins=ENGINE), sessions=host,
                       limits=_limits(max_sessions=3))
    with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=10) as c:
        made = [c.post("/v1/sessions", json={"agent": "helper", "task": "t", "options": {"max_steps": 5}})
                for _ in range(3)]
        assert [m.status_code for m in made] == [201, 201, 201]
        r = c.post("/v1/sessions", json={"agent": "helper", "task": "t"})
        assert r.status_code == 429 and "3 sessions are running" in r.json()["message"]
        c.delete(f"/v1/sessions/{made[0].json()['id']}")
        assert c.post("/v1/sessions", json={"agent": "helper", "task": "t"}).status_code == 201


def test_an_engine_on_another_loopback_address_accepts_its_own_host(make_runtime, serve_engine):
    eng = serve_engine(make_runtime(plugins=ENGINE), bind="127.0.0.2")
    assert eng.url.startswith("http://127.0.0.2:")
    with httpx.Client(headers=eng.auth, timeout=10) as c:
        assert c.get(eng.url + "/v1/toolkits").status_code == 200  # Host: 127.0.0.2:<port>
        assert c.get(eng.url + "/v1/toolkits", headers={"host": "127.0.0.2"}).status_code == 200
        assert c.get(eng.url + "/v1/toolkits", headers={"host": "127.0.0.3"}).status_code == 421


def test_a_busy_port_is_refused_before_any_banner(tmp_path) -> None:
    """`wbx engine serve` on a port something already listens on says so and exits 2; it never
    prints "serving on" first (it used to, then uvicorn exited 3)."""
    from wbcore_testing.fixtures import serve_on_a_busy_port

    port, r = serve_on_a_busy_port("engine", "serve", home=tmp_path / "home")
    assert r.returncode == 2, r.stderr
    assert f"port {port} on 127.0.0.1 is already in use" in r.stderr and "--port" in r.stderr
    assert "serving on" not in r.stderr + r.stdout


def test_serve_without_an_http_server_names_the_distribution_to_install(wbx, make_runtime) -> None:
    """The HTTP server is a service (wbcore-http-server): with none served, `wbx engine serve`
    says what to install, before it binds or prints anything."""
    rt = make_runtime(plugins=["engine", "install", "audit-trail"])  # no http-server
    r = wbx("engine", "serve", "--port", "0", runtime=rt)
    assert r.exit_code == 127, r.stderr
    assert "no HTTP server is installed; pip install wbcore-http-server" in r.stderr
    assert "serving on" not in r.stderr + r.stdout
