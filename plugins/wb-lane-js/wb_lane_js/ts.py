"""The ts lane: TypeScript type-stripped by the TypeScript compiler inside QuickJS,
then built exactly like the js lane.

The compiler (``vendor/typescript.js``, typescript 5.9.3, pinned by sha256) runs in the
same sandbox as js programs: QuickJS-NG's reactor wasm in wasmtime, seeing only a
read-only ``/app`` with the sources and the compiler. Each ``.ts``/``.mts`` file goes
through ``ts.transpileModule`` (syntax errors fail the build with ``file:line:col``;
types are erased, not checked: run ``tsc --noEmit`` elsewhere for that). Relative
imports may name ``./x.ts`` or ``./x.js``; both reach the emitted ``x.js``.

Measured here: parsing the 9 MB compiler takes ~2.8 s, so the lane compiles it to QuickJS
bytecode once (~1.1 s, cached under ``$WB_HOME/cache/js`` with its sha256) and later
builds load that in ~0.15 s; each file then takes ~50 ms.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import shutil
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from wbcore.build import BuildFailed, BuildOutput, BuildRequest
from wbcore.errors import Internal, InvalidArgs, Timeout

from wb_lane_js import guest, qjs
from wb_lane_js.lane import JS_DIR, JsLane, collect, materialize, pick_entry
from wb_lane_js.plugin import no_flags

VENDOR = Path(__file__).parent / "vendor"
TYPESCRIPT = VENDOR / "typescript.js"
TYPESCRIPT_VERSION = "5.9.3"
TYPESCRIPT_SHA256 = "3ae902c92cc44dace175c0e69e13a4b0899f6983c6121d76b9ab8dd5795e7675"
TS_SUFFIXES = (".ts", ".mts")
ENTRY_CANDIDATES = ("main.ts", "main.mts", "index.ts", "index.mts")


@cache
def compiler_ok() -> str:
    """'' when the vendored compiler is present and intact, else why not."""
    if not TYPESCRIPT.is_file():
        return f"the vendored TypeScript compiler is missing ({TYPESCRIPT})"
    got = hashlib.sha256(TYPESCRIPT.read_bytes()).hexdigest()
    if got != TYPESCRIPT_SHA256:
        return f"vendor/typescript.js digest {got[:12]}… is not the pinned {TYPESCRIPT_SHA256[:12]}…"
    return ""


def check() -> Any:
    from wbcore.records import Availability

    base = qjs.check()
    if not base.ok:
        return base
    why = compiler_ok()
    return Availability.no(why) if why else Availability.yes(f"typescript {TYPESCRIPT_VERSION} in {base.reason}")


_REFERENCE = re.compile(r"""^\s*///\s*<reference\s+path\s*=\s*["']([^"']*)["']""")


def refuse_outside_references(files: dict[str, str]) -> None:
    """``/// <reference path="...">`` must name a file inside the source folder. The
    compiler runs inside QuickJS with only the source materialized, so an outside path
    could never be read; refusing it says so instead of building without it."""
    for name, text in files.items():
        for lineno, line in enumerate(text.splitlines(), 1):
            m = _REFERENCE.match(line)
            if not m:
                continue
            target = posixpath.normpath(posixpath.join(posixpath.dirname(name), m.group(1)))
            if m.group(1).startswith("/") or target == ".." or target.startswith("../") or target not in files:
                raise InvalidArgs(f"ts: {name}:{lineno}: /// <reference path=\"{m.group(1)}\"> names a file outside "
                                  "the source folder (or one that is not there); references must stay inside it")


