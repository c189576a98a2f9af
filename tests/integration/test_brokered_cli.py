"""The brokered CLI tools ``http`` and ``pip-fetch`` (toolkits/, js lane): they reach the
network only through the Dock's net cap — NetGuard, ``#+ALLOWED_HOSTS`` — never a socket."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from wbcore_audit_trail import reader

ROOT = Path(__file__).resolve().parents[2]
TOOLKITS = ROOT / "toolkits"

pytest.importorskip("wbcore_lane_js")
pytest.importorskip("wbcore_brokers_net")
pytest.importorskip("wbcore_wasmtime")

WHEEL = b"PK\x03\x04 not really a wheel, but bytes with a hash\x00\xff" * 50
SDIST = b"\x1f\x8b sdist bytes" * 30
OTHER = b"older release"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Server(BaseHTTPRequestHandler):
    """A loopback test server: echo routes for http, a PEP 503/691 simple index for pip-fetch."""

    def log_message(self, *a):
        pass

    def _send(self, status: int, body: bytes, ctype: str = "text/plain", extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        files = {"/files/demo_pkg-1.0-py3-none-any.whl": WHEEL, "/files/demo-pkg-1.0.tar.gz": SDIST,
                 "/files/demo_pkg-0.9-py3-none-any.whl": OTHER, "/files/tampered-1.0.tar.gz": b"evil"}
        if self.path in files:
            return self._send(200, files[self.path], "application/octet-stream")
        if self.path == "/simple/demo-pkg/":
            if ("application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
                    and self.server.json_index):
                doc = {"meta": {"api-version": "1.0"}, "name": "demo-pkg", "files": [
                    {"filename": "demo_pkg-1.0-py3-none-any.whl",
                     "url": "/files/demo_pkg-1.0-py3-none-any.whl", "hashes": {"sha256": sha(WHEEL)}},
                    {"filename": "demo-pkg-1.0.tar.gz", "url": "../../files/demo-pkg-1.0.tar.gz",
                     "hashes": {"sha256": sha(SDIST)}},
                    {"filename": "demo_pkg-0.9-py3-none-any.whl",
                     "url": "/files/demo_pkg-0.9-py3-none-any.whl",
                     "hashes": {"sha256": sha(OTHER)}, "yanked": "bad"}]}
                return self._send(200, json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json")
            page = ("<!DOCTYPE html><html><body><h1>Links for demo-pkg</h1>\n"
                    f'<a href="/files/demo_pkg-1.0-py3-none-any.whl#sha256={sha(WHEEL)}" '
                    'data-requires-python="&gt;=3.8">'
                    "demo_pkg-1.0-py3-none-any.whl</a><br/>\n"
                    f'<a href="../../files/demo-pkg-1.0.tar.gz#sha256={sha(SDIST)}">'
                    'demo-pkg-1.0.tar.gz</a><br/>\n'
                    f'<a href="/files/demo_pkg-0.9-py3-none-any.whl#sha256={sha(OTHER)}" data-yanked="">'
                    "demo_pkg-0.9-py3-none-any.whl</a>\n</body></html>")
            return self._send(200, page.encode(), "text/html")
        if self.path == "/simple/tampered/":
            page = f'<a href="/files/tampered-1.0.tar.gz#sha256={sha(b"good")}">tampered-1.0.tar.gz</a>'
            return self._send(200, page.encode(), "text/html")
        if self.path.startswith("/status/"):
            return self._send(int(self.path.rsplit("/", 1)[1]), b"nope")
        body = json.dumps({"method": "GET", "path": self.path, "ua": self.headers.get("X-Probe")}).encode()
        return self._send(200, body, "application/json", {"X-Served-By": "test"})

    def do_HEAD(self):
        self.do_GET()

    def do_POST(self):
        size = int(self.headers.get("Content-Length", "0"))
        data = self.rfile.read(size)
        body = json.dumps({"method": self.command, "path": self.path,
                           "type": self.headers.get("Content-Type"), "body": data.decode()}).encode()
        self._send(201, body, "application/json")

    do_PUT = do_POST


@pytest.fixture
def served():
    srv = ThreadingHTTPServer(("127.0.0.7", 0), _Server)
    srv.json_index = False
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def tools(make_runtime, tmp_path, wbx):
    """http and pip-fetch copied, their #+ALLOWED_HOSTS opened to the test hosts, built."""
    root = tmp_path / "tk"
    rt = make_runtime(roots=[root])
    for ident in ("http", "pip-fetch"):
        shutil.copytree(TOOLKITS / ident, root / ident)
    return rt, root


def allow(rt, root: Path, ident: str, hosts: str, wbx) -> None:
    manifest = root / ident / "manifest.org"
    text = manifest.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("#+ALLOWED_HOSTS:"))
    manifest.write_text(text.replace(line, f"#+ALLOWED_HOSTS: {hosts}"))
    rt.discover(refresh=True)
    r = wbx("toolkit", "build", ident, runtime=rt)
    assert r.exit_code == 0, r.stderr


def guard(rt) -> None:
    """DNS for the test: public.test is a "public" address on a dedicated loopback
    (127.0.0.7, the guard's test seam); internal.test is RFC 1918; everything else real."""
    from wbcore_brokers_net.brokers import NetBroker
    from wbcore_brokers_net.guard import NetGuard

    table = {"public.test": ["127.0.0.7"], "internal.test": ["10.1.2.3"], "127.0.0.1": ["127.0.0.1"]}
    rt.dock.set_driver("net",
                       NetBroker(NetGuard(resolver=lambda h, p: table[h], public=frozenset({"127.0.0.7"}))))


