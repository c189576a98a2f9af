"""Pytest fixtures for wbcore and its plugin authors (loaded as the ``wbcore`` pytest11 plugin).

``wb_home``      an empty ``$WB_HOME`` in a temp dir (also set in the environment)
``toolkit_root`` an empty toolkits root; ``make_toolkit(...)`` writes toolkits into it
``make_runtime`` ``make_runtime(plugins=None, roots=None)`` → a ``Runtime`` on the above
``wbx``          ``wbx(*args, runtime=None, input=None)`` → ``CliResult`` (exit code, out, err)
``broken_dist``  a fake installed distribution whose ``wbcore.plugins`` entry point cannot import
``build_sandbox`` the installed build sandbox (``runtime.build_sandbox()``), or a skip saying why
``oci_registry``  a distribution registry (Debian's ``docker-registry``) on loopback, or a skip saying why
``file_server``  a :class:`FileServer` (loopback HTTP: ``files``, ``routes``, ``hits``, ``url``) for the test
``git_server``   a :class:`GitHttpServer` (git's own smart HTTP on loopback) over bare repos made by
                 ``git_repo``
``history_repo`` a checked-out repository with three commits by two authors, readable by any uid (a
                 mount's source); ``git_in(repo, *args)`` runs git there as its author
``tmux``         ``(cmd, name)``: a private tmux server to drive a command in a real terminal (``wait_pane``)

Shared test guests in WebAssembly text (``wasi``, ``K_UPPER``, ``ECHO_OR_TRAP``, ``burn``) and
``register_wat(rt, name, wat, kind, wat2wasm=...)`` serve the plugins' tests and the benches alike.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest


def manifest_text(
    ident: str,
    *,
    exec: str | None = None,
    caps: str = "",
    trust: str | None = None,
    extra: dict[str, str] | None = None,
    title: str | None = None,
    tagline: str | None = None,
    status: str = "stable",
    version: str = "0.1.0",
    drawer: dict[str, str] | None = None,
) -> str:
    """A well-formed seed-000 manifest; override any field to make it malformed."""
    kw = {
        "TITLE": title or f"{ident} toolkit",
        "TOOLKIT": ident,
        "VERSION": version,
        "STATUS": status,
        "TAGLINE": tagline or f"Use {ident} for testing.",
    }
    if exec:
        kw["EXEC"] = exec
    if caps:
        kw["CAPS"] = caps
    if trust:
        kw["TRUST"] = trust
    kw.update(extra or {})
    props = {"ID": ident, "STATUS": status}
    props.update(drawer or {})
    lines = [f"#+{k}: {v}" for k, v in kw.items()]
    lines += ["", f"* {kw['TITLE']} :toolkit:", "  :PROPERTIES:"]
    lines += [f"  :{k}: {v}" for k, v in props.items()]
    lines += ["  :END:", "", f"{kw['TAGLINE']}", ""]
    return "\n".join(lines) + "\n"


def write_toolkit(
    root: Path,
    ident: str,
    manifest: str | None = None,
    skills: dict[str, str] | None = None,
    files: dict[str, str | bytes] | None = None,
    **fields: Any,
) -> Path:
    d = root / ident
    (d / "skills").mkdir(parents=True, exist_ok=True)
    (d / "manifest.org").write_text(manifest if manifest is not None else manifest_text(ident, **fields))
    if skills is None:
        skills = {"overview": f"#+TITLE: {ident} overview\n\nWhat {ident} does and when to use it.\n"}
    for slug, text in skills.items():
        (d / "skills" / f"{slug}.org").write_text(textwrap.dedent(text))
    for rel, content in (files or {}).items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
    return d


@dataclass
class CliResult:
    exit_code: int
    stdout_bytes: bytes
    stderr: str

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", errors="replace")


@pytest.fixture
def wb_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "wb-home"
    home.mkdir()
    monkeypatch.setenv("WB_HOME", str(home))
    monkeypatch.delenv("WB_TOOLKITS_ROOT", raising=False)
    monkeypatch.delenv("WB_TOOLKIT_PATH", raising=False)
    monkeypatch.delenv("WB_PLUGINS", raising=False)
    return home


@pytest.fixture
def toolkit_root(tmp_path: Path) -> Path:
    root = tmp_path / "toolkits"
    root.mkdir()
    return root


@pytest.fixture
def make_toolkit(toolkit_root: Path) -> Callable[..., Path]:
    def make(ident: str, manifest: str | None = None, **kw: Any) -> Path:
        return write_toolkit(toolkit_root, ident, manifest, **kw)

    return make


@pytest.fixture
def make_runtime(wb_home: Path, toolkit_root: Path, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    from wbcore_runtime.runtime import Runtime

    opened: list[Any] = []

    def make(plugins: Sequence[str | object] | None = None, roots: Sequence[Path] | None = None,
             **kw: Any) -> Any:
        rt = Runtime.open(
            plugins=plugins,
            home=kw.pop("home", wb_home),
            roots=list(roots) if roots is not None else [toolkit_root],
            cwd=kw.pop("cwd", tmp_path),
            **kw,
        )
        opened.append(rt)
        return rt

    yield make
    for rt in opened:
        close = getattr(rt, "close", None)
        if callable(close):
            close()


@pytest.fixture
def wbx(make_runtime: Callable[..., Any]) -> Callable[..., CliResult]:
    """Run the CLI in-process against a runtime (default: all plugins, the temp root). The CLI is
    the wbcore-cli distribution, which this test support does not depend on: a suite that uses
    this fixture lists wbcore-cli in its test extra."""
    try:
        from wbcore_cli import app as cli_app
    except ModuleNotFoundError as e:
        if e.name != "wbcore_cli":
            raise
        pytest.fail("this test uses the wbx CLI: add wbcore-cli to the test extra", pytrace=False)

    def run(*args: str, runtime: Any = None, input: bytes | str | None = None) -> CliResult:
        rt = runtime if runtime is not None else make_runtime()
        raw = io.BytesIO()
        out = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
        err = io.StringIO()
        stdin = sys.stdin
        if input is not None:
            data = input.encode() if isinstance(input, str) else input
            sys.stdin = io.TextIOWrapper(io.BytesIO(data))
        try:
            with redirect_stdout(out), redirect_stderr(err):
                code = cli_app.main(list(args), runtime=rt)
        finally:
            sys.stdin = stdin
        out.flush()
        return CliResult(code, raw.getvalue(), err.getvalue())

    return run


@pytest.fixture
def broken_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fake installed distribution (``wb-broken 9.9``) whose entry point ``broken``
    cannot be imported: for tolerant-discovery and strict-selection tests."""
    from wbcore_runtime.plugins import manager as plugins

    site = tmp_path / "site"
    info = site / "wb_broken-9.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: wb-broken\nVersion: 9.9\n")
    (info / "entry_points.txt").write_text("[wbcore.plugins]\nbroken = wb_broken_missing.plugin\n")
    (site / "wb_broken_shapes").mkdir()
    monkeypatch.syspath_prepend(str(site))
    plugins.rescan()
    yield site
    plugins.rescan()


