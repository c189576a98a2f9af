"""What a fresh home serves: unbuilt toolkits listed and built on first call, the skills
extension declared and answered, and the HTTP transport's token and Host/Origin checks."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
pytest.importorskip("wasmtime")

import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_fixtures import DATA

from wbcore_testing.fixtures import manifest_text, write_toolkit

SERVE = [sys.executable, "-c", "from wbcore_cli.app import run; run()", "mcp", "serve"]
TOKEN = "t0ken-for-the-door-test-0123456789"


def _lazy_toolkits(root: Path) -> None:
    """A buildable command (the wat lane), a kernel, and one whose lane does not exist."""
    write_toolkit(root, "lazycat",
                  manifest_text("lazycat", exec="command", tagline="Echo text, built on demand.",
                                                 extra={"BUILD_LANG": "wat", "BUILD_SRC": "path:src/echo.wat",
                                                        "CLI_BIN": "lcat"}),
                  files={"src/echo.wat": (DATA / "echo.wat").read_text()})
    write_toolkit(root, "lazyup",
                  manifest_text("lazyup", exec="kernel", tagline="Upper-case bytes, built on demand.",
                                                extra={"BUILD_LANG": "wat", "BUILD_SRC": "path:src/upper.wat",
                                                       "CLI_BIN": "lup", "KERNEL_TIMEOUT": "5"}),
                  files={"src/upper.wat": (DATA / "upper.wat").read_text()})
    write_toolkit(root, "nolane", manifest_text("nolane", exec="command",
                                                extra={"BUILD_LANG": "cobol", "BUILD_SRC": "path:src",
                                                       "CLI_BIN": "nl"}),
                  files={"src/main.cob": "IDENTIFICATION DIVISION.\n"})


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def test_unbuilt_toolkits_are_listed_and_built_on_first_call(make_runtime, toolkit_root: Path) -> None:
    from wbcore_mcp.server import build_server

    _lazy_toolkits(toolkit_root)
    rt = make_runtime()
    server = build_server(rt)
    provider = server.wb_provider
    assert {"lazycat.lcat", "lazyup.lup"} <= set(provider.tools())
    assert not any(n.startswith("nolane")
                   for n in provider.tools()), "a toolkit whose lane is missing is absent"
    assert set(provider.pending) == {"lazycat.lcat", "lazyup.lup"}
    assert rt.registry.lookup("command", "lcat") is None
    why = {u.toolkit: u.reason for u in provider.unserved()}
    assert "cobol" in why["nolane"]

    progress: list[str] = []
    changed: list[bool] = []

    async def main() -> None:
        async with Client(server, mode="legacy",
                          message_handler=lambda m: _note_change(m, changed)) as client:
            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                progress.append(message or "")

            r = await client.call_tool("lazycat.lcat", {"stdin": "built on demand"},
                                       progress_callback=on_progress)
            assert not r.is_error and _text(r) == "built on demand"
            r = await client.call_tool("lazyup.lup", {"input": "abc"})
            assert not r.is_error and _text(r) == "ABC"
            listed = {t.name for t in (await client.list_tools()).tools}
            assert {"lazycat.lcat", "lazyup.lup"} <= listed

    anyio.run(main)
    assert any(m.startswith("building lazycat: [register]") for m in progress), progress
    assert rt.registry.lookup("command", "lcat") is not None and not provider.pending
    assert changed, "no notifications/tools/list_changed after a build"


def test_an_act_call_of_an_unbuilt_tool_builds_it_first(make_runtime, toolkit_root: Path) -> None:
    import cbor2

    from wbcore_mcp.server import build_server
    from wbcore_runtime.contract.tools import Metadata, ToolCall

    _lazy_toolkits(toolkit_root)
    rt = make_runtime()
    provider = build_server(rt).wb_provider
    assert "lazyup.lup" in provider.pending
    bad = provider.call_tool(ToolCall("lazyup.lup", cbor2.dumps([1])))
    assert bad.error is not None and "must be a map" in bad.error.text and "lazyup.lup" in provider.pending
    out = provider.call_tool(ToolCall("lazyup.lup", cbor2.dumps({"input": "abc"}),
                                      Metadata({"std:timeout-ms": 30_000})))
    assert out.error is None and out.text() == "ABC"
    assert rt.registry.lookup("kernel", "lup") is not None and "lazyup.lup" not in provider.pending


async def _note_change(message: Any, seen: list[bool]) -> None:
    root = getattr(message, "root", message)
    if isinstance(root, types.ToolListChangedNotification):
        seen.append(True)


def test_registered_only_lists_no_unbuilt_toolkit(make_runtime, toolkit_root: Path) -> None:
    from wbcore_mcp.server import build_server

    _lazy_toolkits(toolkit_root)
    server = build_server(make_runtime(), build_missing=False)
    assert not any(n.startswith("lazy") for n in server.wb_provider.tools())


def test_mcp_tools_all_shows_why_a_toolkit_is_absent(make_runtime, toolkit_root: Path, wbx) -> None:
    _lazy_toolkits(toolkit_root)
    rt = make_runtime()
    r = wbx("mcp", "tools", "--all", runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert "lazycat.lcat · command · read-only · unbuilt (built on first call)" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("nolane · not served · "))
    assert "cobol" in line
    data = json.loads(wbx("mcp", "tools", "--all", "--json", runtime=rt).stdout)
    assert "lazyup.lup" in data["unbuilt"] and any(u["toolkit"] == "nolane" for u in data["unserved"])
    plain = wbx("mcp", "tools", runtime=rt)
    assert "nolane" not in plain.stdout and "wbx mcp tools --all says why" in plain.stderr


def test_build_at_start_builds_every_pending_toolkit(make_runtime, toolkit_root: Path) -> None:
    import io

    from wbcore_mcp.server import build_all, build_server

    _lazy_toolkits(toolkit_root)
    rt = make_runtime()
    server = build_server(rt)
    out = io.StringIO()
    done = dict(build_all(server, out=out))
    assert done == {"lazycat": None, "lazyup": None}
    assert "wbx mcp: building lazycat" in out.getvalue() and "lazyup: built" in out.getvalue()
    assert not server.wb_provider.pending and "lazycat.lcat" in server.wb_provider.tools()


def test_skills_extension_is_declared_and_answers(make_runtime, toolkit_root: Path) -> None:
    from wbcore_mcp.server import SKILLS_EXTENSION, build_server, skills_models

    write_toolkit(toolkit_root, "notes-kit", skills={"overview": "#+TITLE: Notes\nHow to keep notes.\n",
                                                     "search": "#+TITLE: Search\nFind a note.\n"})
    server = build_server(make_runtime())
    _, _, list_result, get_result = skills_models()

    async def main() -> None:
        async with Client(server) as client:
            caps = client.server_capabilities
            assert caps.extensions is not None and SKILLS_EXTENSION in caps.extensions
            assert caps.resources is not None  # the extension needs resources
            listed = await client.session.send_request(
_raw("skills/list", {}), list_result)
            entry = next(s for s in listed.skills if s["frontmatter"]["name"] == "notes-kit")
            assert entry["uri"] == "skill://notes-kit/SKILL.md"
            uris = [f["uri"] for f in entry["resources"]]
            assert uris[0] == entry["uri"] and "skill://notes-kit/search" in uris
            for f in entry["resources"]:  # every digest is of the bytes resources/read returns
                body = (await client.read_resource(f["uri"])).contents[0].text.encode()
                assert f["digest"] == "sha256:" + hashlib.sha256(body).hexdigest() and f["size"] == len(body)
            md = (await client.read_resource(entry["uri"])).contents[0]
            assert md.mime_type == "text/markdown" and md.text.startswith("---\nname: notes-kit\n")
            got = await client.session.send_request(_raw("skills/get", {"uri": entry["uri"]}), get_result)
            assert got.skill == entry
            with pytest.raises(MCPError) as err:
                await client.session.send_request(_raw("skills/get", {"uri": "skill://nope/SKILL.md"}),
                                                  get_result)
            assert err.value.code == types.INVALID_PARAMS

        # 2025-11-25: the SDK's schema has no `extensions`
        async with Client(server, mode="legacy") as client:
            assert SKILLS_EXTENSION in (client.server_capabilities.experimental or {})
            # a first call's build changes the list
            assert client.server_capabilities.tools.list_changed is True

    anyio.run(main)


def _raw(method: str, params: dict[str, Any]) -> Any:
    from typing import Literal

    class Raw(types.Request[dict[str, Any], Literal[method]]):  # type: ignore[valid-type]
        pass

    return Raw(method=method, params=params)


# --- HTTP: token, Host, Origin ---------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server(toolkit_root: Path, wb_home: Path) -> Any:
    from mcp_fixtures import populate

    populate(toolkit_root, wb_home)
    port = _free_port()
    env = {**os.environ, "WB_HOME": str(wb_home), "WB_TOOLKITS_ROOT": str(toolkit_root),
           "WB_MCP_TOKEN": TOKEN}
    proc = subprocess.Popen([*SERVE, "--http", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"server did not start: {proc.stderr.read().decode()[-2000:]}") from None
            time.sleep(0.1)
    yield port
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def test_http_requires_the_bearer_token(http_server: int) -> None:
    import httpx

    url = f"http://127.0.0.1:{http_server}/mcp"
    with httpx.Client(timeout=10) as c:
        r = c.post(url, json=INIT, headers=ACCEPT)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        for bad in ("Bearer wrong-token-0123456789abcdef", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer",
                    TOKEN):
            assert c.post(url, json=INIT, headers={**ACCEPT, "authorization": bad}).status_code == 401, bad
        ok = {**ACCEPT, "authorization": f"Bearer {TOKEN}"}
        r = c.post(url, json=INIT, headers=ok)
        assert r.status_code == 200, r.text
        # DNS rebinding: a page on another name reaching the loopback port
        assert c.post(url, json=INIT, headers={**ok, "host": "evil.example:80"}).status_code == 421
        assert c.post(url, json=INIT, headers={**ok, "origin": "http://evil.example"}).status_code == 403
        assert c.post(url, json=INIT,
                      headers={**ok, "origin": f"http://localhost:{http_server}"}).status_code == 200


def test_sdk_client_with_the_token(http_server: int) -> None:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> None:
        url = f"http://127.0.0.1:{http_server}/mcp"
        async with (httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"}, timeout=30) as http,
                    streamable_http_client(url, http_client=http) as (read, write),
                    ClientSession(read, write) as session):
            init = await session.initialize()
            assert "io.modelcontextprotocol/skills" in (init.capabilities.experimental or {})
            r = await session.call_tool("textkit.tcat", {"stdin": "through the door"})
            assert _text(r) == "through the door"

    anyio.run(main)


def test_host_checks_on_a_wildcard_bind_and_the_warning() -> None:
    from mcp.server.transport_security import TransportSecurityMiddleware
    from wbcore_mcp import http_guard

    from wbcore_runtime.contract.errors import InvalidArgs

    mw = TransportSecurityMiddleware(http_guard.security_settings("0.0.0.0", ["mcp.internal"]))
    assert mw.settings.enable_dns_rebinding_protection
    assert mw._validate_host("127.0.0.1:8765") and mw._validate_host("mcp.internal:8765")
    assert mw._validate_host(f"{socket.gethostname()}:8765")
    assert not mw._validate_host("evil.example:8765") and not mw._validate_origin("http://evil.example")
    mw = TransportSecurityMiddleware(http_guard.security_settings("10.1.2.3"))
    assert mw._validate_host("10.1.2.3:80") and not mw._validate_host("10.1.2.4:80")
    assert http_guard.warning("0.0.0.0", None) and "without a token" in http_guard.warning("10.1.2.3", None)
    assert http_guard.warning("127.0.0.1", None) is None and http_guard.warning("0.0.0.0", TOKEN) is None
    with pytest.raises(InvalidArgs, match="at least 16"):
        http_guard.check_token("short")


def test_bearer_compare_is_constant_time_and_exact() -> None:
    from wbcore_mcp.http_guard import BearerAuth

    auth = BearerAuth(None, TOKEN)
    assert auth.allowed(f"Bearer {TOKEN}".encode()) and auth.allowed(f"bearer {TOKEN}".encode())
    assert (not auth.allowed(None) and not auth.allowed(TOKEN.encode())
            and not auth.allowed(f"Bearer {TOKEN[:-1]}".encode()))


# --- the lean tools/call paths -----------------------------------------------------------


def test_lean_and_sdk_paths_answer_alike(demo_runtime) -> None:
    """The lean path's JSON-RPC replies equal what the SDK path sends for the same calls:
    a result, an isError result, structured content, and the -32602 of an unknown tool."""
    from wbcore_mcp.fastpath import LeanCalls
    from wbcore_mcp.server import build_server

    server = build_server(demo_runtime)
    lean = LeanCalls(server)
    calls = [("textkit.tcat", {"stdin": "same"}), ("textkit.tcat", {"fail": True}),
             ("calckit.add", {"a": 2, "b": 3}), ("calckit.add", {"a": -1, "b": 2})]

    async def main() -> None:
        async with Client(server, mode="legacy") as client:
            await client.list_tools()
            for i, (name, args) in enumerate(calls):
                msg = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                       "params": {"name": name, "arguments": args}}
                assert lean.callable(msg)
                got = (await lean.reply(msg))["result"]
                sdk = (await client.call_tool(name, args)).model_dump(by_alias=True, exclude_none=True,
                                                                      mode="json")
                sdk.pop("resultType", None)
                got_text = [c["text"] for c in got["content"]]
                assert got_text == [c["text"] for c in sdk["content"]], name
                assert got.get("isError", False) == sdk.get("isError", False)
                assert got.get("structuredContent") == sdk.get("structuredContent")
            unknown = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                       "params": {"name": "nope.x", "arguments": {}}}
            assert not lean.callable(unknown)  # unknown names go to the SDK, which answers -32602
            with pytest.raises(MCPError) as err:
                await client.call_tool("nope.x", {})
            assert err.value.code == types.INVALID_PARAMS
        # not lean: a progress token, search_tools, a call before the handshake
        assert not lean.callable({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                  "params": {"name": "textkit.tcat", "_meta": {"progressToken": 1}}})
        assert not lean.callable({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                  "params": {"name": "search_tools"}})
        assert not LeanCalls(server).eligible({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                               "params": {"name": "textkit.tcat"}})

    anyio.run(main)


def test_lean_http_call_is_json_and_guarded(http_server: int) -> None:
    import httpx

    url = f"http://127.0.0.1:{http_server}/mcp"
    auth = {**ACCEPT, "authorization": f"Bearer {TOKEN}"}
    with httpx.Client(timeout=30) as c:
        sid = c.post(url, json=INIT, headers=auth).headers["mcp-session-id"]
        session = {**auth, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        c.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session)
        call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "textkit.tcat", "arguments": {"stdin": "lean"}}}
        r = c.post(url, json=call, headers=session)
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.json() == {"jsonrpc": "2.0", "id": 3,
                            "result": {"content": [{"type": "text", "text": "lean"}]}}
        assert c.post(url, json=call, headers={**session, "host": "evil.example"}).status_code == 421
        assert c.post(url, json=call, headers={**session, "origin": "http://evil.example"}).status_code == 403
        assert c.post(url, json=call,
                      headers={k: v for k, v in session.items() if k != "authorization"}).status_code == 401
        other = c.post(url, json=call, headers={**session, "mcp-session-id": "not-a-session"})
        assert other.status_code == 404  # an unknown session reaches the SDK, which refuses it


def test_lean_stdio_call_is_cancelled_by_the_client(toolkit_root: Path, wb_home: Path) -> None:
    """Over stdio a plain tools/call takes the lean path; notifications/cancelled stops the
    guest (no reply is sent for it) and the server answers the next call at once."""
    from mcp_fixtures import populate

    populate(toolkit_root, wb_home)
    env = {"WB_HOME": str(wb_home), "WB_TOOLKITS_ROOT": str(toolkit_root), "PATH": os.environ.get("PATH", "")}
    proc = subprocess.Popen(SERVE, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, bufsize=0)

    def send(msg: dict[str, Any]) -> None:
        proc.stdin.write((json.dumps(msg) + "\n").encode())

    def read_reply() -> dict[str, Any]:
        while True:
            got = json.loads(proc.stdout.readline())
            if "id" in got:
                return got

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT["params"]})
        assert read_reply()["result"]["protocolVersion"] == "2025-11-25"
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        read_reply()
        send({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
              "params": {"name": "textkit.tcat", "arguments": {"stdin": "x"}}})
        assert read_reply() == {"jsonrpc": "2.0", "id": 3,
                                "result": {"content": [{"type": "text", "text": "x"}]}}
        t0 = time.monotonic()
        send({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
              "params": {"name": "loopkit.spin", "arguments": {}}})
        time.sleep(0.3)
        send({"jsonrpc": "2.0", "method": "notifications/cancelled",
              "params": {"requestId": 4, "reason": "test"}})
        send({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
              "params": {"name": "textkit.tcat", "arguments": {"stdin": "y"}}})
        assert read_reply()["id"] == 5 and time.monotonic() - t0 < 3.0
        send({"jsonrpc": "2.0", "id": 6, "method": "ping"})
        # nothing for the cancelled call came first
        assert read_reply() == {"jsonrpc": "2.0", "id": 6, "result": {}}
    finally:
        proc.stdin.close()
        proc.wait(timeout=20)


@pytest.mark.slow
def test_an_unbuilt_component_is_one_tool_until_its_first_call(make_runtime, wb_home: Path) -> None:
    """text-tools (a Python component) in a fresh home: listed as the tool `text-tools`,
    whose call builds it and names its functions; then they are the tools."""
    from wbcore_mcp.server import build_server

    from wbcore_runtime.runtime import Runtime

    shipped = Path(__file__).parents[3] / "toolkits"
    rt = Runtime.open(home=wb_home, roots=[shipped])
    server = build_server(rt, only=["text-tools"])
    assert set(server.wb_provider.tools()) == {"text-tools"}

    async def main() -> None:
        async with Client(server, mode="legacy") as client:
            r = await client.call_tool("text-tools", {}, read_timeout_seconds=300)
            assert (not r.is_error and "text-tools.count" in _text(r)
                    and _text(r).startswith("built text-tools"))
            names = {t.name for t in (await client.list_tools()).tools}
            assert "text-tools.count" in names and "text-tools" not in names
            r = await client.call_tool("text-tools.count", {"text": "one two\nthree"})
            assert r.structured_content == {"result": {"lines": 2, "words": 3, "chars": 13}}

    anyio.run(main)


def test_lean_http_call_is_cancelled_by_the_client(http_server: int) -> None:
    import threading

    import httpx

    url = f"http://127.0.0.1:{http_server}/mcp"
    auth = {**ACCEPT, "authorization": f"Bearer {TOKEN}"}
    with httpx.Client(timeout=30) as c:
        sid = c.post(url, json=INIT, headers=auth).headers["mcp-session-id"]
        session = {**auth, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        c.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session)
    got: list[Any] = []

    def spin() -> None:
        with httpx.Client(timeout=30) as c:
            t0 = time.monotonic()
            r = c.post(url, headers=session, json={"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                                   "params": {"name": "loopkit.spin", "arguments": {}}})
            got.append((time.monotonic() - t0, r))

    worker = threading.Thread(target=spin)
    worker.start()
    time.sleep(0.5)
    with httpx.Client(timeout=30) as c:
        r = c.post(url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/cancelled",
                                               "params": {"requestId": 7, "reason": "test"}})
        assert r.status_code == 202
    worker.join(timeout=10)
    elapsed, reply = got[0]
    assert elapsed < 3.0 and reply.status_code == 200 and reply.content == b""  # no response for it


def test_concurrent_first_calls_build_once(make_runtime, toolkit_root: Path, monkeypatch) -> None:
    import threading

    from wbcore_mcp.unbuilt import ServedProvider
    from wbcore_runtime.build import builder

    _lazy_toolkits(toolkit_root)
    rt = make_runtime()
    provider = ServedProvider(rt)
    builds: list[str] = []
    real = builder.build

    def counting(runtime: Any, ident: str, *a: Any, **k: Any) -> Any:
        builds.append(ident)
        time.sleep(0.2)  # widen the window in which a second caller could start another build
        return real(runtime, ident, *a, **k)

    monkeypatch.setattr(builder, "build", counting)
    outs: list[Any] = []
    threads = [threading.Thread(
                   target=lambda: outs.append(provider.call_json("lazycat.lcat", {"stdin": "z"})))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert builds == ["lazycat"]
    assert [o.text() for o in outs] == ["z"] * 4 and all(o.error is None for o in outs)


# --- parsers never crash the server ------------------------------------------------------

DEEP = ("[" * 1000 + "]" * 1000).encode()


def test_deep_and_broken_json_over_stdio_get_a_parse_error_and_the_server_goes_on(toolkit_root: Path,
                                                                                    wb_home: Path) -> None:
    from mcp_fixtures import populate

    populate(toolkit_root, wb_home)
    env = {"WB_HOME": str(wb_home), "WB_TOOLKITS_ROOT": str(toolkit_root), "PATH": os.environ.get("PATH", "")}
    proc = subprocess.Popen(SERVE, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)

    def reply() -> dict[str, Any]:
        line = proc.stdout.readline()
        assert line, f"the server ended: {proc.stderr.read().decode()[-2000:]}"
        return json.loads(line)

    try:
        proc.stdin.write(DEEP + b"\n")  # before the handshake: the SDK's path
        got = reply()
        assert (got["id"] is None and got["error"]["code"] == -32700
                and "1000 levels" in got["error"]["message"])
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                     "params": INIT["params"]}).encode()
                         + b"\n")
        assert reply()["result"]["protocolVersion"] == "2025-11-25"
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        for bad in (DEEP, b'{"jsonrpc": "2.0", "id": 2, "method": ', b'{"a": "\xff"'):  # the lean path's turn
            proc.stdin.write(bad + b"\n")
            assert reply()["error"]["code"] == -32700
        proc.stdin.write(b'{"jsonrpc": "2.0", "id": 3, "method": "ping"}\n')
        assert reply() == {"jsonrpc": "2.0", "id": 3, "result": {}}
    finally:
        proc.stdin.close()
        proc.wait(timeout=20)
    assert proc.returncode == 0


@pytest.mark.parametrize("mode", ["--lean", "--sdk-only"])
def test_a_line_past_the_cap_over_stdio_is_refused_and_the_server_goes_on(toolkit_root: Path, wb_home: Path,
                                                                           mode: str) -> None:
    """One message five times MAX_LINE (a client that never writes its newline, until it
    does): memory holds the cap (the reader's buffer and the Python process), not the line;
    the answer is -32700 and the next message is read as usual, on the lean path and through
    the SDK alike (``--sdk-only``)."""
    import threading

    from wbcore_mcp.fastpath import MAX_LINE

    env = {"WB_HOME": str(wb_home), "WB_TOOLKITS_ROOT": str(toolkit_root), "PATH": os.environ.get("PATH", "")}
    proc = subprocess.Popen([*SERVE, mode], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)
    lines: list[bytes] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, b"")), daemon=True).start()

    def reply(n: int) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while len(lines) < n and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert len(lines) >= n, f"no answer {n} (exit {proc.poll()}): {lines[-1:]}"
        return json.loads(lines[n - 1])

    def feed() -> None:
        try:
            chunk = b"x" * (1 << 20)
            for _ in range(5 * (MAX_LINE >> 20)):  # five times the cap, and no newline yet
                proc.stdin.write(chunk)
            proc.stdin.write(b"\n" + b'{"jsonrpc": "2.0", "id": 3, "method": "ping"}\n')
        except OSError:
            pass  # the server ended: the test says so

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        got = reply(1)
        assert (got["id"] is None and got["error"]["code"] == -32700
                and f"longer than {MAX_LINE} bytes" in got["error"]["message"]), got
        assert reply(2) == {"jsonrpc": "2.0", "id": 3, "result": {}}
        peak = int(next(x for x in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                        if x.startswith("VmHWM")).split()[1]) << 10
        assert peak < 3.5 * MAX_LINE, f"the server held {peak >> 20} MiB for a {MAX_LINE >> 20} MiB cap"
    finally:
        writer.join(timeout=30)
        proc.stdin.close()
        proc.wait(timeout=20)
    assert proc.returncode == 0


def test_stdin_ending_inside_a_line_past_the_cap_ends_the_server_cleanly(wb_home: Path) -> None:
    """A client that closes stdin in the middle of an over-long line (twice the cap, no newline):
    the line is refused (-32700), the rest is dropped up to the end of the stream, and the
    server stops at that end with exit 0, neither waiting nor spinning on it."""
    import threading

    from wbcore_mcp.fastpath import MAX_LINE

    env = {"WB_HOME": str(wb_home), "PATH": os.environ.get("PATH", "")}
    proc = subprocess.Popen([*SERVE, "--lean"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    reader.start()
    try:
        chunk = b"x" * (1 << 20)
        for _ in range(2 * (MAX_LINE >> 20) + 3):
            proc.stdin.write(chunk)
        proc.stdin.close()  # the stream ends inside the line
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    assert proc.returncode == 0, proc.stderr.read()[-2000:]
    got = [json.loads(line) for line in out[0].splitlines()]
    assert [g["error"]["code"] for g in got] == [-32700], got


@pytest.mark.parametrize("mode", ["--lean", "--sdk-only"])
def test_a_client_that_stops_reading_stdout_ends_the_server_cleanly(wb_home: Path, mode: str) -> None:
    """A client that never reads our output: the pipe fills and the server waits on it (its
    memory stays the pipe's); when the client closes its end the server stops with a line
    saying why and exit 0, as at the end of stdin, never an internal error."""
    env = {"WB_HOME": str(wb_home), "PATH": os.environ.get("PATH", "")}
    proc = subprocess.Popen([*SERVE, mode], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)
    try:
        proc.stdin.write(b'{"jsonrpc": "2.0", "id": 3, "method": "ping"}\n' * 5000)  # 5000 answers, unread
        time.sleep(2)
        assert proc.poll() is None  # waiting on the full pipe
        proc.stdout.close()  # the client stops reading for good
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdin.close()
    err = proc.stderr.read().decode()
    assert proc.returncode == 0 and "internal" not in err, err
    assert "closed the server's output" in err, err


def test_deep_json_over_http_is_400_not_500(http_server: int) -> None:
    import httpx

    url = f"http://127.0.0.1:{http_server}/mcp"
    auth = {**ACCEPT, "authorization": f"Bearer {TOKEN}"}
    with httpx.Client(timeout=30) as c:
        r = c.post(url, content=DEEP, headers=auth)  # no session: the SDK's parser
        assert r.status_code == 400
        sid = c.post(url, json=INIT, headers=auth).headers["mcp-session-id"]
        session = {**auth, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        r = c.post(url, content=DEEP, headers=session)  # a live session: the lean path's parser
        assert r.status_code == 400 and r.json()["error"]["code"] == -32700
        r = c.post(url, json={"jsonrpc": "2.0", "id": 5, "method": "ping"}, headers=session)
        assert r.status_code == 200


def test_http_bound_to_another_loopback_address_accepts_its_own_host(toolkit_root: Path,
                                                                     wb_home: Path) -> None:
    import httpx

    from mcp_fixtures import populate

    populate(toolkit_root, wb_home)
    port = _free_port()
    env = {**os.environ, "WB_HOME": str(wb_home), "WB_TOOLKITS_ROOT": str(toolkit_root),
           "WB_MCP_TOKEN": TOKEN}
    proc = subprocess.Popen([*SERVE, "--http", "--host", "127.0.0.2", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.2", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("server did not start: "
                                         f"{proc.stderr.read().decode()[-2000:]}") from None
                time.sleep(0.1)
        auth = {**ACCEPT, "authorization": f"Bearer {TOKEN}"}
        with httpx.Client(timeout=30) as c:
            r = c.post(f"http://127.0.0.2:{port}/mcp", json=INIT, headers=auth)  # Host: 127.0.0.2:<port>
            assert r.status_code == 200, r.text
            r = c.post(f"http://127.0.0.2:{port}/mcp", json=INIT, headers={**auth, "host": "127.0.0.3"})
            assert r.status_code == 421
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_a_busy_port_is_refused_before_any_banner(tmp_path) -> None:
    """`wbx mcp serve --http` on a busy port says so and exits 2 before printing "serving" or
    building anything (it used to print the banner, then uvicorn exited 3)."""
    from wbcore_testing.fixtures import serve_on_a_busy_port

    port, r = serve_on_a_busy_port("mcp", "serve", "--http", home=tmp_path / "home")
    assert r.returncode == 2, r.stderr
    assert f"port {port} on 127.0.0.1 is already in use" in r.stderr and "--port" in r.stderr
    assert "serving" not in r.stderr + r.stdout


def test_a_standalone_sse_stream_ends_at_its_lifetime_and_the_session_goes_on(demo_runtime: Any) -> None:
    """The SDK holds a session's GET stream for as long as its client stays connected (and for
    ever if the client vanished); the HTTP server's stream lifetime ends it cleanly, and the
    session answers the next request."""
    import threading

    import httpx

    from wbcore_mcp.server import build_server, http_app
    from wbcore_runtime.contract import http_server
    from wbcore_runtime.contract.http_server import ServerLimits

    http = http_server.service(demo_runtime)
    limits = ServerLimits(max_stream_s=1.0)
    sock = http.listen("127.0.0.1", 0, what="the test server")
    port = sock.getsockname()[1]
    app = http_app(build_server(demo_runtime), http=http, host="127.0.0.1", limits=limits)
    ready = threading.Event()
    uv = http.server(app, host="127.0.0.1", port=port, limits=limits, ready=ready, log_level="warning",
                     lifespan="on")
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        assert ready.wait(10)
        url = f"http://127.0.0.1:{port}/mcp"
        with httpx.Client(timeout=10) as c:
            r = c.post(url, json=INIT, headers=ACCEPT)
            assert r.status_code == 200, r.text
            session = {**ACCEPT, "mcp-session-id": r.headers["mcp-session-id"],
                       "mcp-protocol-version": "2025-11-25"}
            c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            t0 = time.monotonic()
            with c.stream("GET", url, headers={**session, "accept": "text/event-stream"}) as stream:
                assert stream.status_code == 200
                b"".join(stream.iter_bytes())  # ends cleanly: no error
            assert time.monotonic() - t0 < 5
            r = c.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=session)
            assert r.status_code == 200 and '"id":2' in r.text.replace(" ", ""), r.text
    finally:
        uv.should_exit = True
        thread.join(timeout=15)