@dataclass
class TsLane(JsLane):
    """Type-strips ``.ts`` in QuickJS, then checks and packs like :class:`JsLane`."""

    @classmethod
    def for_runtime(cls, runtime: Any) -> TsLane:
        env = getattr(runtime, "env", {}) or {}
        return cls(home=Path(runtime.home), limits=guest.Limits(timeout_s=float(env.get("WB_BUILD_TIMEOUT", "120")), memory_bytes=1 << 30))

    @property
    def version(self) -> str:
        tsc = hashlib.sha256((JS_DIR / "tsc.mjs").read_bytes() + (JS_DIR / "tsc-bytecode.mjs").read_bytes()).hexdigest()
        return f"{JsLane.version.fget(self)}; typescript {TYPESCRIPT_VERSION} transpileModule ({tsc[:12]})"  # type: ignore[attr-defined]

    def bytecode(self, mod: Any, reactor_sha: str) -> Path | None:
        """The compiler as QuickJS bytecode, made once (inside the sandbox) and kept under
        ``$WB_HOME/cache/js`` with its sha256; ``None`` if it cannot be made."""
        path = self.cache_dir / f"typescript-{TYPESCRIPT_SHA256[:16]}-qjs-{reactor_sha[:12]}.qbc"
        sums = Path(str(path) + ".sha256")
        if path.is_file() and sums.is_file():
            if hashlib.sha256(path.read_bytes()).hexdigest() == sums.read_text().strip():
                return path
        with tempfile.TemporaryDirectory(prefix="wb-ts-bc-") as tmp:
            app = Path(tmp)
            shutil.copyfile(TYPESCRIPT, app / "__wb_typescript.js")
            shutil.copyfile(JS_DIR / "tsc-bytecode.mjs", app / "__wb_tsc_bytecode.mjs")
            argv = qjs.qjs_args("/app/__wb_tsc_bytecode.mjs", [], memory_bytes=self.limits.memory_bytes)
            res = qjs.run(mod, app, argv, stdin=None, limits=guest.Limits(self.limits.timeout_s, self.limits.memory_bytes, output_bytes=64 << 20))
        if res.exit_code != 0 or res.truncated or not res.stdout:
            return None
        qjs._atomic(path, res.stdout)
        qjs._atomic(sums, hashlib.sha256(res.stdout).hexdigest().encode())
        return path

    def transpile(self, sources: dict[str, str]) -> dict[str, str]:
        why = compiler_ok()
        if why:
            raise Internal(f"ts lane unavailable: {why}")
        r = qjs.reactor()
        mod = qjs.module(r.path.read_bytes(), self.cache_dir)
        names = sorted(sources)
        bytecode = self.bytecode(mod, r.sha256)
        with tempfile.TemporaryDirectory(prefix="wb-ts-") as tmp:
            app = Path(tmp)
            materialize(sources, app)
            if bytecode is not None:
                shutil.copyfile(bytecode, app / "__wb_typescript.qbc")
            else:
                shutil.copyfile(TYPESCRIPT, app / "__wb_typescript.js")
            shutil.copyfile(JS_DIR / "tsc.mjs", app / "__wb_tsc.mjs")
            argv = qjs.qjs_args("/app/__wb_tsc.mjs", ["/app/" + n for n in names], memory_bytes=self.limits.memory_bytes)
            limits = guest.Limits(self.limits.timeout_s, self.limits.memory_bytes, output_bytes=64 << 20)
            res = qjs.run(mod, app, argv, stdin=None, limits=limits)
        if res.timed_out:
            raise Timeout(f"ts: the TypeScript compiler took over {self.limits.timeout_s:g}s")
        if res.exit_code != 0 or res.truncated:
            log = res.stderr.decode("utf-8", "replace")
            raise BuildFailed(f"ts: the TypeScript compiler failed ({res.trap or f'exit {res.exit_code}'})", log=log)
        doc = json.loads(res.stdout)
        if doc["errors"]:
            raise BuildFailed(f"ts: {doc['errors'][0]}", log="\n".join(doc["errors"]))
        return dict(doc["files"])

    def build(self, request: BuildRequest) -> BuildOutput:
        src = request.source.dir
        if src is None:
            raise InvalidArgs("ts builds a source folder; this BUILD_SRC resolved to a prebuilt artifact")
        no_flags("ts")(request.flags)
        everything = collect(src, (".ts", ".mts", ".js", ".mjs", ".json", ".tsx"))
        if any(n.endswith(".tsx") for n in everything):
            raise InvalidArgs("ts: .tsx (JSX) is not supported")
        ts_files = {n: t for n, t in everything.items() if n.endswith(TS_SUFFIXES) and not n.endswith((".d.ts", ".d.mts"))}
        if not ts_files:
            raise InvalidArgs(f"ts: no .ts files under {src}")
        refuse_outside_references(everything)
        if request.progress:
            request.progress(f"typescript {TYPESCRIPT_VERSION}: type-stripping {len(ts_files)} file(s) inside QuickJS")
        emitted = self.transpile(ts_files)
        files = {n: t for n, t in everything.items() if n.endswith((".js", ".mjs", ".json"))}
        for name, text in emitted.items():
            if name in files:
                raise InvalidArgs(f"ts: {name} exists and is also emitted from TypeScript")
            files[name] = text
        want = request.source.entry
        if want and want.endswith(TS_SUFFIXES):
            want = want.replace(".mts", ".mjs") if want.endswith(".mts") else want[:-3] + ".js"
        if not want:
            want = next((c.replace(".mts", ".mjs").replace(".ts", ".js") for c in ENTRY_CANDIDATES if c in ts_files), None)
        entry = pick_entry(files, want, src)
        modules = sorted(f for f in files if f.endswith((".js", ".mjs")))
        log = self.check(files, modules)
        out = self.pack(files, entry, request.outdir, request.manifest.cli_bin or request.manifest.id)
        return BuildOutput(artifact=out, log=f"type-stripped {len(ts_files)} file(s) with typescript {TYPESCRIPT_VERSION}; "
                                             f"checked {len(modules)} module(s); entry {entry}\n{log}")
