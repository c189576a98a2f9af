"""The one fetcher (wbcore_runtime.guard.fetch): TLS against SSL_CERT_FILE, error kinds of their own, caps
while streaming."""

from __future__ import annotations

import datetime
import hashlib
import http.server
import io
import ipaddress
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wbcore_testing.fixtures import FileServer

#: How late a deadline or a cancel may show on a loaded 2-core CI machine. The bounds below rule
#: out waiting for what the deadline cuts (a 30 s sleep, a spin), an order of magnitude longer;
#: how fast the cut is belongs to bench/, not to a test.
SLACK_S = 3.0

ALLOW = {"WB_ALLOW_PRIVATE_SOURCES": "1"}


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


ROUTES = {"/stall": _stall, "/endless": _endless}


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A private CA (a corporate TLS-intercepting proxy's) and a server certificate it issued for
    localhost."""
    x509 = pytest.importorskip("cryptography.x509")
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
def https_port(pki) -> Iterator[int]:
    _, cert, key = pki
    yield from _serve((cert, key))


@pytest.fixture(scope="module")
def http_port() -> Iterator[int]:
    yield from _serve(None)


def _tarball(tmp_path: Path) -> bytes:
    tk = tmp_path / "fp"
    tk.mkdir()
    (tk / "manifest.org").write_text(
        "#+TITLE: fp\n#+TOOLKIT: fp\n#+VERSION: 1.0.0\n#+STATUS: stable\n#+TAGLINE: t.\n\n* fp :toolkit:\n")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(tk, arcname="fp")
    return buf.getvalue()


def test_wbx_install_over_https_with_the_proxy_ca(pki, https_port, tmp_path, wbx, make_runtime, wb_home,
                                                  monkeypatch):
    ca, _, _ = pki
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    body = _tarball(tmp_path)
    FILES["/fp.tar.gz"] = body
    url = f"https://localhost:{https_port}/fp.tar.gz"
    pin = hashlib.sha256(body).hexdigest()
    rt = make_runtime(env={**ALLOW, "PATH": "/usr/bin:/bin"})
    r = wbx("toolkit", "install", url, "--sha256", pin, "--first-party", runtime=rt)
    assert r.exit_code == 76 and r.stderr.startswith("wbx: tls: ") and "SSL_CERT_FILE" in r.stderr, r.stderr
    assert not (wb_home / "toolkits" / "fp").exists()
    rt = make_runtime(env={**ALLOW, "SSL_CERT_FILE": str(ca), "PATH": "/usr/bin:/bin"})
    r = wbx("toolkit", "install", url, "--sha256", pin, "--first-party", runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert (wb_home / "toolkits" / "fp" / "manifest.org").is_file()


