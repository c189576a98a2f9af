"""The one fetcher (wbcore_runtime.guard.fetch): TLS against SSL_CERT_FILE, error kinds of their own, caps
while streaming."""

from __future__ import annotations

import hashlib
import socket
import time
from pathlib import Path

import pytest

from wbcore_runtime.guard import fetch
from wbcore_runtime.contract.errors import DnsError, InvalidArgs, NotFound, Timeout, TlsError, Unreachable
from wbcore_runtime.guard.netguard import EgressDenied, NetGuard
from wbcore_testing.loopback import ALLOW, FILES, ends_within

#: How late a deadline or a cancel may show on a loaded 2-core CI machine. The bounds below rule
#: out waiting for what the deadline cuts (a 30 s sleep, a spin), an order of magnitude longer;
#: how fast the cut is belongs to bench/, not to a test.
SLACK_S = 3.0


def test_https_through_a_private_ca_in_ssl_cert_file(pki, https_port):
    ca, _, _ = pki
    FILES["/x"] = b"hello over tls"
    env = {**ALLOW, "SSL_CERT_FILE": str(ca)}
    body, got = fetch.get_bytes(f"https://localhost:{https_port}/x", guard=NetGuard.from_env(env),
                                limits=fetch.FetchLimits(), env=env)
    assert body == b"hello over tls" and got.sha256 == hashlib.sha256(body).hexdigest()
    # SSL_CERT_DIR works too (a hashed folder, as c_rehash / update-ca-certificates make)
    import subprocess

    d = ca.parent / "certs"
    d.mkdir(exist_ok=True)
    h = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", str(ca)], capture_output=True, text=True)
    if h.returncode == 0:
        (d / f"{h.stdout.strip()}.0").write_bytes(ca.read_bytes())
        env = {**ALLOW, "SSL_CERT_DIR": str(d)}
        body, _ = fetch.get_bytes(f"https://localhost:{https_port}/x", guard=NetGuard.from_env(env),
                                  limits=fetch.FetchLimits(), env=env)
        assert body == b"hello over tls"


