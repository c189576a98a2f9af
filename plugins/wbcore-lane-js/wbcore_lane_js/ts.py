"""The ts lane: TypeScript type-stripped by the TypeScript compiler inside QuickJS,
then built exactly like the js lane.

The compiler (``lib/typescript.js`` of the npm package ``typescript@5.9.3``) is not part of
the repository: it is fetched once from the npm registry through the core fetcher (the
tarball pinned by sha256, the file checked against its own sha256) into
``$WB_NPM_CACHE`` (default ``~/.cache/wbcore/npm``) — by ``python -m wbcore_lane_js fetch``
(``dev.py setup`` and CI run it) or by the first ts build. It runs in the
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
import os
import posixpath
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wbcore_runtime.contract import guest
from wbcore_runtime.store.artifacts import atomic_write
from wbcore_runtime.build import BuildFailed, BuildOutput, BuildRequest
from wbcore_runtime.contract.errors import InvalidArgs, Timeout, WbError
from wbcore_runtime.guard import paths

from wbcore_lane_js import qjs
from wbcore_lane_js.lane import JS_DIR, JsLane, collect, materialize, pick_entry, with_sdk
from wbcore_lane_js.plugin import no_flags

TYPESCRIPT_VERSION = "5.9.3"
TYPESCRIPT_SHA256 = (
    "3ae902c92cc44dace175c0e69e13a4b0899f6983c6121d76b9ab8dd5795e7675"  # package/lib/typescript.js
)
TYPESCRIPT_TGZ_SHA256 = "10e108c9cf7d5f2879053dff18515fb405abf2ccef63eaaf017d9c571687a1d3"
#: What is kept from the tarball: the compiler and its license texts (Apache-2.0).
KEEP = {"package/lib/typescript.js": "typescript.js", "package/LICENSE.txt": "LICENSE.txt",
        "package/ThirdPartyNoticeText.txt": "ThirdPartyNoticeText.txt"}
TS_SUFFIXES = (".ts", ".mts")
ENTRY_CANDIDATES = ("main.ts", "main.mts", "index.ts", "index.mts")


def compiler_dir(env: Any = None) -> Path:
    """Where the fetched compiler lives: ``$WB_NPM_CACHE/typescript-<version>``."""
    env = os.environ if env is None else env
    base = env.get("WB_NPM_CACHE") or str(Path.home() / ".cache" / "wbcore" / "npm")
    return Path(base) / f"typescript-{TYPESCRIPT_VERSION}"


_checked: set[tuple[str, int, int]] = set()


def compiler(env: Any = None) -> Path | None:
    """The fetched compiler if present and intact (its sha256 checked once per file state)."""
    path = compiler_dir(env) / "typescript.js"
    try:
        st = path.stat()
    except OSError:
        return None
    stamp = (str(path), st.st_ino, st.st_mtime_ns)
    if stamp not in _checked:
        try:  # once, capped, never through a FIFO or a link out of its folder (guard.paths)
            data = paths.read_file(path.parent, path.name, MAX_COMPILER, label="the npm cache")
        except (OSError, WbError):
            return None
        if hashlib.sha256(data).hexdigest() != TYPESCRIPT_SHA256:
            return None
        _checked.add(stamp)
    return path


#: typescript.js 5.9.3 is ~9 MB: a copy is refused past this while it is read.
MAX_COMPILER = 64 << 20


def copy_compiler(kept: Path, dest: Path) -> None:
    """The kept compiler copied to ``dest`` (a folder only this build writes), the copy held to
    the pin: :func:`compiler` checked the kept file, which may change after any check."""
    from wbcore_runtime.guard import fetch as _fetch

    got = _fetch.copy_local(kept, dest, max_bytes=MAX_COMPILER, shown=str(kept))
    if got != TYPESCRIPT_SHA256:
        raise InvalidArgs(f"{kept} changed after it was checked (sha256 {got}, not the pinned typescript "
                          f"{TYPESCRIPT_VERSION}'s {TYPESCRIPT_SHA256}): delete it and run "
                          f"`python -m wbcore_lane_js fetch`")


def compiler_ok(env: Any = None) -> str:
    """'' when the compiler is here and intact, else why not and how to get it."""
    if compiler(env) is not None:
        return ""
    where = compiler_dir(env)
    if (where / "typescript.js").exists():
        return (f"{where / 'typescript.js'} is not the pinned typescript {TYPESCRIPT_VERSION} "
                f"(sha256 {TYPESCRIPT_SHA256[:12]}…): delete it and run `python -m wbcore_lane_js fetch`")
    return (
        f"typescript {TYPESCRIPT_VERSION} is not fetched yet: run `python -m wbcore_lane_js fetch` "
        f"(downloads typescript-{TYPESCRIPT_VERSION}.tgz from your npm registry (`npm config get registry`), "
        f"sha256-pinned, into {where}), or `npm pack typescript@{TYPESCRIPT_VERSION}` then `python -m "
        f"wbcore_lane_js fetch --from typescript-{TYPESCRIPT_VERSION}.tgz`"
    )


def fetch(env: Any = None, progress: Any = None, *, tarball: Path | None = None) -> Path:
    """Download the pinned tarball through the core fetcher (or take ``tarball``, e.g. made
    by ``npm pack typescript@5.9.3``), check it, keep the compiler and its licenses.
    Raises the fetcher's errors (dns/unreachable/tls/...) or ``InvalidArgs`` for a tarball
    that is not the pinned one; nothing is kept then."""
    from wbcore_runtime.guard import fetch as _fetch
    from wbcore_runtime.guard import registries, unpack

    have = compiler(env)
    if have is not None:
        return have
    where = compiler_dir(env)
    where.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".typescript-", dir=where.parent) as tmp:
        tgz = Path(tmp) / "typescript.tgz"
        seen = env if env is not None else os.environ
        source: str | Path = Path(tarball) if tarball is not None else ""
        if tarball is None:
            # The registry the user configured for npm; the deployer's allowances apply to it
            # (a mirror on a private address: WB_ALLOW_PRIVATE_HOSTS=<its host>).
            source = registries.npm_tarball("typescript", TYPESCRIPT_VERSION, seen)
            if progress:
                progress(f"typescript {TYPESCRIPT_VERSION}: fetching {source}")
        origin = _fetch.pinned(source, tgz, TYPESCRIPT_TGZ_SHA256, what=f"typescript {TYPESCRIPT_VERSION}",
                               max_bytes=64 << 20, env=seen)
        tree = Path(tmp) / "tree"
        unpack.unpack_tar(tgz, tree, unpack.Caps(max_files=1000, max_bytes=128 << 20))
        keep = Path(tmp) / "keep"
        keep.mkdir()
        for member, name in KEEP.items():
            src = tree / member
            if not src.is_file() or src.is_symlink():
                raise InvalidArgs(f"{origin}: {member} is missing from the tarball")
            shutil.copyfile(src, keep / name)
        if hashlib.sha256((keep / "typescript.js").read_bytes()).hexdigest() != TYPESCRIPT_SHA256:
            raise InvalidArgs(f"{origin}: lib/typescript.js is not the pinned file; nothing was kept")
        if where.exists():
            shutil.rmtree(where)
        os.replace(keep, where)
    path = compiler(env)
    assert path is not None
    return path


def check() -> Any:
    from wbcore_runtime.contract.drivers import Availability

    base = qjs.check()
    if not base.ok:
        return base
    if compiler() is not None:
        return Availability.yes(f"typescript {TYPESCRIPT_VERSION} in {base.reason}")
    if (compiler_dir() / "typescript.js").exists():
        return Availability.no(compiler_ok())  # a file that is not the pinned one: never run it
    return Availability.yes(
        f"typescript {TYPESCRIPT_VERSION} (fetched from the configured npm registry by the first ts build, "
        f"or now with `python -m wbcore_lane_js fetch`) in {base.reason}"
    )


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
            if (
                m.group(1).startswith("/")
                or target == ".."
                or target.startswith("../")
                or target not in files
            ):
                raise InvalidArgs(
                    f'ts: {name}:{lineno}: /// <reference path="{m.group(1)}"> names a file outside '
                    "the source folder (or one that is not there); references must stay inside it"
                )


@dataclass
class TsLane(JsLane):
    """Type-strips ``.ts`` in QuickJS, then checks and packs like :class:`JsLane`."""

    @classmethod
    def for_runtime(cls, runtime: Any) -> TsLane:
        env = getattr(runtime, "env", {}) or {}
        return cls(
            home=Path(runtime.home),
            guests=guest.runner(runtime),
            limits=guest.GuestLimits(
                timeout_s=float(env.get("WB_BUILD_TIMEOUT", "120")), memory_bytes=1 << 30
            ),
        )

    @property
    def version(self) -> str:
        tsc = hashlib.sha256(
            (JS_DIR / "tsc.mjs").read_bytes() + (JS_DIR / "tsc-bytecode.mjs").read_bytes()
        ).hexdigest()
        return f"{JsLane.version.fget(self)}; typescript {TYPESCRIPT_VERSION} transpileModule ({tsc[:12]})"  # type: ignore[attr-defined]

    def bytecode(self, mod: Any, reactor_sha: str) -> bytes | None:
        """The compiler as QuickJS bytecode, made once (inside the sandbox) and kept under
        ``$WB_HOME/cache/js`` with its sha256; ``None`` if it cannot be made. The bytes that
        hashed right are what is returned (the caller writes them; the file is not read again)."""
        path = self.cache_dir / f"typescript-{TYPESCRIPT_SHA256[:16]}-qjs-{reactor_sha[:12]}.qbc"
        sums = Path(str(path) + ".sha256")
        if path.is_file() and sums.is_file():
            kept = path.read_bytes()
            if hashlib.sha256(kept).hexdigest() == sums.read_text().strip():
                return kept
        with tempfile.TemporaryDirectory(prefix="wb-ts-bc-") as tmp:
            app = Path(tmp)
            copy_compiler(self.compiler(), app / "__wb_typescript.js")
            shutil.copyfile(JS_DIR / "tsc-bytecode.mjs", app / "__wb_tsc_bytecode.mjs")
            argv = qjs.qjs_args("/app/__wb_tsc_bytecode.mjs", [], memory_bytes=self.limits.memory_bytes)
            res = qjs.run(
                mod, app, argv, stdin=None,
                limits=guest.GuestLimits(
                    self.limits.timeout_s, self.limits.memory_bytes, output_bytes=64 << 20
                ),
            )
        if res.exit_code != 0 or res.truncated or not res.stdout:
            return None
        atomic_write(path, res.stdout)
        atomic_write(sums, hashlib.sha256(res.stdout).hexdigest().encode())
        return res.stdout

    def compiler(self, progress: Any = None) -> Path:
        """The compiler, fetched now (with a progress line) if this machine has none yet."""
        return compiler() or fetch(progress=progress)

    def transpile(self, sources: dict[str, str], progress: Any = None) -> dict[str, str]:
        tsc = self.compiler(progress)
        r = qjs.reactor()
        mod = qjs.module(r.path.read_bytes(), self.cache_dir, self.guests)
        names = sorted(sources)
        bytecode = self.bytecode(mod, r.sha256)
        with tempfile.TemporaryDirectory(prefix="wb-ts-") as tmp:
            app = Path(tmp)
            materialize(sources, app)
            if bytecode is not None:
                (app / "__wb_typescript.qbc").write_bytes(bytecode)
            else:
                copy_compiler(tsc, app / "__wb_typescript.js")
            shutil.copyfile(JS_DIR / "tsc.mjs", app / "__wb_tsc.mjs")
            argv = qjs.qjs_args(
                "/app/__wb_tsc.mjs", ["/app/" + n for n in names], memory_bytes=self.limits.memory_bytes
            )
            limits = guest.GuestLimits(self.limits.timeout_s, self.limits.memory_bytes, output_bytes=64 << 20)
            res = qjs.run(mod, app, argv, stdin=None, limits=limits)
        if res.timed_out:
            raise Timeout(f"ts: the TypeScript compiler took over {self.limits.timeout_s:g}s")
        if res.exit_code != 0 or res.truncated:
            log = res.stderr.decode("utf-8", "replace")
            raise BuildFailed(
                f"ts: the TypeScript compiler failed ({res.trap or f'exit {res.exit_code}'})", log=log
            )
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
        ts_files = {
            n: t
            for n, t in everything.items()
            if n.endswith(TS_SUFFIXES) and not n.endswith((".d.ts", ".d.mts"))
        }
        if not ts_files:
            raise InvalidArgs(f"ts: no .ts files under {src}")
        refuse_outside_references(everything)
        if request.progress:
            request.progress(
                f"typescript {TYPESCRIPT_VERSION}: type-stripping {len(ts_files)} file(s) inside QuickJS"
            )
        emitted = self.transpile(ts_files, request.progress)
        files = {n: t for n, t in everything.items() if n.endswith((".js", ".mjs", ".json"))}
        for name, text in emitted.items():
            if name in files:
                raise InvalidArgs(f"ts: {name} exists and is also emitted from TypeScript")
            files[name] = text
        want = request.source.entry
        if want and want.endswith(TS_SUFFIXES):
            want = want.replace(".mts", ".mjs") if want.endswith(".mts") else want[:-3] + ".js"
        if not want:
            want = next(
                (c.replace(".mts", ".mjs").replace(".ts", ".js") for c in ENTRY_CANDIDATES if c in ts_files),
                None,
            )
        entry = pick_entry(files, want, src)
        files = with_sdk(files)
        modules = sorted(f for f in files if f.endswith((".js", ".mjs")))
        log = self.check(files, modules)
        out = self.pack(files, entry, request.outdir, request.manifest.cli_bin or request.manifest.id)
        return BuildOutput(
            artifact=out,
            log=f"type-stripped {len(ts_files)} file(s) with typescript {TYPESCRIPT_VERSION}; "
            f"checked {len(modules)} module(s); entry {entry}\n{log}",
        )
