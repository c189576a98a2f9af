"""A did:web host that answers 401 or 403 for its DID document refused it: the verdict says
so (HTTP status, what it means, what to do), and is ``unresolved`` — it used to be reported as
"signature malformed", which sent the reader to the toolkit instead of the host."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from wbcore_runtime.trust import did, identity, signing, verdict as trust

from test_signing import SEED0, write_vec


class _Refusing(http.server.BaseHTTPRequestHandler):
    status = 401

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(self.status)
        if self.status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="intranet"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture(params=[401, 403])
def refusing_host(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    handler = type("H", (_Refusing,), {"status": request.param})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", request.param
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_refusing_did_web_host_is_named_not_a_malformed_signature(refusing_host: tuple[str, int],
                                                                      tmp_path: Path) -> None:
    host, status = refusing_host
    tk = write_vec(tmp_path / "tk")
    signing.sign(tk, identity.Identity.from_seed(SEED0), author_did=did.did_for_host(host))
    v = signing.verify(tk, allow_http_loopback=True)
    assert v.code == signing.UNRESOLVED, v.message
    assert f"the did:web host {host} refused the DID document: HTTP {status}" in v.message
    assert ("asks for credentials" if status == 401 else "forbidden") in v.message
    assert "readable by anyone" in v.message and f"curl -i http://{host}/.well-known/did.json" in v.message
    check = trust._signature_check(SimpleNamespace(dir=tk), SimpleNamespace(env={did.ENV_HTTP_LOOPBACK: "1"}))
    assert not check.ok and check.message.startswith("signature unresolved: ") and "malformed" not in check.message
