"""Pytest fixtures for wbcore and its plugin authors (loaded as the ``wbcore`` pytest11 plugin).

``wb_home``      an empty ``$WB_HOME`` in a temp dir (also set in the environment)
``toolkit_root`` an empty toolkits root; ``make_toolkit(...)`` writes toolkits into it
``make_runtime`` ``make_runtime(plugins=None, roots=None)`` → a ``Runtime`` on the above
``wbx``          ``wbx(*args, runtime=None, input=None)`` → ``CliResult`` (exit code, out, err)
``broken_dist``  a fake installed distribution whose ``wbcore.plugins`` entry point cannot import
``build_sandbox`` the installed build sandbox (``runtime.build_sandbox()``), or a skip saying why
``oci_registry``  a distribution registry (Debian's ``docker-registry``) on loopback, or a skip saying why
"""

from __future__ import annotations

import gzip
import io
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator, Sequence
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
def make_runtime(wb_home: Path, toolkit_root: Path, tmp_path: Path) -> Callable[..., Any]:
    from wbcore.runtime import Runtime

    opened: list[Any] = []

    def make(plugins: Sequence[str | object] | None = None, roots: Sequence[Path] | None = None, **kw: Any) -> Any:
        rt = Runtime.open(
            plugins=plugins,
            home=kw.pop("home", wb_home),
            roots=list(roots) if roots is not None else [toolkit_root],
            cwd=kw.pop("cwd", tmp_path),
            **kw,
        )
        opened.append(rt)
        return rt

    yield make  # type: ignore[misc]
    for rt in opened:
        close = getattr(rt, "close", None)
        if callable(close):
            close()


@pytest.fixture
def wbx(make_runtime: Callable[..., Any]) -> Callable[..., CliResult]:
    """Run the CLI in-process against a runtime (default: all plugins, the temp root)."""
    from wbcore.cli import app as cli_app

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
    from wbcore import plugins

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
    pip install wb-process") or it does not work on this machine.
    """
    from wbcore import sandbox
    from wbcore.runtime import Runtime

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

    exe = shutil.which("docker-registry") or ("/usr/bin/docker-registry" if Path("/usr/bin/docker-registry").exists() else None)
    if exe is None:
        pytest.skip("docker-registry is not installed (apt-get install docker-registry): no OCI registry to test against")
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
    proc = subprocess.Popen([exe, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break  # listening: the registry answers from here on
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"docker-registry did not start: {(tmp_path / 'registry.log').read_text()[-400:]}")
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
                service = next((a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), None)
                for ss in rs.scope_spans:
                    for sp in ss.spans:
                        attrs = {}
                        for a in sp.attributes:
                            v = a.value
                            field = v.WhichOneof("value")
                            attrs[a.key] = ([x.string_value for x in v.array_value.values] if field == "array_value"
                                            else getattr(v, field))
                        self.spans.append({"name": sp.name, "id": sp.span_id.hex(), "parent": sp.parent_span_id.hex(),
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