def test_the_js_sdk_has_one_copy_and_the_lane_adds_it():
    """http and pip-fetch import './wb_dock.js' and ship no copy: the js lane adds the
    core's (a toolkit's own wb_dock.js is refused, see wbcore-lane-js's tests)."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "*wb_dock.js"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    assert listed.stdout.split() == ["wbcore_runtime/sdk/wb_dock.js"]
    for ident in ("http", "pip-fetch"):
        assert "from './wb_dock.js'" in (TOOLKITS / ident / "src" / "main.js").read_text()


def test_http_reaches_a_server_only_when_allowed_and_never_loopback(tools, served, wbx):
    rt, root = tools
    port = served.server_address[1]
    url = f"http://public.test:{port}/hello"
    assert wbx("toolkit", "build", "http", runtime=rt).exit_code == 0
    guard(rt)
    shipped = wbx("run", "http", url, runtime=rt, input=b"")
    assert shipped.exit_code == 77 and "ALLOWED_HOSTS" in shipped.stderr, shipped.stderr
    allow(rt, root, "http", f"http://public.test:{port} http://internal.test:* http://127.0.0.1:*", wbx)
    guard(rt)
    ok = wbx("run", "http", "-i", url, "X-Probe:yes", "q==a b", runtime=rt, input=b"")
    assert ok.exit_code == 0, ok.stderr
    head, _, body = ok.stdout.partition("\n\n")
    assert head.startswith("HTTP 200\n") and "x-served-by: test" in head
    assert json.loads(body) == {"method": "GET", "path": "/hello?q=a+b", "ua": "yes"}
    posted = wbx("run", "http", "POST", f"http://public.test:{port}/items", "name=x", "count:=3", runtime=rt,
                 input=b"")
    got = json.loads(posted.stdout)
    assert posted.exit_code == 0 and got["type"] == "application/json"
    assert json.loads(got["body"]) == {"name": "x", "count": 3}
    piped = wbx("run", "http", "-X", "PUT", "-d", "@-", f"http://public.test:{port}/doc", runtime=rt,
                input=b"from stdin")
    assert json.loads(piped.stdout)["body"] == "from stdin" and json.loads(piped.stdout)["method"] == "PUT"
    err = wbx("run", "http", "-f", f"http://public.test:{port}/status/404", runtime=rt, input=b"")
    assert err.exit_code == 22 and "HTTP 404" in err.stderr
    # loopback is private: listed in #+ALLOWED_HOSTS or not, the guard refuses it
    loop = wbx("run", "http", f"http://127.0.0.1:{port}/", runtime=rt, input=b"")
    assert loop.exit_code == 77 and "loopback" in loop.stderr, loop.stderr
    private = wbx("run", "http", f"http://internal.test:{port}/", runtime=rt, input=b"")
    assert private.exit_code == 77 and "RFC 1918" in private.stderr
    bad = wbx("run", "http", "ftp://x", runtime=rt, input=b"")
    assert bad.exit_code == 65 and "http:// or https://" in bad.stderr
    decisions = [(e["cap"], e["outcome"]) for e in reader.entries(rt.dock.audit)]
    assert ("net", "allowed") in decisions and ("net", "denied") in decisions


@pytest.mark.parametrize("json_index", [False, True], ids=["pep503-html", "pep691-json"])
def test_pip_fetch_lists_and_downloads_hash_checked(tools, served, wbx, json_index):
    rt, root = tools
    served.json_index = json_index
    port = served.server_address[1]
    index = f"http://public.test:{port}/simple"
    allow(rt, root, "pip-fetch", f"http://public.test:{port}", wbx)
    guard(rt)
    listed = wbx("run", "pip-fetch", "--index", index, "Demo_Pkg", "1.0", runtime=rt, input=b"")
    assert listed.exit_code == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == ["demo_pkg-1.0-py3-none-any.whl", "demo-pkg-1.0.tar.gz"]
    assert lines[0].split()[1] == sha(WHEEL)
    assert lines[1].split()[2] == f"http://public.test:{port}/files/demo-pkg-1.0.tar.gz"  # ../../ resolved
    wheel = wbx("run", "pip-fetch", "--index", index, "demo-pkg", "1.0", "demo_pkg-1.0-py3-none-any.whl",
                runtime=rt, input=b"")
    assert wheel.exit_code == 0 and wheel.stdout_bytes == WHEEL, wheel.stderr
    assert "sha256" in wheel.stderr and "ok" in wheel.stderr
    sdist = wbx("run", "pip-fetch", "--index", index, "demo-pkg", "1.0", "sdist", runtime=rt, input=b"")
    assert sdist.stdout_bytes == SDIST
    as_json = json.loads(wbx("run", "pip-fetch", "--json", "--index", index, "demo-pkg", "0.9", runtime=rt,
                             input=b"").stdout)
    assert as_json[0]["yanked"] is True
    missing = wbx("run", "pip-fetch", "--index", index, "demo-pkg", "2.0", runtime=rt, input=b"")
    assert missing.exit_code == 1 and "versions there: 1.0, 0.9" in missing.stderr
    tampered = wbx("run", "pip-fetch", "--index", index, "tampered", "1.0", "sdist", runtime=rt, input=b"")
    assert tampered.exit_code == 1 and "does not match" in tampered.stderr and tampered.stdout_bytes == b""


def test_pip_fetch_default_index_is_refused_outside_its_allowlist_offline(tools, served, wbx):
    """The shipped manifest allows https only: the test's http index is refused by the host
    before any request (no network needed)."""
    rt, _ = tools
    assert wbx("toolkit", "build", "pip-fetch", runtime=rt).exit_code == 0
    guard(rt)
    port = served.server_address[1]
    r = wbx("run", "pip-fetch", "--index", f"http://public.test:{port}/simple", "demo-pkg", "1.0", runtime=rt,
            input=b"")
    assert r.exit_code == 77 and "ALLOWED_HOSTS" in r.stderr
