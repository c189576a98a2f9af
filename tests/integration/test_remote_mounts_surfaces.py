"""Host folders asked for by remote callers (issue 25 item 7): the engine API's ``mounts``, MCP's
``_meta`` ``wbcore/mounts`` and a pipeline box's ``:MOUNTS:`` reach a posix command at tier
container, granted by ``dispatch.mounts.grant`` only inside the deployer's ``WB_MOUNT_ROOTS``."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

bwrap = pytest.importorskip("wbcore_container.bwrap")
pytestmark = pytest.mark.skipif(not bwrap.probe()[0], reason="needs bubblewrap")

from wbcore_audit_trail import reader  # noqa: E402
from wbcore_runtime.build import builder  # noqa: E402
from wbcore_runtime.dispatch import mounts  # noqa: E402
from wbcore_testing.fixtures import manifest_text, write_toolkit  # noqa: E402

TOKEN = "remote-mounts-test-token-0123456789"
SECRET = "lines from the mounted folder\n"


@pytest.fixture
def shared(request: pytest.FixtureRequest) -> Path:
    """``<root>/data/notes.txt`` and ``<root>/escape`` → a folder outside the root, in a
    folder the container's unprivileged host uid can reach (pytest's tmp_path is private)."""
    work = Path(tempfile.mkdtemp(prefix="wb-remote-mount-"))
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    (work / "root" / "data").mkdir(parents=True)
    (work / "root" / "data" / "notes.txt").write_text(SECRET)
    (work / "outside").mkdir()
    (work / "outside" / "notes.txt").write_text("not for remote callers\n")
    (work / "root" / "escape").symlink_to(work / "outside")
    for path in [work, *work.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return work


@pytest.fixture
def runtime_with(make_runtime, toolkit_root: Path) -> Callable[..., Any]:
    """``runtime_with(roots)``: a runtime holding posix toolkit ``catkit`` (command ``cat``),
    with ``WB_MOUNT_ROOTS`` set to ``roots`` (``None``: unset)."""
    write_toolkit(toolkit_root, "catkit", manifest_text("catkit", exec="posix", extra={"CLI_BIN": "cat"}))

    def make(roots: str | None) -> Any:
        env = {k: v for k, v in os.environ.items() if k != mounts.ROOTS_ENV}
        if roots is not None:
            env[mounts.ROOTS_ENV] = roots
        rt = make_runtime(env=env)
        rt.discover(refresh=True)
        builder.build(rt, "catkit")
        return rt

    return make


@pytest.fixture
def engine() -> Iterator[Callable[[Any], str]]:
    """``engine(runtime)`` → the URL of a real engine on loopback (the served HTTP server in a thread)."""
    from wbcore_engine import app as engine_app
    from wbcore_runtime.contract import http_server

    servers: list[tuple[Any, threading.Thread]] = []

    def start(runtime: Any) -> str:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        limits = engine_app.EngineLimits()
        served = http_server.service(runtime)
        asgi = engine_app.build(runtime, token=TOKEN, served=served, bind="127.0.0.1", limits=limits)
        uv = served.server(asgi, host="127.0.0.1", port=port, limits=limits.server, log_level="warning",
                           lifespan="off")
        thread = threading.Thread(target=uv.run, daemon=True)
        thread.start()
        servers.append((uv, thread))
        for _ in range(400):
            if uv.started:
                break
            threading.Event().wait(0.025)
        assert uv.started, "the engine did not start"
        return f"http://127.0.0.1:{port}"

    yield start
    for uv, thread in servers:
        uv.should_exit = True
        thread.join(timeout=10)


def _audit(rt: Any) -> list[dict[str, Any]]:
    return [e for e in reader.tail(rt.dock.audit, 20) if e.get("cap") == "mount"]


def test_the_engine_api_mounts_only_inside_the_deployers_roots(runtime_with, engine, shared: Path) -> None:
    data = shared / "root" / "data"
    body = {"argv": ["/data/notes.txt"], "mounts": [f"{data}:/data"]}
    auth = {"authorization": f"Bearer {TOKEN}"}
    # unset: refused, naming the setting; the command never ran
    url = engine(runtime_with(None))
    r = httpx.post(f"{url}/v1/calls/cat", json=body, headers=auth, timeout=60)
    assert r.status_code == 403, r.text
    assert r.json()["error"] == "capability-denied" and "WB_MOUNT_ROOTS" in r.json()["message"]
    # set: the posix command, at tier container, reads the file through the mount
    rt = runtime_with(str(shared / "root"))
    url = engine(rt)
    r = httpx.post(f"{url}/v1/calls/cat", json=body, headers=auth, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["stdout"] == SECRET and r.json()["usage"]["tier"] == "container"
    granted = _audit(rt)[-1]
    assert (granted["principal"] == "engine" and granted["outcome"] == "allowed"
            and str(data) in granted["target"])
    # a link inside the root to a folder outside it is judged by where it leads
    r = httpx.post(f"{url}/v1/calls/cat", json={**body, "mounts": [f"{shared / 'root' / 'escape'}:/data"]},
                   headers=auth, timeout=60)
    assert r.status_code == 403 and "outside WB_MOUNT_ROOTS" in r.json()["message"]
    assert _audit(rt)[-1]["outcome"] == "denied"
    # bounded before the disk is asked: five mounts, or a spec over 4096 bytes, is a 400
    for bad in ([f"{data}:/d{i}" for i in range(5)], ["/" + "x" * 4100]):
        r = httpx.post(f"{url}/v1/calls/cat", json={**body, "mounts": bad}, headers=auth, timeout=60)
        assert r.status_code == 400 and r.json()["error"] == "invalid-args", r.text


def test_an_mcp_client_mounts_through_meta_only_inside_the_roots(runtime_with, shared: Path) -> None:
    import anyio
    from mcp import Client

    from wbcore_mcp.server import MOUNTS_META, build_server

    data = shared / "root" / "data"

    async def call(rt: Any, spec: str) -> Any:
        server = build_server(rt)
        async with Client(server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert "wbcore/mounts" not in str(tools["catkit.cat"].input_schema)  # the schema stays the tool's
            return await client.call_tool("catkit.cat", {"args": ["/data/notes.txt"]},
                                          meta={MOUNTS_META: [spec]})

    refused = anyio.run(call, runtime_with(None), f"{data}:/data")
    assert refused.is_error and "WB_MOUNT_ROOTS" in refused.content[0].text
    rt = runtime_with(str(shared / "root"))
    got = anyio.run(call, rt, f"{data}:/data")
    assert not got.is_error, got.content
    assert got.content[0].text == SECRET
    assert _audit(rt)[-1]["principal"] == "mcp" and _audit(rt)[-1]["outcome"] == "allowed"
    outside = anyio.run(call, rt, f"{shared / 'outside'}:/data")
    assert outside.is_error and "WB_MOUNT_ROOTS" in outside.content[0].text


def test_wbx_mcp_serve_over_stdio_takes_the_mounts_from_meta_on_its_lean_path(
        runtime_with, shared: Path, wb_home: Path, toolkit_root: Path) -> None:
    """The served process (stdio answers tools/call on the lean path, ``wbcore_mcp.fastpath``)
    reads ``WB_MOUNT_ROOTS`` from its own environment."""
    import sys

    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    runtime_with(None)  # builds catkit into wb_home
    data = shared / "root" / "data"
    env = {"WB_HOME": str(wb_home), "WB_TOOLKITS_ROOT": str(toolkit_root), "PATH": os.environ.get("PATH", ""),
           mounts.ROOTS_ENV: str(shared / "root")}
    params = StdioServerParameters(command=sys.executable, env=env, args=[
        "-c", "from wbcore_cli.app import run; run()", "mcp", "serve"])

    async def main() -> tuple[Any, Any]:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.list_tools()
                args = {"args": ["/data/notes.txt"]}
                ok = await session.call_tool("catkit.cat", args, meta={"wbcore/mounts": [f"{data}:/data"]})
                out = await session.call_tool("catkit.cat", args,
                                              meta={"wbcore/mounts": [f"{shared}/root/escape:/data"]})
                return ok, out

    ok, out = anyio.run(main)
    assert not ok.is_error and ok.content[0].text == SECRET, ok.content
    assert out.is_error and "outside WB_MOUNT_ROOTS" in out.content[0].text


def test_a_pipeline_box_mounts_for_the_deployer_and_for_a_remote_run_only_inside_the_roots(
        runtime_with, shared: Path) -> None:
    from wbcore_fabric_local import pipeline as pl

    data = shared / "outside"  # not under the roots: the deployer may, a remote run may not
    text = f"""* read :pipeline:
** pipe :stage:
   :PROPERTIES:
   :RUN: cat /data/notes.txt
   :MOUNTS: {data}:/data:ro
   :TIER: container
   :END:
"""
    (p,) = pl.parse(text)
    assert p.stages[0].boxes[0].mounts == (f"{data}:/data:ro",)
    rt = runtime_with(str(shared / "root"))
    res = p.run(rt, keep=False)
    assert res.success, res.error
    assert res.output == b"not for remote callers\n"
    remote = p.run(rt, keep=False, remote="engine")
    assert not remote.success and remote.error is not None and "outside WB_MOUNT_ROOTS" in remote.error
    inside = pl.parse(text.replace(str(data), str(shared / "root" / "data")))[0].run(
        rt, keep=False, remote="engine")
    assert inside.success and inside.output == SECRET.encode()
    with pytest.raises(Exception, match="at most 4"):
        pl.parse(text.replace(f"{data}:/data:ro", " ".join(f"{data}:/d{i}" for i in range(5))))