@pytest.fixture(scope="session")
def build_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The build sandbox the installed plugins serve, as a lane gets it from its runtime.

    Skips the test, saying why, where none is installed ("no build sandbox is installed;
    pip install wbcore-process") or it does not work on this machine.
    """
    from wbcore_runtime.contract import sandbox
    from wbcore_runtime.runtime import Runtime

    rt = Runtime.open(home=tmp_path_factory.mktemp("wb-sandbox-home"), roots=[])
    found = sandbox.availability(rt)
    if not found.ok:
        pytest.skip(found.reason)
    return rt.build_sandbox()


@dataclass(frozen=True)
class OciRegistry:
    host: str  # "127.0.0.1:PORT", for references: oci://<host>/<repo>:<tag>
    storage: Path  # the filesystem driver's root (tests tamper with blobs here)

    def blob_path(self, digest: str) -> Path:
        hexd = digest.removeprefix("sha256:")
        return self.storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexd[:2] / hexd / "data"


@pytest.fixture
def oci_registry(tmp_path: Path) -> Iterator[OciRegistry]:
    """``/usr/bin/docker-registry serve`` on a free loopback port, stopped after the test.

    Allowing loopback is left to the test (``WB_ALLOW_PRIVATE_HOSTS``, ``WB_OCI_PLAIN_HTTP``):
    the guard refuses it by default, and tests check both.
    """
    import shutil
    import socket
    import subprocess
    import time

    exe = shutil.which("docker-registry") or (
        "/usr/bin/docker-registry" if Path("/usr/bin/docker-registry").exists() else None)
    if exe is None:
        pytest.skip("docker-registry is not installed (apt-get install docker-registry): "
                    "no OCI registry to test against")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    storage = tmp_path / "registry"
    storage.mkdir()
    config = tmp_path / "registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    log = (tmp_path / "registry.log").open("wb")
    proc = subprocess.Popen([exe, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break  # listening: the registry answers from here on
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.skip("docker-registry did not start: "
                            f"{(tmp_path / 'registry.log').read_text()[-400:]}")
            time.sleep(0.05)
        yield OciRegistry(f"127.0.0.1:{port}", storage)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def add_custom_section(wasm: bytes, name: str, payload: bytes) -> bytes:
    """``wasm`` with a custom section appended (how a test embeds ``act:component``,
    ``act:skill`` or ``wbcore.runner`` into a module or component)."""

    def uleb(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    encoded = name.encode("utf-8")
    body = uleb(len(encoded)) + encoded + payload
    return bytes(wasm) + b"\x00" + uleb(len(body)) + body


class OtlpReceiver:
    """A real OTLP/HTTP traces endpoint on loopback (POST /v1/traces, protobuf, decoded with
    ``opentelemetry-proto``): ``spans`` holds every span received as a plain dict
    (name, id, parent, trace, attrs, service, status)."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        self.pb = trace_service_pb2
        self.spans: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                size = int(self.headers.get("content-length", "0"))
                assert size < 16 << 20
                body = self.rfile.read(size)
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                outer.take(self.path, body)
                reply = outer.pb.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def take(self, path: str, body: bytes) -> None:
        req = self.pb.ExportTraceServiceRequest()
        req.ParseFromString(body)
        with self.lock:
            self.paths.append(path)
            for rs in req.resource_spans:
                service = next((a.value.string_value
                                for a in rs.resource.attributes if a.key == "service.name"), None)
                for ss in rs.scope_spans:
                    for sp in ss.spans:
                        attrs = {}
                        for a in sp.attributes:
                            v = a.value
                            field = v.WhichOneof("value")
                            attrs[a.key] = ([x.string_value for x in v.array_value.values]
                                            if field == "array_value" else getattr(v, field))
                        self.spans.append({"name": sp.name, "id": sp.span_id.hex(),
                                           "parent": sp.parent_span_id.hex(),
                                           "trace": sp.trace_id.hex(), "attrs": attrs, "service": service,
                                           "status": sp.status.code})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """An :class:`OtlpReceiver` for the test (skipped when opentelemetry-proto is absent)."""
    pytest.importorskip("opentelemetry.proto")
    r = OtlpReceiver()
    yield r
    r.close()


# --- test guests in WebAssembly text ----------------------------------------------------------

#: WASI preview-1 imports the guests below use, by name: the signature of each.
WASI_SIGS = {
    "fd_read": "(param i32 i32 i32 i32) (result i32)",
    "fd_write": "(param i32 i32 i32 i32) (result i32)",
    "proc_exit": "(param i32)",
    "environ_sizes_get": "(param i32 i32) (result i32)",
    "args_sizes_get": "(param i32 i32) (result i32)",
}


def wasi(*names: str) -> str:
    """The import lines for WASI calls ``names``, each bound to ``$<name>``."""
    return "\n".join(f'(import "wasi_snapshot_preview1" "{n}" (func ${n} {WASI_SIGS[n]}))' for n in names)


#: ``(func $w (param $p i32) (param $n i32))``: writes memory[p:p+n] to stdout (iovec at 16,
#: written count at 24); for a guest that imports ``fd_write``.
WAT_WRITE = """(func $w (param $p i32) (param $n i32)
    (i32.store (i32.const 16) (local.get $p)) (i32.store (i32.const 20) (local.get $n))
    (drop (call $fd_write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 24))))"""

#: command: stdin → stdout; traps (an error, not an exit code) when stdin starts with "!"
ECHO_OR_TRAP = ("(module " + wasi("fd_read", "fd_write") + """
  (memory (export "memory") 2) """ + WAT_WRITE + """
  (func (export "_start") (local $n i32) (local $first i32) (local.set $first (i32.const 1))
    (loop $l
      (i32.store (i32.const 0) (i32.const 1024)) (i32.store (i32.const 4) (i32.const 65536))
      (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $n (i32.load (i32.const 8)))
      (if (i32.and (local.get $first) (i32.and (i32.gt_u (local.get $n) (i32.const 0))
                                               (i32.eq (i32.load8_u (i32.const 1024)) (i32.const 33))))
        (then unreachable))
      (local.set $first (i32.const 0))
      (if (i32.gt_u (local.get $n) (i32.const 0)) (then (call $w (i32.const 1024) (local.get $n)) (br $l))))))""")  # noqa: E501

#: kernel: output = input with ASCII upper-cased; in_off 1024, out_off 65536
K_UPPER = """(module (memory (export "memory") 2)
  (func (export "process") (param $n i32) (result i32) (local $i i32) (local $c i32)
    (block $e (loop $l
      (br_if $e (i32.ge_u (local.get $i) (local.get $n)))
      (local.set $c (i32.load8_u offset=1024 (local.get $i)))
      (if (i32.lt_u (i32.sub (local.get $c) (i32.const 97)) (i32.const 26))
        (then (local.set $c (i32.sub (local.get $c) (i32.const 32)))))
      (i32.store8 offset=65536 (local.get $i) (local.get $c))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (local.get $n)))"""


def burn(iterations: int) -> str:
    """A CPU-bound command: ``iterations`` rounds of integer mixing, then "ok"."""
    return ("(module " + wasi("fd_write") + """
  (memory (export "memory") 1)
  (data (i32.const 100) "ok") """ + WAT_WRITE + """
  (func (export "_start") (local $i i32) (local $x i32)
    (block $e (loop $l
      (br_if $e (i32.ge_u (local.get $i) (i32.const """ + str(iterations) + """)))
      (local.set $x (i32.add (i32.mul (local.get $x) (i32.const 1664525)) (i32.const 1013904223)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (if (i32.eq (local.get $x) (i32.const 7)) (then unreachable))
    (call $w (i32.const 100) (i32.const 2))))""")


#: A kv guest: gets key "k" through ``wb.kv`` and writes the CBOR answer to stdout.
KV_GET = """(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (import "wb" "kv" (func $kv (param i32 i32 i32 i32) (result i64)))
  (memory (export "memory") 2)
  (data (i32.const 64) "\\a2\\62op\\63get\\63key\\61k")
  (func (export "_start") (local $n i64)
    (local.set $n (call $kv (i32.const 64) (i32.const 14) (i32.const 4096) (i32.const 60000)))
    (if (i64.lt_s (local.get $n) (i64.const 0)) (then (local.set $n (i64.const 0))))
    (i32.store (i32.const 0) (i32.const 4096)) (i32.store (i32.const 4) (i32.wrap_i64 (local.get $n)))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
"""


def register_wat(rt: Any, name: str, wat: str, kind: str = "command", *, wat2wasm: Callable[[str], bytes],
                 profile: str = "compute", arg_mode: str = "argv", **options: Any) -> Any:
    """Compile ``wat`` with the engine's ``wat2wasm`` (the caller's: the core imports no
    engine, e.g. ``wasmtime.wat2wasm``), store it and register it as a ``kind`` (command or
    kernel) named ``name`` with deployer trust (no toolkit, no caps) -> ``Entry``."""
    from wbcore_runtime.store.registry import Entry

    art = rt.artifacts.put_bytes(bytes(wat2wasm(wat)))
    return rt.registry.register(Entry(kind=kind, name=name, sha256=art.sha256, shape=kind, toolkit=None,
                                      arg_mode=arg_mode, profile=profile, options=options))


# --- a loopback file server --------------------------------------------------------------------

#: A test's own answer to a GET (a redirect, a stall, an endless body): given the handler.
Route = Callable[[BaseHTTPRequestHandler], None]


class FileServer:
    """An HTTP (or, with ``tls=(cert, key)``, HTTPS) server on loopback for download tests.

    GET ``path`` answers the first of ``routes`` whose key ``path`` starts with, else
    ``files[path]`` with its Content-Length, else 404; ``hits`` lists every path asked for.
    ``files`` is used as given (not copied), so servers can share one. Use it as a context
    manager (serving inside), or through the ``file_server`` fixture.
    """

    def __init__(self, files: dict[str, bytes] | None = None, routes: Mapping[str, Route] | None = None,
                 tls: tuple[Path, Path] | None = None) -> None:
        self.files: dict[str, bytes] = files if files is not None else {}
        self.routes: dict[str, Route] = dict(routes or {})
        self.hits: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                outer.hits.append(self.path)
                route = next((r for prefix, r in outer.routes.items() if self.path.startswith(prefix)), None)
                if route is not None:
                    route(self)
                    return
                body = outer.files.get(self.path)
                if body is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port: int = self.httpd.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def __enter__(self) -> FileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def file_server() -> Iterator[FileServer]:
    """A :class:`FileServer` serving for the test, stopped after it."""
    with FileServer() as server:
        yield server


# --- git repositories ---------------------------------------------------------------------------


def git_in(repo: Path, *args: str) -> str:
    """``git -C repo ARGS`` as Ada (no system or user config read); its standard output."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo),
           "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.org", "GIT_COMMITTER_NAME": "Ada",
           "GIT_COMMITTER_EMAIL": "ada@example.org"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


@pytest.fixture
def history_repo() -> Iterator[Path]:
    """A real repository with three commits by two authors: ``notes.txt`` (``one`` by Ada, ``two``
    by Bob) and ``other.txt``; newest first, the subjects are ``third: another file``,
    ``second: a line by Ada`` (authored by Bob) and ``first: add notes``. It lives in a folder
    an isolation tier's unprivileged host uid can read (pytest's ``tmp_path`` is private to
    this user), removed after the test."""
    work = Path(tempfile.mkdtemp(prefix="wb-mount-test-"))
    try:
        os.chmod(work, 0o755)
        git_in(work, "init", "-q", "-b", "main")
        (work / "notes.txt").write_text("one\n")
        git_in(work, "add", "notes.txt")
        git_in(work, "commit", "-q", "-m", "first: add notes")
        (work / "notes.txt").write_text("one\ntwo\n")
        git_in(work, "-c", "user.name=Bob", "commit", "-q", "-a", "-m", "second: a line by Ada",
               "--author", "Bob <bob@example.org>")
        (work / "other.txt").write_text("x\n")
        git_in(work, "add", "other.txt")
        git_in(work, "commit", "-q", "-m", "third: another file")
        for path in [work, *work.rglob("*")]:  # readable by others, as a checkout usually is
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- a loopback git server (smart HTTP) --------------------------------------------------------


def git_repo(where: Path, files: Mapping[str, str], *, commits: int = 1) -> tuple[Path, str]:
    """A bare repository ``where`` holding ``files`` in its first commit (``commits`` - 1 more
    change a file called ``later``); returns (bare path, the first commit's id)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(where.parent),
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}

    def git(*args: str, cwd: Path) -> str:
        return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    work = where.with_name(where.name + ".work")
    work.mkdir(parents=True)
    git("init", "-q", "-b", "main", ".", cwd=work)
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "one", cwd=work)
    first = git("rev-parse", "HEAD", cwd=work)
    for i in range(1, commits):
        (work / "later").write_text(f"{i}\n")
        git("add", "-A", cwd=work)
        git("commit", "-q", "-m", f"change {i}", cwd=work)
    git("clone", "-q", "--bare", str(work), str(where), cwd=where.parent)
    return where, first


