"""Run a js artifact: the command shape's contract (argv + stdin → stdout + exit).

``JsRunner.call`` takes the same ``wbcore.calls.CommandRequest`` the wasmtime command
runner takes and returns a ``CallResult``, so the run engine can hand it any artifact
whose ``wbcore.runner`` custom section names ``js`` (see ``artifact.runner_of``).

What the guest sees: argv (as ``scriptArgs``), stdin, and ``/app`` (the artifact's
own sources, extracted once per artifact sha256 under ``$WB_HOME/cache/js/``,
preopened read-only). No environment, no other files, no network. Limits: the
profile's memory is the wasm memory cap and (less 16 MiB) QuickJS's heap limit;
``stack_bytes`` is QuickJS's stack limit; the deadline is an epoch deadline.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wbcore.errors import InvalidArgs, Timeout

from wb_lane_js import artifact, guest, qjs
from wb_lane_js.dock import DockSink, make_folder
from wb_lane_js.lane import materialize


def _matches(dest: Path, files: Any) -> bool:
    """Whether ``dest`` holds exactly ``files`` (the artifact's own sources, byte for byte)."""
    try:
        on_disk = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file() or p.is_symlink()}
        if on_disk != set(files):
            return False
        return all(not (dest / rel).is_symlink() and (dest / rel).read_text(encoding="utf-8") == text
                   for rel, text in files.items())
    except (OSError, UnicodeDecodeError):
        return False


def app_dir(home: Path, data: bytes, sha256: str | None = None) -> Path:
    """The artifact's sources, extracted under ``home`` and checked against the artifact
    on every use (a changed or extra file is replaced, never run)."""
    sha = sha256 or hashlib.sha256(data).hexdigest()
    base = home / "cache" / "js" / "app"
    dest = base / sha
    bundle = artifact.unpack(data)
    if _matches(dest, bundle.files):
        return dest
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".x-", dir=base))
    old = base / f".old-{sha}-{os.getpid()}"
    try:
        materialize(bundle.files, tmp)
        if dest.exists():
            os.replace(dest, old)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return dest


def run_artifact(
    path: Path,
    argv: list[str],
    *,
    stdin: bytes = b"",
    home: Path,
    memory_bytes: int = 64 << 20,
    timeout_s: float = 5.0,
    stack_bytes: int = qjs.DEFAULT_STACK,
    output_bytes: int = 1 << 20,
    sha256: str | None = None,
    cancel: Any = None,
    dock: Callable[[str, bytes], tuple[int, bytes]] | None = None,
) -> guest.GuestResult:
    """Run the js artifact at ``path``; ``argv[0]`` is the command name."""
    data = path.read_bytes()
    if artifact.runner_of(path) != "js":
        raise InvalidArgs(f"{path.name} is not a js artifact (no wbcore.runner=js section)")
    app = app_dir(home, data, sha256)
    mod = qjs.module(artifact.code_part(data), home / "cache" / "js")
    args = qjs.qjs_args("/app/__wb_entry.mjs", argv, memory_bytes=memory_bytes, stack_bytes=stack_bytes)
    limits = guest.Limits(timeout_s=timeout_s, memory_bytes=memory_bytes, output_bytes=output_bytes)
    with tempfile.NamedTemporaryFile(prefix="wb-js-stdin-") as fh, tempfile.TemporaryDirectory(prefix="wb-js-dock-") as tmp:
        fh.write(stdin)
        fh.flush()
        bridge = None
        if dock is not None:
            folder, token = make_folder(Path(tmp))
            bridge = (folder, lambda out: DockSink(out, dock, folder, token))
        return qjs.run(mod, app, args, stdin=Path(fh.name), limits=limits, cancel=cancel, dock=bridge)


class JsRunner:
    """Runs js artifacts for ``CommandRequest`` s (the command shape's contract)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def call(self, req: Any) -> Any:
        from wbcore.calls import CallResult, LimitExceeded, Usage

        argv = [req.name, *req.argv]
        stdin = req.stdin
        if req.arg_mode == "stdin1" and req.argv:
            stdin = " ".join(req.argv).encode() + b"\n" + stdin
            argv = [req.name]
        prof = req.profile
        bridge: Callable[[str, bytes], tuple[int, bytes]] | None = None
        if req.caps:  # the Dock bridge, for the granted caps only (wb_lane_js.dock)
            dock = self.runtime.dock
            ctx = dock.context(principal=req.principal, caps=req.caps, timeout=req.timeout_s, toolkit=req.toolkit,
                               allowed_hosts=req.allowed_hosts)
            bridge = functools.partial(dock.call_raw, ctx)

        t0 = time.perf_counter()
        res = run_artifact(Path(req.artifact), argv, stdin=stdin, home=Path(self.runtime.home),
                           memory_bytes=prof.memory_bytes, timeout_s=req.timeout_s,
                           output_bytes=max(prof.stdout_bytes, prof.stderr_bytes), sha256=req.sha256,
                           cancel=getattr(req, "cancel", None), dock=bridge)
        wall = time.perf_counter() - t0
        if res.cancelled:
            raise Timeout(f"{req.name}: cancelled by the caller after {wall:.3f} s; the guest was stopped")
        if res.timed_out:
            raise Timeout(f"{req.name}: stopped after {wall:.3f} s: over its {req.timeout_s:g} s deadline")
        if res.truncated:
            raise LimitExceeded(f"{req.name}: output passed the cap of profile {prof.name}; output stopped", limit="stdout")
        if res.trap:
            from wbcore.calls import GuestTrap

            raise GuestTrap(f"{req.name}: guest trapped: {res.trap}")
        return CallResult(res.stdout, res.stderr, res.exit_code, Usage(wall_s=wall, bytes_out=len(res.stdout) + len(res.stderr)))
