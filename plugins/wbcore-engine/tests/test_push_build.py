"""A pushed toolkit is built on the engine, in its own build sandbox, so its commands answer
at once (before, every call returned 404 until someone ran ``wbx toolkit build`` on the
engine's host); ``?build=0`` lands only, and ``POST /v1/toolkits/{id}/build`` builds later."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import httpx
import pytest

from wbcore_runtime.trust import identity, signing

pytest.importorskip("wbcore_wasmtime",
                    reason="the wat lane and the command shape (wbcore-wasmtime) build and run it")
pytest.importorskip("wbcore_sources", reason="the path: source prefix (wbcore-sources) resolves its source")

TOOLKITS = Path(__file__).resolve().parents[3] / "toolkits"
SEED0 = base64.b64encode(bytes(32)).decode()


@pytest.fixture
def pushable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A signed third-party copy of the shipped b64 toolkit (WebAssembly text, the wat lane)."""
    monkeypatch.setenv("WB_SIGNING_KEY", SEED0)
    root = tmp_path / "client"
    shutil.copytree(TOOLKITS / "b64", root / "b64")
    manifest = root / "b64" / "manifest.org"
    text = manifest.read_text()
    manifest.write_text(text.replace("#+EXEC: command\n", "#+TRUST: third-party\n#+EXEC: command\n", 1))
    signing.sign(root / "b64", identity.Identity.from_seed(bytes(32)))
    return root


def test_push_builds_then_calls_answer(pushable: Path, make_runtime, serve_engine, wbx, wb_home) -> None:
    server = make_runtime(plugins=["engine", "http-server", "install", "wasmtime", "sources"],
                          roots=[wb_home / "toolkits"])
    eng = serve_engine(server)
    client = make_runtime(roots=[pushable])
    r = wbx("toolkit", "push", "b64", eng.url, "--token", eng.token, runtime=client)
    assert r.exit_code == 0, r.stderr
    assert ("installed b64" in r.stdout
            and "build on the engine: ✓ b64: command b64 built" in r.stdout), r.stdout
    with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=30) as c:
        called = c.post("/v1/calls/b64", json={"stdin": "hello"})
        assert called.status_code == 200, called.text
        assert called.json()["stdout"] == "aGVsbG8=\n"


def test_push_without_build_then_the_build_endpoint(pushable: Path, make_runtime, serve_engine, wbx,
                                                    wb_home) -> None:
    server = make_runtime(plugins=["engine", "http-server", "install", "wasmtime", "sources"],
                          roots=[wb_home / "toolkits"])
    eng = serve_engine(server)
    client = make_runtime(roots=[pushable])
    r = wbx("toolkit", "push", "b64", eng.url, "--no-build", "--token", eng.token, runtime=client)
    assert r.exit_code == 0 and "build on the engine" not in r.stdout, r.stdout + r.stderr
    with httpx.Client(base_url=eng.url, headers=eng.auth, timeout=30) as c:
        assert c.post("/v1/calls/b64", json={"stdin": "x"}).status_code == 404  # landed, not built
        built = c.post("/v1/toolkits/b64/build")
        assert built.status_code == 200 and built.json()["state"] in ("built", "cached"), built.text
        assert c.post("/v1/calls/b64", json={"stdin": "hello"}).json()["stdout"] == "aGVsbG8=\n"
        assert c.post("/v1/toolkits/nope/build").status_code == 404
        unauthorised = httpx.post(eng.url + "/v1/toolkits/b64/build", timeout=10)
        assert unauthorised.status_code == 401
