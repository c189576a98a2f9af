"""``wbx toolkit install`` of an archive over HTTPS through a private CA: refused (``tls``, exit 76)
without it, installed with it in ``SSL_CERT_FILE``."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

from wbcore_testing.loopback import ALLOW, FILES


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