def test_without_the_ca_tls_fails_with_its_own_kind(pki, https_port, tmp_path, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    FILES["/x"] = b"hello"
    with pytest.raises(TlsError) as exc:
        fetch.get_bytes(f"https://localhost:{https_port}/x", guard=NetGuard.from_env(ALLOW),
                        limits=fetch.FetchLimits(), env=ALLOW)
    assert exc.value.name == "tls" and exc.value.exit_code == 76
    assert "SSL_CERT_FILE" in exc.value.message and "certificate" in exc.value.message.lower()


def test_dns_and_connection_failures_have_their_own_kinds(tmp_path):
    def no_dns(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with pytest.raises(DnsError) as exc:
        fetch.get_bytes("https://nowhere.example/x", guard=NetGuard.from_env({}, resolver=no_dns),
                        limits=fetch.FetchLimits())
    assert exc.value.name == "dns" and exc.value.exit_code == 68 and "nowhere.example" in exc.value.message
    # a broker's guard (no from_env) calls the same failure a denial: a guest learns nothing more
    with pytest.raises(EgressDenied):
        NetGuard(resolver=no_dns).pin("nowhere.example", 443)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(Unreachable) as exc2:
        fetch.get_bytes(f"http://127.0.0.1:{port}/x", guard=NetGuard.from_env(ALLOW),
                        limits=fetch.FetchLimits())
    assert exc2.value.exit_code == 69


def test_caps_hold_while_streaming(http_port, tmp_path):
    guard = NetGuard.from_env(ALLOW)
    with pytest.raises(InvalidArgs, match="over the 100000-byte cap; download stopped"):
        fetch.download(f"http://127.0.0.1:{http_port}/endless", tmp_path / "out",
                       guard=guard, limits=fetch.FetchLimits(max_bytes=100_000))
    assert list(tmp_path.iterdir()) == []  # no partial file left
    start = time.monotonic()
    with pytest.raises(Timeout):
        fetch.download(f"http://127.0.0.1:{http_port}/stall", tmp_path / "out", guard=guard,
                       limits=fetch.FetchLimits(timeout=1.0))
    assert time.monotonic() - start < 1.0 + SLACK_S
    with pytest.raises(EgressDenied, match="SSRF guard"):
        fetch.download(f"http://127.0.0.1:{http_port}/x", tmp_path / "out", guard=NetGuard.from_env({}))


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_headers_dripped_a_byte_at_a_time_end_at_the_deadline(scheme, request, tmp_path):
    """Every read sees a byte long before the per-read timeout: only the whole exchange's
    deadline ends it (the headers would otherwise arrive for hours), over TLS as well."""
    port = request.getfixturevalue(f"{scheme}_port")
    env = {**ALLOW, "SSL_CERT_FILE": str(request.getfixturevalue("pki")[0])} if scheme == "https" else ALLOW
    err, took = ends_within(lambda: fetch.download(
        f"{scheme}://localhost:{port}/drip-headers", tmp_path / "out", env=env, guard=NetGuard.from_env(env),
        limits=fetch.FetchLimits(timeout=1.0)), 1.0 + 3 * SLACK_S, "a download of dripped headers")
    assert isinstance(err, Timeout) and "within 1s" in str(err), err
    assert took < 1.0 + SLACK_S and list(tmp_path.iterdir()) == []


def test_a_body_the_deadline_cuts_short_is_a_timeout_not_an_answer(http_port, tmp_path):
    """A body without a length ends with its connection, so the cut at the deadline ends it as
    the server would: what arrived by then is no answer (the cut's ``fired`` says so), and no
    file lands."""
    err, took = ends_within(lambda: fetch.download(
        f"http://127.0.0.1:{http_port}/drip-body", tmp_path / "out", guard=NetGuard.from_env(ALLOW),
        limits=fetch.FetchLimits(timeout=1.0)), 1.0 + 3 * SLACK_S, "a download of a dripped body")
    assert isinstance(err, Timeout) and "within 1s" in str(err), err
    assert took < 1.0 + SLACK_S and list(tmp_path.iterdir()) == []


def test_one_fetcher():
    """No module but wbcore_runtime/guard/fetch.py makes an httpx client (the issue-11 acceptance grep)."""
    import re

    root = Path(fetch.__file__).resolve().parents[2]
    pattern = re.compile(r"httpx\.(get|Client|stream|AsyncClient|post)\b")
    found = []
    for base in (root / "wbcore_runtime", root / "plugins"):
        for path in base.rglob("*.py"):
            if "/tests/" in path.as_posix() or ".venv" in path.parts:
                continue
            if pattern.search(path.read_text(encoding="utf-8", errors="replace")):
                found.append(path.relative_to(root).as_posix())
    assert found == ["wbcore_runtime/guard/fetch.py"]
    # ... and no module but it turns a checked pin into a URL or decides which headers a
    # redirect carries on (fetch.hop, fetch.carried: the net broker's hops call them too)
    pinning = re.compile(r"\bip_for_url\b|_CREDENTIAL_HEADERS")
    found = [path.relative_to(root).as_posix() for base in (root / "wbcore_runtime", root / "plugins")
             for path in base.rglob("*.py")
             if "/tests/" not in path.as_posix() and ".venv" not in path.parts
             and pinning.search(path.read_text(encoding="utf-8", errors="replace"))]
    assert sorted(found) == ["wbcore_runtime/guard/fetch.py", "wbcore_runtime/guard/netguard.py"], found


def test_a_pinned_file_comes_from_a_url_or_a_handed_over_file_and_must_match(http_port, tmp_path):
    """``fetch.pinned``: the lanes' and the tests' one way to bring what they pin (D7/D8)."""
    FILES["/pinned.tgz"] = body = b"pinned bytes " * 100
    want = hashlib.sha256(body).hexdigest()
    url = f"http://127.0.0.1:{http_port}/pinned.tgz"
    dest = tmp_path / "got.tgz"
    assert fetch.pinned(url, dest, want, what="thing 1.0", max_bytes=1 << 20, env=ALLOW) == url
    assert dest.read_bytes() == body
    handed = tmp_path / "handed.tgz"
    handed.write_bytes(body)
    dest.unlink()
    assert fetch.pinned(handed, dest, want, what="thing 1.0", max_bytes=1 << 20) == str(handed)
    assert dest.read_bytes() == body
    # other bytes: refused, naming both digests and what was pinned; nothing is left behind
    dest.unlink()
    with pytest.raises(InvalidArgs,
                       match=rf"sha256 {want} is not the pinned {'0' * 64} \(thing 1.0\); nothing was kept"):
        fetch.pinned(url, dest, "0" * 64, what="thing 1.0", max_bytes=1 << 20, env=ALLOW)
    assert not dest.exists()
    with pytest.raises(InvalidArgs, match="is not the pinned"):
        fetch.pinned(handed, dest, "0" * 64, what="thing 1.0", max_bytes=1 << 20)
    assert not dest.exists()
    # bounded either way, and the network guard holds (no allowance: loopback refused)
    with pytest.raises(InvalidArgs, match="over the 100-byte cap"):
        fetch.pinned(handed, dest, want, what="thing 1.0", max_bytes=100)
    with pytest.raises(InvalidArgs, match="over the 100-byte cap"):
        fetch.pinned(url, dest, want, what="thing 1.0", max_bytes=100, env=ALLOW)
    with pytest.raises(EgressDenied):
        fetch.pinned(url, dest, want, what="thing 1.0", max_bytes=1 << 20, env={})
    assert not dest.exists()
    link = tmp_path / "link.tgz"
    link.symlink_to(handed)
    with pytest.raises(InvalidArgs, match="cannot open"):
        fetch.pinned(link, dest, want, what="thing 1.0", max_bytes=1 << 20)


def test_a_url_with_credentials_is_refused_without_echoing_them():
    # a token pasted into a URL reaches a terminal, a CI log, a --json answer: the refusal names
    # the URL without its user-info (it printed "https://u:ghp_s3cret@github.com/...")
    with pytest.raises(InvalidArgs, match="credentials in the URL are not allowed") as exc:
        fetch.get_bytes("https://u:ghp_s3cret@github.com/o/r", guard=NetGuard.from_env({}),
                        limits=fetch.FetchLimits())
    assert "ghp_s3cret" not in str(exc.value) and "https://github.com/o/r" in str(exc.value)


def test_an_error_names_the_url_without_its_query(http_port, tmp_path):
    # a redirect's target may be a presigned link whose query is the credential: an error that
    # reaches a terminal, a log, a guest or a model names scheme, host and path only
    url = f"http://127.0.0.1:{http_port}/no-such-file?X-Amz-Signature=s3cret"
    with pytest.raises(NotFound, match="HTTP 404") as exc:
        fetch.download(url, tmp_path / "out", guard=NetGuard.from_env(ALLOW))
    assert "s3cret" not in str(exc.value) and f"127.0.0.1:{http_port}/no-such-file" in str(exc.value)


def test_a_header_no_server_may_receive_is_refused_by_name_never_echoed(http_port):
    """A token read from a file keeps its ``\\r``; a registry's token endpoint may answer one
    with a line ending or non-ASCII bytes. Refused before anything is sent, as the caller's
    mistake (not an unreachable server), naming the header and never its value."""
    FILES["/h"] = b"ok"
    url = f"http://127.0.0.1:{http_port}/h"
    for value in ("Bearer s3cret\r", "Bearer s3cret\r\nX-Evil: 1", "Bearer s3crét", "Bearer s3cret\x00"):
        with pytest.raises(InvalidArgs, match="header Authorization") as exc:
            fetch.get_bytes(url, guard=NetGuard.from_env(ALLOW), limits=fetch.FetchLimits(),
                            headers={"Authorization": value})
        assert "s3cr" not in str(exc.value), exc.value
    with pytest.raises(InvalidArgs, match="header name"):
        fetch.get_bytes(url, guard=NetGuard.from_env(ALLOW), limits=fetch.FetchLimits(),
                        headers={"X-A\r\nB": "1"})
    assert fetch.get_bytes(url, guard=NetGuard.from_env(ALLOW), limits=fetch.FetchLimits(),
                           headers={"Authorization": "Bearer s3cret\tx"})[0] == b"ok"
