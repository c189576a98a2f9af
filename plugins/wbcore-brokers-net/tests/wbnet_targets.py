"""Loopback test targets for the net brokers: never the internet.

"Public" targets are served on 127.0.0.7 and named by a test resolver; the guard is
told (through its test-only ``public`` seam) that 127.0.0.7 counts as public, so every
other loopback form in the SSRF corpus is still denied.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from wbcore_testing.loopback import drip_body, drip_headers


PUBLIC_IP = "127.0.0.7"


#: Bytes the ``/endless`` route has written so far (it streams until the client hangs up).
ENDLESS_SENT = [0]


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _endless(self):
        self.send_response(200)  # no Content-Length: the body ends when the connection does
        self.send_header("Connection", "close")
        self.end_headers()
        chunk = b"x" * 65536
        try:
            while True:
                self.wfile.write(chunk)
                ENDLESS_SENT[0] += len(chunk)
        except OSError:
            pass

    def do_GET(self):
        port = self.server.server_address[1]
        if self.path == "/endless":
            return self._endless()
        if self.path == "/drip-headers":
            return drip_headers(self)
        if self.path == "/drip-body":
            return drip_body(self)
        routes = {
            "/redirect-private": f"http://127.0.0.1:{port}/ok",
            "/redirect-meta": "http://169.254.169.254/latest/meta-data/",
            "/redirect-v6": "http://[::1]/",
            "/redirect-name": f"http://evil-private.test:{port}/ok",
            "/redirect-public": "/ok",
            "/redirect-rebind": f"http://rebind.test:{port}/ok",
            "/redirect-loop": "/redirect-loop",
            "/redirect-other": f"http://other.test:{port}/headers",
            "/redirect-same": "/headers",
        }
        if self.path in routes:
            self.send_response(302)
            self.send_header("Location", routes[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/big":
            body = b"x" * (2 << 20)
        elif self.path == "/slow":
            time.sleep(3)
            body = b"late"
        elif self.path == "/headers":  # which credential headers reached this origin
            seen = {k.lower(): v for k, v in self.headers.items()}
            names = ("authorization", "cookie", "x-custom")
            body = "\n".join(f"{k}={seen.get(k, '-')}" for k in names).encode()
        elif self.path == "/page":
            body = b"<html><script>x()</script><h1>Title</h1><p>Hello &amp; bye</p></html>"
        else:
            body = b"hello from " + self.headers.get("Host", "").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass


@pytest.fixture(scope="session")
def http_target():
    srv = ThreadingHTTPServer((PUBLIC_IP, 0), _Handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


class FakeDns:
    """Names → addresses; ``rebind.test`` answers public first, private afterwards."""

    def __init__(self):
        self.calls: list[str] = []
        self.table = {
            "public.test": [PUBLIC_IP], "other.test": [PUBLIC_IP],
            "evil-private.test": ["10.0.0.5"], "evil-loop.test": ["127.0.0.1"],
            "localhost": ["127.0.0.1", "::1"], "127.0.0.1.nip.io": ["127.0.0.1"],
            "mixed.test": [PUBLIC_IP, "192.168.1.1"], "meta.test": ["169.254.169.254"],
            "v6loop.test": ["::1"], "mapped.test": ["::ffff:127.0.0.1"], "cgnat.test": ["100.100.1.1"],
            "ula.test": ["fd00::1"],
        }

    def __call__(self, host, port):
        self.calls.append(host)
        if host == "rebind.test":
            return [PUBLIC_IP] if self.calls.count(host) == 1 else ["127.0.0.1"]
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(self.table[host])


@pytest.fixture
def dns():
    return FakeDns()


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "public.test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("public.test")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    d = tmp_path_factory.mktemp("tls")
    (d / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                  serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    return d / "cert.pem", d / "key.pem"


@pytest.fixture(scope="session")
def tls_echo(tls_cert):
    """A TLS server on 127.0.0.7 that answers ``echo:<sni>:<data>`` to one read."""
    cert, key = tls_cert
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    seen: list[str] = []

    def sni_cb(sslobj, name, _ctx):
        seen.append(name)

    ctx.sni_callback = sni_cb
    lsock = socket.create_server((PUBLIC_IP, 0))
    port = lsock.getsockname()[1]
    stop = threading.Event()

    def serve():
        lsock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
            except (TimeoutError, OSError):
                continue
            try:
                with ctx.wrap_socket(conn, server_side=True) as s:
                    s.settimeout(2)
                    data = s.recv(4096)
                    s.sendall(b"echo:" + (seen[-1] if seen else "").encode() + b":" + data)
            except (ssl.SSLError, OSError):
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield port, seen
    stop.set()
    lsock.close()


@pytest.fixture(scope="session")
def tcp_echo():
    lsock = socket.create_server((PUBLIC_IP, 0))
    port = lsock.getsockname()[1]
    stop = threading.Event()

    def serve():
        lsock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                data = b""
                while chunk := conn.recv(4096):
                    data += chunk
                conn.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    yield port
    stop.set()
    lsock.close()


@pytest.fixture(scope="session")
def udp_echo():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((PUBLIC_IP, 0))
    s.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                data, addr = s.recvfrom(65535)
            except (TimeoutError, OSError):
                continue
            s.sendto(data[::-1], addr)

    threading.Thread(target=serve, daemon=True).start()
    yield s.getsockname()[1]
    stop.set()
    s.close()
