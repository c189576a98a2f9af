"""The shipped Dock toolkits (notes / kv, pipe / commands, fetch / net), built by the c
lane and run through wbx. Slow: the c lane compiles with zig (its cache is warmed once
per machine, about two minutes the first time)."""

from __future__ import annotations

import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLKITS = ROOT / "toolkits"
DOCK_TOOLKITS = ("notes", "fetch", "pipe")


def test_the_c_sdk_header_has_one_copy_in_the_repository():
    """The C lanes put the core's wb_dock.h on the include path: no toolkit, lane or
    built-in ships a copy that could drift (or be planted with other code)."""
    import subprocess

    from wbcore_runtime.dispatch.dock import SDK_C

    listed = subprocess.run(["git", "ls-files", "*wb_dock.h"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    assert listed.stdout.split() == [str((SDK_C / "wb_dock.h").relative_to(ROOT))]
    for ident in DOCK_TOOLKITS:
        assert '#include "wb_dock.h"' in "".join(p.read_text()
                                                 for p in (TOOLKITS / ident / "src").glob("*.c"))


@pytest.fixture(scope="session")
def zig_env(request, tmp_path_factory, build_sandbox):
    try:
        from wbcore_lane_zig import cache
        from wbcore_lane_zig.toolchain import available, find
    except ImportError as exc:
        pytest.skip(f"the c lane (wbcore-lane-zig) is not installed: {exc}")
    av = available()
    if not av.ok:
        pytest.skip(f"c lane unavailable here: {av.reason}")
    zig = find()
    if os.environ.get("WB_ZIG_CACHE"):
        target = Path(os.environ["WB_ZIG_CACHE"])
    elif getattr(request.config, "cache", None) is not None:
        target = Path(request.config.cache.mkdir("wb-zig")) / f"zig-{zig.version}"
    else:
        target = tmp_path_factory.getbasetemp().parent / "wb-zig-cache" / f"zig-{zig.version}"
    cache.warm(zig, target, build_sandbox)
    return {**os.environ, "WB_ZIG_CACHE": str(target)}


@pytest.fixture
def built(make_runtime, zig_env, tmp_path, wbx):
    root = tmp_path / "tk"
    for ident in (*DOCK_TOOLKITS, "b64"):
        shutil.copytree(TOOLKITS / ident, root / ident)
    rt = make_runtime(roots=[root], env=zig_env)
    for ident in (*DOCK_TOOLKITS, "b64"):
        r = wbx("toolkit", "build", ident, runtime=rt)
        assert r.exit_code == 0, r.stderr
    return rt, root



@pytest.mark.slow
def test_notes_keeps_notes_in_kv(built, wbx):
    rt, _ = built
    assert wbx("run", "notes", "put", "todo", runtime=rt, input=b"buy milk\n").exit_code == 0
    r = wbx("run", "notes", "get", "todo", runtime=rt, input=b"")
    assert (r.exit_code, r.stdout) == (0, "buy milk\n")
    wbx("run", "notes", "put", "todo/2", runtime=rt, input=b"x")
    assert wbx("run", "notes", "list", "todo", runtime=rt, input=b"").stdout == "todo\ntodo/2\n"
    missing = wbx("run", "notes", "get", "nope", runtime=rt, input=b"")
    assert missing.exit_code == 66 and "no key 'nope'" in missing.stderr
    big = wbx("run", "notes", "put", "todo", runtime=rt, input=b"y" * ((1 << 20) + 1))
    assert big.exit_code == 2 and "at most 1 MiB" in big.stderr
    assert wbx("run", "notes", "get", "todo", runtime=rt, input=b"").stdout == "buy milk\n"  # nothing lost
    assert wbx("run", "notes", "rm", "todo", runtime=rt, input=b"").exit_code == 0
    assert wbx("run", "notes", "count", runtime=rt, input=b"").stdout == "1 of 10000\n"
    assert wbx("audit", "--verify", runtime=rt).exit_code == 0


@pytest.mark.slow
def test_pipe_composes_registered_commands(built, wbx):
    rt, _ = built
    r = wbx("run", "pipe", "b64", "--", "b64", "decode", runtime=rt, input=b"hello, dock")
    assert (r.exit_code, r.stdout) == (0, "hello, dock")
    bad = wbx("run", "pipe", "b64", "decode", runtime=rt, input=b"!!")
    assert bad.exit_code == 1 and "stage 1 (b64) exited 1" in bad.stderr
    nope = wbx("run", "pipe", "rm", "-rf", "/", runtime=rt, input=b"")
    assert nope.exit_code == 66 and "not a registered command" in nope.stderr


class _Page(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        body = b"page " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.slow
def test_fetch_goes_through_netguard_and_its_allowlist(built, wbx):
    from wbcore_brokers_net.brokers import NetBroker
    from wbcore_brokers_net.guard import NetGuard

    rt, root = built
    srv = ThreadingHTTPServer(("127.0.0.7", 0), _Page)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    try:
        table = {"public.test": ["127.0.0.7"], "internal.test": ["10.1.2.3"]}
        rt.dock.set_driver("net",
                           NetBroker(NetGuard(resolver=lambda h, p: table[h],
                                              public=frozenset({"127.0.0.7"}))))
        url = f"http://public.test:{port}/hello"
        shipped = wbx("run", "fetch", url, runtime=rt, input=b"")
        assert shipped.exit_code == 77 and "ALLOWED_HOSTS" in shipped.stderr
        manifest = root / "fetch" / "manifest.org"
        text = manifest.read_text()
        line = next(ln for ln in text.splitlines() if ln.startswith("#+ALLOWED_HOSTS:"))
        manifest.write_text(text.replace(line,
                                         "#+ALLOWED_HOSTS: http://public.test:* http://internal.test:*"))
        rt.discover(refresh=True)
        # Hosts are what the build recorded: the edited manifest takes effect once rebuilt
        # (until then the call is refused as changed, never run with either list).
        assert wbx("toolkit", "build", "fetch", runtime=rt).exit_code == 0
        ok = wbx("run", "fetch", "-i", url, runtime=rt, input=b"")
        assert ok.exit_code == 0 and ok.stdout.startswith("HTTP 200\n") and ok.stdout.endswith("page /hello")
        private = wbx("run", "fetch", f"http://internal.test:{port}/", runtime=rt, input=b"")
        assert private.exit_code == 77 and "RFC 1918" in private.stderr
    finally:
        srv.shutdown()
        srv.server_close()