class GitHttpServer:
    """git's own smart-HTTP server (``git http-backend`` as CGI) on loopback, serving the bare
    repositories under ``root`` at ``/<name>``. ``hits`` lists (method, path, Host header)."""

    def __init__(self, root: Path) -> None:
        backend = shutil.which("git-http-backend") or "/usr/lib/git-core/git-http-backend"
        if not os.path.exists(backend):
            pytest.skip("git http-backend is not installed (apt-get install git)")
        self.root = root
        self.hits: list[tuple[str, str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def _cgi(self) -> None:
                outer.hits.append((self.command, self.path, self.headers.get("Host", "")))
                body = b""
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    while True:
                        size = int(self.rfile.readline().strip() or b"0", 16)
                        if size == 0:
                            self.rfile.readline()
                            break
                        body += self.rfile.read(size)
                        self.rfile.readline()
                elif self.headers.get("Content-Length"):
                    body = self.rfile.read(int(self.headers["Content-Length"]))
                path, _, query = self.path.partition("?")
                env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": str(outer.root),
                       "GIT_HTTP_EXPORT_ALL": "1", "REQUEST_METHOD": self.command, "PATH_INFO": path,
                       "QUERY_STRING": query, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                       "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1",
                       "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                       "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                       "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": str(outer.root)}
                done = subprocess.run([backend], input=body, env=env, capture_output=True, timeout=60,
                                      check=False)
                head, _, out = done.stdout.partition(b"\r\n\r\n")
                if not _:
                    head, _, out = done.stdout.partition(b"\n\n")
                status, headers = 200, []
                for line in head.decode("latin-1").splitlines():
                    name, _, value = line.partition(":")
                    if name.lower() == "status":
                        status = int(value.strip().split()[0])
                    elif name:
                        headers.append((name, value.strip()))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = _cgi
            do_POST = _cgi

            def log_message(self, *a: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def __enter__(self) -> GitHttpServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[GitHttpServer]:
    """A :class:`GitHttpServer` over ``tmp_path/git-served`` (make repositories there with
    :func:`git_repo`), stopped after the test."""
    root = tmp_path / "git-served"
    root.mkdir()
    with GitHttpServer(root) as server:
        yield server


# --- a command in a real terminal (tmux) -------------------------------------------------------


def wbx_executable() -> str:
    """The ``wbx`` entry point next to this interpreter (a skip when it is not installed)."""
    exe = Path(sys.executable).with_name("wbx")
    if not exe.exists():
        pytest.skip("the wbx entry point is not installed next to this interpreter")
    return str(exe)


def serve_on_a_busy_port(*serve: str, home: Path) -> tuple[int, subprocess.CompletedProcess[str]]:
    """Run ``wbx <serve…> --port P`` while something else listens on P (127.0.0.1): the port and
    the finished process, for tests of how a server says its port is taken."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([wbx_executable(), *serve, "--port", str(port)], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "WB_HOME": str(home)})
    return port, done


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[tuple[Callable[..., str], str]]:
    """``(cmd, name)``: ``cmd(*args)`` runs a tmux command against a server of the test's own
    (its socket in ``tmp_path``, killed after the test); ``name`` is the session name to use."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    sock = str(tmp_path / "tmux.sock")

    def cmd(*args: str) -> str:
        return subprocess.run(["tmux", "-S", sock, *args], check=True, capture_output=True, text=True,
                              timeout=10).stdout

    yield cmd, "wbshell"
    subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, timeout=10)


def wait_pane(cmd: Callable[..., str], name: str, needle: str, timeout: float = 20.0,
              every: float = 0.1) -> str:
    """The pane's last 50 lines once they show ``needle``, or as they are at ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        try:
            pane = cmd("capture-pane", "-p", "-t", name, "-S", "-50")
        except subprocess.CalledProcessError as e:
            raise AssertionError(f"the tmux session {name!r} ended before it showed {needle!r}: "
                                 f"{e.stderr}") from e
        if needle in pane or time.monotonic() > end:
            return pane
        time.sleep(every)
