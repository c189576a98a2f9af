"""Loopback servers the core's tests and the CLI's share: a folder over plain HTTP, and a pair of
file servers (HTTP and HTTPS behind a private CA) with a stalling and an endless route.

Fixtures here are not loaded into every session: a suite imports those it uses in its
``conftest.py`` (``from wbcore_testing.loopback import serve  # noqa: F401``):

``serve``       an empty folder served on 127.0.0.1: ``(root, "127.0.0.1:port")``
``pki``         a private CA (a corporate TLS-intercepting proxy's) and a localhost certificate it
                issued: ``(ca.pem, server.pem, server.key)``; skips without ``cryptography``
``https_port``  the module's HTTPS file server (that certificate), serving :data:`FILES` and
                :data:`ROUTES`; ``http_port`` the same over plain HTTP
"""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from wbcore_testing.fixtures import FileServer

#: The environment that lets a fetch reach these servers (the SSRF guard refuses loopback else).
ALLOW = {"WB_ALLOW_PRIVATE_SOURCES": "1"}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass


@contextmanager
def serve_folder(root: Path) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1 while inside; yields ``"127.0.0.1:port"``."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **kw: _Quiet(*a, directory=str(root), **kw))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """Serve a folder on 127.0.0.1; yields (root, 'host:port')."""
    root = tmp_path / "site"
    root.mkdir()
    with serve_folder(root) as host:
        yield root, host


#: What both module servers (HTTP and HTTPS) serve, by path; tests add to it.
FILES: dict[str, bytes] = {}


def _stall(handler: http.server.BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", "1000")
    handler.end_headers()
    handler.wfile.write(b"x")
    handler.wfile.flush()
    time.sleep(3)


def _endless(handler: http.server.BaseHTTPRequestHandler) -> None:
    """No Content-Length: the cap must hold while streaming."""
    handler.send_response(200)
    handler.end_headers()
    try:
        for _ in range(1000):
            handler.wfile.write(b"\0" * 65536)
    except (BrokenPipeError, ConnectionResetError):
        pass


def drip_headers(handler: http.server.BaseHTTPRequestHandler) -> None:
    """A status line, then one header byte every 0.1 s until the client leaves: each read of a
    client sees data long before any per-read timeout, so only a deadline for the whole
    exchange ends it."""
    try:
        handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Drip: ")
        while True:
            handler.wfile.flush()
            time.sleep(0.1)
            handler.wfile.write(b"x")
    except OSError:
        pass


def drip_body(handler: http.server.BaseHTTPRequestHandler) -> None:
    """A body without a length (it ends when the connection does), one byte every 0.1 s until the
    client leaves: the cut at a deadline ends it as the server closing would, early."""
    try:
        handler.wfile.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        while True:
            handler.wfile.write(b"x")
            handler.wfile.flush()
            time.sleep(0.1)
    except OSError:
        pass


def ends_within(call: Callable[[], object], within_s: float, what: str) -> tuple[BaseException | None, float]:
    """Run ``call`` in a thread, so that a client which hangs cannot hang the test: what it raised
    (None when it returned) and the seconds it took; ``AssertionError`` naming ``what`` when it
    still runs after ``within_s``."""
    got: list[BaseException | None] = [None]

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            got[0] = exc

    start = time.monotonic()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(within_s)
    assert not th.is_alive(), f"{what} still runs {within_s:g} s on"
    return got[0], time.monotonic() - start


ROUTES = {"/stall": _stall, "/endless": _endless, "/drip-headers": drip_headers, "/drip-body": drip_body}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A private CA (a corporate TLS-intercepting proxy's) and a server certificate it issued for
    localhost."""
    x509: Any = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "wbcore test intercepting proxy CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    d = tmp_path_factory.mktemp("pki")
    (d / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (d / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "server.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                     serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))
    return d / "ca.pem", d / "server.pem", d / "server.key"


def _serve(tls: tuple[Path, Path] | None) -> Iterator[int]:
    with FileServer(FILES, ROUTES, tls=tls) as srv:
        yield srv.port


@pytest.fixture(scope="module")
def https_port(pki: tuple[Path, Path, Path]) -> Iterator[int]:
    _, cert, key = pki
    yield from _serve((cert, key))


@pytest.fixture(scope="module")
def http_port() -> Iterator[int]:
    yield from _serve(None)
