"""The js lane driver: check the toolkit's modules inside QuickJS, then pack the artifact.

"Compile" here is QuickJS compiling every module (and what it imports) without
evaluating any of it, inside the same wasm sandbox that later runs it: a syntax error
or a missing relative import fails the build with ``file:line:col``. The artifact is
the reactor plus the sources (see :mod:`wbcore_lane_js.artifact`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wbcore_runtime.contract import guest
from wbcore_runtime.build import BuildFailed, BuildOutput, BuildRequest
from wbcore_runtime.contract.errors import InvalidArgs, Timeout

from wbcore_lane_js import artifact, qjs, snapshot
from wbcore_lane_js.plugin import no_flags

JS_DIR = Path(__file__).parent / "js"
SOURCE_SUFFIXES = (".js", ".mjs", ".json")
ENTRY_CANDIDATES = ("main.mjs", "main.js", "index.mjs", "index.js")
MAX_FILES = 2000
RESERVED = ("__wb_entry.mjs", "__wb_check.mjs")


def collect(root: Path, suffixes: tuple[str, ...] = SOURCE_SUFFIXES) -> dict[str, str]:
    """Every source file under ``root`` (no hidden dirs, no symlinks), as text."""
    files: dict[str, str] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "node_modules")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if not name.endswith(suffixes) or path.is_symlink():
                continue
            rel = path.relative_to(root).as_posix()
            if rel in RESERVED:
                raise InvalidArgs(f"js: {rel} is a reserved file name")
            data = path.read_bytes()
            total += len(data)
            if len(files) >= MAX_FILES or total > artifact.MAX_BUNDLE_BYTES:
                raise InvalidArgs(
                    f"js: sources under {root} exceed {MAX_FILES} files or {artifact.MAX_BUNDLE_BYTES} bytes"
                )
            try:
                files[rel] = data.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidArgs(f"js: {rel} is not UTF-8 text") from None
    return files


#: The Dock's JS SDK, added by the lane to every bundle (the core's one copy).
SDK_FILE = "wb_dock.js"


def with_sdk(files: dict[str, str]) -> dict[str, str]:
    """``files`` plus the core's ``wb_dock.js`` at the bundle root (``import … from
    './wb_dock.js'``). A toolkit's own file of that name is refused: it could drift from
    the bridge the runner speaks, or carry other code under a trusted name."""
    from wbcore_runtime.dispatch.dock import SDK

    if SDK_FILE in files:
        raise InvalidArgs(
            f"js: {SDK_FILE} is the Dock SDK the lane adds to every bundle (wbcore_runtime/sdk/{SDK_FILE}); "
            "delete your copy and keep importing './wb_dock.js'"
        )
    return {**files, SDK_FILE: (SDK / SDK_FILE).read_text(encoding="utf-8")}


def pick_entry(files: dict[str, str], entry: str | None, root: Path) -> str:
    if entry:
        if entry not in files:
            raise InvalidArgs(f"js: entry {entry!r} is not a .js/.mjs file under {root}")
        return entry
    for cand in ENTRY_CANDIDATES:
        if cand in files:
            return cand
    scripts = [f for f in files if f.endswith((".js", ".mjs"))]
    if len(scripts) == 1:
        return scripts[0]
    raise InvalidArgs(
        f"js: cannot tell the entry module under {root}: name it main.js (or BUILD_SRC path:<dir>/<file>.js)"
    )


def materialize(files: dict[str, str] | Any, dest: Path) -> None:
    for rel, text in files.items():
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts or not parts:
            raise InvalidArgs(f"js bundle path {rel!r} is not a plain relative path")
        p = dest / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


def entry_module(entry: str) -> str:
    import json

    text = (JS_DIR / "entry.mjs").read_text()
    return text.replace("'/app/@ENTRY@'", json.dumps("/app/" + entry))


@dataclass
class JsLane:
    """Checks and packs an ES-module program for QuickJS-NG."""

    home: Path
    guests: guest.GuestRunner  # the runtime's WASI guest runner (contract.guest.runner)
    limits: guest.GuestLimits = field(
        default_factory=lambda: guest.GuestLimits(timeout_s=60.0, memory_bytes=256 << 20)
    )

    @classmethod
    def for_runtime(cls, runtime: Any) -> JsLane:
        env = getattr(runtime, "env", {}) or {}
        return cls(
            home=Path(runtime.home),
            guests=guest.runner(runtime),
            limits=guest.GuestLimits(
                timeout_s=float(env.get("WB_BUILD_TIMEOUT", "60")), memory_bytes=256 << 20
            ),
        )

    @property
    def version(self) -> str:
        r = qjs.reactor()
        parts = hashlib.sha256(
            (JS_DIR / "entry.mjs").read_bytes() + (JS_DIR / "check.mjs").read_bytes()
        ).hexdigest()
        from wbcore_runtime.dispatch.dock import sdk_digest

        return (f"quickjs-ng reactor {r.version} ({r.sha256[:12]}); wbcore entry {parts[:12]}; "
                f"snapshot {snapshot.DIGEST[:12]}; "
                f"{SDK_FILE} {sdk_digest(SDK_FILE)[:12]}")

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache" / "js"

    def check(self, files: dict[str, str], names: list[str]) -> str:
        """Compile ``names`` (and their imports) in QuickJS without running them; the log."""
        r = qjs.reactor()
        mod = qjs.module(r.path.read_bytes(), self.cache_dir, self.guests)
        with tempfile.TemporaryDirectory(prefix="wb-js-check-") as tmp:
            app = Path(tmp)
            materialize(files, app)
            shutil.copyfile(JS_DIR / "check.mjs", app / "__wb_check.mjs")
            argv = qjs.qjs_args(
                "/app/__wb_check.mjs", ["/app/" + n for n in names], memory_bytes=self.limits.memory_bytes
            )
            res = qjs.run(mod, app, argv, stdin=None, limits=self.limits)
        log = (res.stdout + res.stderr).decode("utf-8", "replace")
        if res.timed_out:
            raise Timeout(f"js: checking the modules took over {self.limits.timeout_s:g}s")
        if res.exit_code != 0:
            first = next((ln for ln in log.splitlines() if ln.strip()), res.trap or f"exit {res.exit_code}")
            raise BuildFailed(f"js: {first}", log=log)
        return log

    def pack(self, files: dict[str, str], entry: str, outdir: Path, name: str) -> Path:
        bundle = artifact.Bundle(entry=entry, files={**files, "__wb_entry.mjs": entry_module(entry)})
        # The guest pre-initialized (QuickJS, std, the entry's globals): see wbcore_lane_js.snapshot
        with tempfile.TemporaryDirectory(prefix="wb-js-snap-") as tmp:
            materialize(bundle.files, Path(tmp))
            argv = qjs.qjs_args("/app/__wb_entry.mjs", [], memory_bytes=qjs.SNAPSHOT_MEMORY)
            wasm = snapshot.take(qjs.reactor().path.read_bytes(), Path(tmp), argv, limits=self.limits,
                                 cache_dir=self.cache_dir, guests=self.guests)
        data = artifact.pack(wasm, bundle, snapshot=True)
        qjs.module(wasm, self.cache_dir, self.guests)  # compiled now (cached on disk), not at the first call
        outdir.mkdir(parents=True, exist_ok=True)
        out = outdir / f"{name}.wasm"
        out.write_bytes(data)
        return out

    def build(self, request: BuildRequest) -> BuildOutput:
        src = request.source.dir
        if src is None:
            raise InvalidArgs("js builds a source folder; this BUILD_SRC resolved to a prebuilt artifact")
        no_flags("js")(request.flags)
        files = collect(src)
        entry = pick_entry(files, request.source.entry, src)
        files = with_sdk(files)
        modules = sorted(f for f in files if f.endswith((".js", ".mjs")))
        if request.progress:
            request.progress(f"quickjs: checking {len(modules)} module(s)")
        log = self.check(files, modules)
        name = request.manifest.cli_bin or request.manifest.id
        out = self.pack(files, entry, request.outdir, name)
        return BuildOutput(
            artifact=out, log=f"checked {len(modules)} module(s) in QuickJS-NG; entry {entry}\n{log}"
        )
