"""wbcore_runtime.guard.httpguard: who may talk to an HTTP surface (MCP, engine) — one function per
question."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from wbcore_runtime.guard import httpguard
from wbcore_runtime.contract.errors import InvalidArgs

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "a-token-of-enough-length-123"


def policy(bind: str = "127.0.0.1", token: str | None = TOKEN,
           extra: tuple[str, ...] = ()) -> httpguard.Policy:
    return httpguard.Policy.for_bind(bind, token, extra, surface="test")


def test_token_is_required_exact_and_long_enough():
    p = policy()
    ok = {"host": "127.0.0.1:8766", "origin": None}
    assert httpguard.refusal(p, authorization=f"Bearer {TOKEN}".encode(), **ok) is None
    assert httpguard.refusal(p, authorization=f"bearer   {TOKEN}".encode(), **ok) is None
    for bad in (None, b"", TOKEN.encode(), f"Basic {TOKEN}".encode(), f"Bearer {TOKEN[:-1]}".encode(),
                f"Bearer {TOKEN}x".encode(), b"Bearer"):
        assert httpguard.refusal(p, authorization=bad, **ok)[0] == 401, bad
    with pytest.raises(InvalidArgs, match="at least 16"):
        httpguard.check_token("short")
    with pytest.raises(InvalidArgs):
        httpguard.check_token(f" {TOKEN} ")
    # a byte no client can send in a header (a line ending from a file, a control or non-ASCII
    # character) would make a token nothing ever matches: refused, never echoed
    for bad in (f"{TOKEN[:8]}\r{TOKEN[8:]}", f"{TOKEN}\x00x", f"{TOKEN}é", f"{TOKEN[:8]} {TOKEN[8:]}"):
        with pytest.raises(InvalidArgs, match="visible ASCII") as exc:
            httpguard.check_token(bad)
        assert TOKEN[:8] not in str(exc.value)
    assert httpguard.check_token("") is None and httpguard.check_token(None) is None


@pytest.mark.parametrize("host", ["evil.example", "localhost.evil.example", "127.0.0.1.nip.io",
                                  "evil.example:8766", "", "[::2]:80", "10.0.0.1",
                                  # a port that is no number: what follows it is another name
                                  "localhost:1@evil.example", "localhost:evil", "[::1]:x", "[::1]evil"])
def test_foreign_hosts_are_421(host):
    assert (httpguard.refusal(policy(), authorization=f"Bearer {TOKEN}".encode(), host=host, origin=None)[0]
            == 421)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8766", "LOCALHOST:1", "[::1]:8766", "[::1]"])
def test_loopback_hosts_pass(host):
    assert (httpguard.refusal(policy(), authorization=f"Bearer {TOKEN}".encode(), host=host, origin=None)
            is None)


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://localhost.evil.example",
                                    "file://localhost", "http://localhost/path", "localhost",
                                    "ws://localhost", "http://localhost:1@evil.example",
                                    "http://localhost:evil.example"])
def test_foreign_origins_are_403(origin):
    refused = httpguard.refusal(policy(), authorization=f"Bearer {TOKEN}".encode(), host="localhost",
                                origin=origin)
    assert refused is not None and refused[0] == 403, origin


def test_named_and_wildcard_binds_allow_their_names():
    p = policy("10.1.2.3", extra=("engine.internal",))
    auth = f"Bearer {TOKEN}".encode()
    for host in ("10.1.2.3:80", "engine.internal", "localhost"):
        assert httpguard.refusal(p, authorization=auth, host=host, origin=f"https://{host}") is None
    assert httpguard.refusal(p, authorization=auth, host="10.1.2.4", origin=None)[0] == 421
    assert "engine.internal" in httpguard.host_names("0.0.0.0", ["engine.internal"])
    assert (httpguard.warning("x", "0.0.0.0", None, "X_TOKEN")
            and httpguard.warning("x", "127.0.0.1", None, "X") is None)


def test_guard_middleware_answers_refusals_and_passes_the_rest():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    guard = httpguard.Guard(app, policy())

    def request(headers):
        sent = []

        async def send(msg):
            sent.append(msg)

        scope = {"type": "http", "path": "/x",
                 "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}
        asyncio.run(guard(scope, None, send))
        return sent[0]["status"], dict(sent[0]["headers"])

    assert request({"host": "localhost"})[0] == 401
    assert request({"host": "localhost"})[1][b"www-authenticate"].startswith(b"Bearer")
    assert request({"host": "evil", "authorization": f"Bearer {TOKEN}"})[0] == 421
    assert request({"host": "localhost", "authorization": f"Bearer {TOKEN}"})[0] == 200
    assert seen == ["/x"]


def test_no_http_surface_compares_tokens_itself():
    """The token question has one home: no other module of the core or a plugin does a
    constant-time comparison of an Authorization header, nor parses 'Bearer '."""
    offenders = []
    for path in [*ROOT.joinpath("wbcore_runtime").rglob("*.py"),
                 *ROOT.joinpath("plugins").glob("*/wbcore_*/**/*.py")]:
        if path.name == "httpguard.py" or "/tests/" in path.as_posix():
            continue
        text = path.read_text()
        if (re.search(r"compare_digest\([^)]*(header|authorization|token)", text, re.IGNORECASE)
                or 'b"bearer "' in text.lower()):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_a_non_default_loopback_bind_answers_to_its_own_address():
    p = policy("127.0.0.2")
    auth = f"Bearer {TOKEN}".encode()
    for host in ("127.0.0.2", "127.0.0.2:8766", "localhost:8766"):
        assert httpguard.refusal(p, authorization=auth, host=host, origin=f"http://{host}") is None, host
    assert httpguard.refusal(p, authorization=auth, host="127.0.0.3", origin=None)[0] == 421
    assert "[::1]" in httpguard.host_names("::1") and httpguard.host_names("::1").count("[::1]") == 1
