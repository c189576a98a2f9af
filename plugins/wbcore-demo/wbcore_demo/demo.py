"""``wbx demo``: walk the shipped toolkits through what works today: discover, build,
run (commands, kernels, the ``upper`` built-in) and verify — offline: the network toolkits
read a local web site the demo serves on 127.0.0.1 (:mod:`wbcore_demo.demosite`).

What it needs beyond the core (lanes, tiers, the federation and MCP plugins) it finds through
the runtime's registries; what this machine lacks is skipped and explained, never a failure."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from wbcore_runtime.build import buildable, builder
from wbcore_runtime.contract.errors import WbError
from wbcore_runtime.guard.netguard import ENV_GUEST_PRIVATE_HOSTS, ENV_PRIVATE_HOSTS
from wbcore_runtime.store import home as _home

from wbcore_demo.demosite import DemoSite

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices


def run(runtime: RuntimeServices) -> None:
    """The demo, step by step on stdout; exits 1 (``typer.Exit``) when a step that this machine
    can run failed."""
    found = runtime.discover()
    typer.echo(f"== discover: {len(found.toolkits)} toolkit(s) in {', '.join(map(str, found.roots))}")
    for tk in found.toolkits.values():
        typer.echo(f"  {tk.id} · {tk.manifest.status} · {tk.manifest.exec or 'discovery-only'} · "
                   f"{tk.manifest.tagline}")
    for err in found.errors:
        typer.echo(f"  (malformed) {err}")
    with DemoSite() as site:
        _open_to(runtime, site)
        failed, built = _build_and_run(runtime, found, site.url)
        failed += federation(runtime, site.url)
    failed += mcp_session(runtime)
    for tk in found.toolkits.values():
        typer.echo(f"\n== verify {tk.id}")
        report = runtime.verify(tk.id)
        typer.echo(report.render())
        missing = [e.message for e in buildable.refusals(runtime, tk.manifest)
                   if isinstance(e, buildable.LaneUnavailable)] or _tier_missing(runtime, tk.manifest)
        # explained, not a failure of the demo: this machine lacks the lane or tier
        if missing and not report.ok:
            typer.echo(f"-- {tk.id} cannot run on this machine: {missing[0]}")
        failed += not report.ok and not missing
        if tk.skills:
            first = tk.skills[0]
            typer.echo(f"-- skill {tk.id}/{first.slug}: {first.summary}")
    typer.echo(f"\n== {len(found.toolkits)} toolkit(s) verified; {failed} step(s) failed")
    typer.echo(next_steps(runtime, built))
    if failed:
        raise typer.Exit(1)


DEMO_INPUT = "hello from wbx demo\n"


def _plugin_loaded(runtime: RuntimeServices, distribution: str) -> bool:
    """Whether the runtime loaded ``distribution``'s plugin (installed, and selected by
    ``WB_PLUGINS`` when that is set): the demo asks the runtime, never imports a plugin."""
    return any(i.loaded and i.origin.partition(" ")[0] == distribution for i in runtime.plugin_infos)


def _tier_missing(runtime: RuntimeServices, manifest: object) -> list[str]:
    """Why this machine cannot run the toolkit's shape: no plugin serves the shape, or no tier
    that runs it is available ([] when one is, or the shape runs in-process): the line that
    explains a toolkit this machine cannot run."""
    exec_ = manifest.exec  # type: ignore[attr-defined]
    if not exec_:
        return []
    if exec_ not in runtime.shapes:
        return [f"no installed plugin serves its shape {exec_} (wbx shapes lists those served)"]
    wanted = runtime.shapes.get(exec_).default_tier
    if wanted == "instance":
        return []
    tiers = [t for t in runtime.tiers if exec_ in t.kinds] or \
        [t for t in runtime.tiers if t.name == wanted]
    if not tiers:
        return [f"its shape {exec_} runs in tier {wanted}, which no installed plugin serves"]
    reasons = []
    for tier in tiers:
        avail = tier.available()
        if avail.ok:
            return []
        reasons.append(f"tier {tier.name}: {avail.reason}")
    return [f"its shape {exec_} needs a tier this machine lacks ({'; '.join(reasons)})"]


def next_steps(runtime: RuntimeServices, built: list[tuple[str, str]]) -> str:
    """The closing lines: which home the demo used, and commands that work as printed in a
    new shell (an absolute ``cd``, the venv's own ``wbx``, ``WB_HOME`` only when it chose)."""
    chosen = _home.choose(runtime.env, runtime.cwd)
    if chosen.path.resolve() != runtime.home.resolve():  # an embedder passed home= explicitly
        chosen = _home.Home(runtime.home, "WB_HOME")
    lines = [f"\n== home: {chosen.describe()}"]
    exe = Path(sys.executable).parent / "wbx"
    wbx = str(exe) if exe.is_file() else "wbx"
    cwd = Path(os.path.abspath(runtime.cwd))
    if exe.is_file() and exe.is_relative_to(cwd):
        wbx = str(exe.relative_to(cwd))
    lines.append("next, in a new shell:")
    lines.append(f"  cd {shlex.quote(str(cwd))}")
    if chosen.source == "WB_HOME":
        lines.append(f"  export WB_HOME={shlex.quote(str(chosen.path))}")
    lines.append(f"  {wbx} toolkit list")
    commands = [name for kind, name in built if kind == "command"]
    if commands:
        first = "b64" if "b64" in commands else commands[0]
        lines.append(f"  echo hello | {wbx} run {first}")
    kernels = [name for kind, name in built if kind == "kernel"]
    if kernels:
        lines.append(f"  echo hello | {wbx} kernel run {kernels[0]}")
    shown = next((tk for tk in runtime.discover().toolkits.values() if tk.skills), None)
    if shown is not None:
        lines.append(f"  {wbx} toolkit show {shown.id} {shown.skills[0].slug}")
    if _plugin_loaded(runtime, "wbcore-mcp"):
        lines.append(f"  {wbx} mcp serve   # the built commands as MCP tools over stdio")
    return "\n".join(lines)


def _steps(m: object, site: str = "") -> list[list[str]]:
    """``#+DEMO_ARGS``: one invocation, or several joined by `` && `` (shell words each);
    ``{site}`` is the base URL of the demo's local web site."""
    text = (m.extra("DEMO_ARGS") or "").replace("{site}", site)  # type: ignore[attr-defined]
    return [shlex.split(part) for part in text.split(" && ")] if text.strip() else [[]]


def _open_to(runtime: RuntimeServices, site: object) -> None:
    """The deployer settings that let this demo's calls reach its site on 127.0.0.1 (for this
    process only; NetGuard refuses loopback otherwise), said out loud."""
    host = "127.0.0.1"
    for name in (ENV_GUEST_PRIVATE_HOSTS, ENV_PRIVATE_HOSTS):
        runtime.env[name] = " ".join(dict.fromkeys([*runtime.env.get(name, "").split(), host]))
    typer.echo(f"\n== a local web site for the network toolkits: {site.url} "  # type: ignore[attr-defined]
               "(in this process; no internet needed)")
    typer.echo(f"  deployer settings, for this demo only: {ENV_GUEST_PRIVATE_HOSTS}={host} (a guest's net "
               f"cap may reach it; #+ALLOWED_HOSTS still narrows), {ENV_PRIVATE_HOSTS}={host} (the "
               "federation source)")


def _shown(stdout: bytes, stderr: bytes) -> str:
    """What a step printed, on one line: its text, or for binary output its size and what it said on
    stderr."""
    if b"\0" in stdout[:4096] or not _is_text(stdout):
        said = " ⏎ ".join(stderr.decode("utf-8", "replace").strip().splitlines()[:2])
        return f"{len(stdout)} bytes of binary output" + (f"; stderr: {said}" if said else "")
    text = (stdout or stderr).decode("utf-8", "replace").strip()
    return " ⏎ ".join(text.splitlines()[:3])[:110]


def _is_text(data: bytes) -> bool:
    try:
        data[:4096].decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start > 4090  # cut inside a character at the slice's end: still text
    return True


def _explain(runtime: RuntimeServices, tk: object) -> str:
    """What a toolkit that the demo does not build is for, and how to use it."""
    m = tk.manifest  # type: ignore[attr-defined]
    exec_ = m.exec or "discovery-only"
    summary = ""
    if m.exec and m.exec in runtime.shapes:
        summary = runtime.shapes.get(m.exec).summary
    if exec_ == "discovery-only":
        summary = "skills only: an agent reads them to do the work with the tools it has"
    skills = ", ".join(s.slug for s in tk.skills[:4])  # type: ignore[attr-defined]
    return (f"  {tk.id}: {exec_} — {summary or 'not a buildable shape'}; nothing to build. "  # type: ignore[attr-defined]
            f"Skills: {skills or '(none)'} (wbx toolkit show {tk.id})")  # type: ignore[attr-defined]


def _build_and_run(runtime: RuntimeServices, found: object,
                   site: str = "") -> tuple[int, list[tuple[str, str]]]:
    """Build every command/kernel/component toolkit whose lane is available and run it with
    its demo input: stdin ``#+DEMO_STDIN``, arguments ``#+DEMO_ARGS`` (several invocations
    joined by `` && ``; stdin goes to the first), a component's ``#+DEMO_CALL``
    (``function {json args}``); explain the toolkits that build nothing; call the built-in
    ``upper``. Returns how many steps failed (a command's own exit code is only shown)
    and the (kind, name) of each artifact it registered."""
    typer.echo("\n== build & run (wbx toolkit build <id>; wbx run / wbx kernel run / wbx call)")
    failed = 0
    built: list[tuple[str, str]] = []
    for tk in found.toolkits.values():  # type: ignore[attr-defined]
        m = tk.manifest
        if m.exec not in ("command", "kernel", "component") or not m.build_src:
            typer.echo(_explain(runtime, tk))
            continue
        lane = m.build_lang
        if lane and (lane not in runtime.lanes or not runtime.lanes.get(lane).availability(runtime).ok):
            why = (runtime.lanes.get(lane).availability(runtime).reason if lane in runtime.lanes
                   else "no plugin serves it")
            typer.echo(f"  {tk.id}: skipped: lane {lane} is unavailable here ({why})")
            continue
        try:
            t0 = time.monotonic()
            res = builder.build(runtime, tk.id)
            built.append((res.kind, res.name))
            how = ("cached" if res.cached
                   else f"built by lane {res.lane or 'prebuilt'} in {time.monotonic() - t0:.1f}s")
            typer.echo(f"  {tk.id}: {res.kind} {res.name} {how} → {res.sha256[:12]}…")
            stdin = (m.extra("DEMO_STDIN") or DEMO_INPUT.rstrip("\n")).encode() + b"\n"
            if "{site}" in (m.extra("DEMO_ARGS") or "") and not m.extra("DEMO_STDIN"):
                stdin = b""  # a request to the site: its arguments say everything
            if res.kind == "command":
                for i, args in enumerate(_steps(m, site)):
                    data = stdin if i == 0 else b""
                    out = runtime.call(res.name, args, data)
                    shown = _shown(out.stdout, out.stderr)
                    failed += out.exit_code != 0  # a demo step shows a real result, never a usage error
                    feed = f"echo {data.decode().strip()!r} | " if data else ""
                    typer.echo(f"    $ {feed}wbx run {shlex.join([res.name, *args])}  →  {shown}"
                               f"  (exit {out.exit_code}, {out.usage.wall_s * 1e3:.1f} ms)")
            elif res.kind == "kernel":
                body = runtime.kernel_call(res.name, stdin)
                typer.echo(f"    $ echo {stdin.decode().strip()!r} | wbx kernel run {res.name}  →  "
                           f"{body.decode('utf-8', 'replace')[:80]}")
            else:
                fn, _, raw = (m.extra("DEMO_CALL") or "").partition(" ")
                if fn:
                    result = runtime.component_call(res.name, fn, json.loads(raw or "{}"))
                    value = getattr(result, "value", result)
                    typer.echo(f"    $ wbx call {res.name}.{fn} --args '{raw}'  →  "
                               f"{json.dumps(value, ensure_ascii=False, default=str)[:110]}")
        except WbError as exc:
            failed += 1
            typer.echo(f"  {tk.id}: FAILED: {exc.kind.value}: {exc.message}")
    if "upper" not in runtime.builtins:
        typer.echo("  built-in upper: skipped: no installed plugin serves it (wbcore-wasmtime does)")
        return failed, built
    try:
        out = runtime.call("upper", [], DEMO_INPUT.encode())
        typer.echo(f"  built-in upper (WAT-built WASM): {out.stdout.decode().strip()}")
    except WbError as exc:
        failed += 1
        typer.echo(f"  built-in upper: FAILED: {exc.message}")
    return failed, built


FEDERATION_TOOLKIT = """#+TITLE: Demo releases
#+TOOLKIT: demo-releases
#+VERSION: 0.1.0
#+STATUS: experimental
#+TAGLINE: The demo site's release history as a table, read page by page from its REST API.
#+EXEC: federation
#+CAPS: net
#+URL: {site}/api/releases
#+ROWS_PATH: items
#+PAGINATION: link
#+KEY: id

* Demo releases :toolkit:
  :PROPERTIES:
  :ID:       demo-releases
  :STATUS:   experimental
  :END:

A federation toolkit the demo declares for its local site: every page (RFC 8288 Link: rel=next).
"""


def federation(runtime: RuntimeServices, site: str, *, timeout: float = 120.0) -> int:
    """The federation shape against the demo site's REST API: a toolkit declared for it in a
    scratch folder (on WB_TOOLKIT_PATH), read by ``wbx fed query`` — every page, through the
    SSRF guard, audited. Returns how many steps failed; skipped, saying why, without the plugin."""
    typer.echo("\n== federation: a REST/JSON source as a table (wbx fed query)")
    if "federation" not in runtime.shapes:
        typer.echo("  skipped: no installed plugin serves the federation shape (wbcore-federation does)")
        return 0
    with tempfile.TemporaryDirectory(prefix="wbx-demo-fed-") as tmp:
        folder = Path(tmp) / "demo-releases"
        folder.mkdir()
        (folder / "manifest.org").write_text(FEDERATION_TOOLKIT.replace("{site}", site), encoding="utf-8")
        typer.echo(f"  declared demo-releases (#+EXEC: federation, #+URL: {site}/api/releases, "
                   "#+PAGINATION: link) in a scratch folder on WB_TOOLKIT_PATH")
        env = {**os.environ, **runtime.env, "WB_HOME": str(runtime.home), "WB_TOOLKIT_PATH": tmp}
        cmd = ["fed", "query", "demo-releases", "demo_releases"]
        try:
            done = subprocess.run([sys.executable, "-m", "wbcore_runtime", *cmd], env=env,
                                  cwd=str(runtime.cwd), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            typer.echo(f"  FAILED: wbx {' '.join(cmd)} took longer than {timeout:.0f} s")
            return 1
    typer.echo(f"    $ wbx {' '.join(cmd)}")
    if done.returncode != 0:
        typer.echo(f"  FAILED (exit {done.returncode}): {done.stderr.strip()[-300:]}")
        return 1
    for line in done.stdout.rstrip().splitlines()[:8]:
        typer.echo(f"      {line}")
    return 0


def mcp_session(runtime: RuntimeServices, *, timeout: float = 120.0) -> int:
    """An MCP client (the official SDK, over stdio) against ``wbx mcp serve`` on this
    runtime's home: list the tools, call ``b64.b64``, list and read a skill. Returns how
    many steps failed; skipped, saying why, when the SDK or the MCP plugin is missing."""
    typer.echo("\n== MCP: an MCP client session against `wbx mcp serve` (stdio)")
    if not _plugin_loaded(runtime, "wbcore-mcp") or find_spec("mcp") is None:
        typer.echo("  skipped: the MCP plugin (wbcore-mcp, with the mcp SDK) is not installed")
        return 0
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = {**os.environ, "WB_HOME": str(runtime.home)}
    params = StdioServerParameters(command=sys.executable, args=["-m", "wbcore_runtime", "mcp", "serve"],
                                   env=env, cwd=str(runtime.cwd))

    errlog: Any = sys.stderr  # the server's own messages (a build's progress) show as they come
    try:
        errlog.fileno()
    except (OSError, ValueError, AttributeError):  # a captured stderr (tests): the server's stays quiet
        errlog = open(os.devnull, "w")  # noqa: SIM115 - closed below

    async def session() -> None:
        with anyio.fail_after(timeout):
            async with stdio_client(params, errlog=errlog) as (read, write), \
                    ClientSession(read, write) as client:
                init = await client.initialize()
                typer.echo(f"  initialize → {init.server_info.name} {init.server_info.version}")
                tools = (await client.list_tools()).tools
                names = [t.name for t in tools]
                typer.echo(f"  tools/list → {len(names)} tools: "
                           f"{', '.join(names[:12])}{' …' if len(names) > 12 else ''}")
                if "b64.b64" in names:
                    called = await client.call_tool("b64.b64", {"stdin": "hello from MCP"})
                    text = "".join(getattr(c, "text", "") for c in called.content).strip()
                    typer.echo(f"  tools/call b64.b64 {{stdin: 'hello from MCP'}} → {text}"
                               + ("  (error)" if called.is_error else ""))
                resources = (await client.list_resources()).resources
                typer.echo(f"  resources/list → {len(resources)} skills (skill://<toolkit>/<slug>)")
                uri = "skill://b64/SKILL.md"
                if any(str(r.uri) == uri for r in resources):
                    got = await client.read_resource(uri)
                    text = getattr(got.contents[0], "text", "")  # a skill is text; a blob has none
                    first = next((ln for ln in text.splitlines() if ln.startswith("description:")), "")
                    typer.echo(f"  resources/read {uri} → {first[:110]}")

    try:
        anyio.run(session)
    except Exception as exc:  # noqa: BLE001 - a failed session is a failed demo step, shown with its cause
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]  # type: ignore[assignment]
        typer.echo(f"  FAILED: {type(exc).__name__}: {exc}")
        return 1
    finally:
        if errlog is not sys.stderr:
            errlog.close()
    return 0
