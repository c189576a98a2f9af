"""The svelte lane: Svelte components compiled by the Svelte compiler inside QuickJS,
rendered on the server by Svelte's own runtime, packed by the js lane.

Nothing of Svelte is part of the repository. Four npm tarballs are fetched once into
``$WB_NPM_CACHE`` (default ``~/.cache/wbcore/npm``), each pinned by sha256 and kept
verbatim: ``svelte`` (the compiler ``compiler/index.js``, one UMD file, and the runtime
ESM under ``src/``) and the three tiny packages its server runtime imports (``esm-env``,
``clsx``, ``devalue``, at versions inside svelte's own ranges). ``python -m wbcore_lane_js
fetch svelte`` fetches them (``dev.py setup`` and CI run it), or the first svelte build.
Every build re-checks each tarball's sha256 and reads members straight from it: a file
planted in the cache is refused, never run.

*Build*: each ``.svelte`` file goes through ``compile(source, {generate: 'server'})`` (each
``X.svelte.js`` rune module through ``compileModule``) in
QuickJS's reactor wasm in wasmtime, seeing only a read-only ``/app`` with the components
and the compiler (a syntax error fails with ``file:line:col``). The emitted modules import
``svelte/internal/server``; the lane walks those imports through the tarballs (package
``exports``/``imports`` with the conditions ``production``, ``import``, ``default``),
copies every module reached into the bundle under ``__wb_svelte/<package>/`` and rewrites
the bare specifiers to relative paths. The entry is the toolkit's ``main.js`` if it has
one (it may ``import { render } from 'svelte/server'``), else a generated one that reads
JSON props on stdin, renders ``App.svelte`` (or the only component, or BUILD_SRC's
``path:<dir>/<X>.svelte``) and prints the body HTML.
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

from wbcore_runtime.guard import paths, unpack
from wbcore_runtime.contract import guest
from wbcore_runtime.build import BuildFailed, BuildOutput, BuildRequest
from wbcore_runtime.contract.errors import InvalidArgs, Timeout, WbError

from wbcore_lane_js import qjs
from wbcore_lane_js.lane import JS_DIR, JsLane, collect, materialize, pick_entry, with_sdk
from wbcore_lane_js.plugin import no_flags


@dataclass(frozen=True, slots=True)
class Package:
    name: str
    version: str
    sha256: str  # of the registry tarball

    @property
    def tgz(self) -> str:
        return f"{self.name}-{self.version}.tgz"

    def url(self, env: Any = None) -> str:
        """Its tarball on the npm registry the user configured (``npm config get registry``)."""
        from wbcore_runtime.guard import registries

        return registries.npm_tarball(self.name, self.version, env)


SVELTE = Package("svelte", "5.57.3", "afda776761670addcd6f4345c1b4b0665c8dd11b82961cbfee9696d5d9f4546a")
#: What svelte's server runtime imports (versions inside svelte 5.57.3's dependency ranges).
DEPS = (
    Package("esm-env", "1.2.2", "426a193e24a734dc94bfe27c4d5595fcd91296562f23beaabc3650fc1446322e"),
    Package("clsx", "2.1.1", "6320104b491ca645120e8f99589ce663ff1fb337ba80066719a011bd95320303"),
    Package("devalue", "5.9.4", "d3fcc934bb84312e1326fba55d6dbf42249fffb52f4c7cbd1a9986640084576b"),
)
PACKAGES = (SVELTE, *DEPS)
COMPILER = "compiler/index.js"
#: Export conditions, in the order a server build in production picks them.
CONDITIONS = ("production", "import", "default")
BUNDLE_DIR = "__wb_svelte"
MAX_TGZ = 16 << 20
MAX_MEMBERS = 4000
RESERVED = ("__wb_svelte_main.mjs", "__wb_svelte_compiler.js", "__wb_svelte.mjs")


def cache_dir(env: Any = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("WB_NPM_CACHE") or str(Path.home() / ".cache" / "wbcore" / "npm"))


def _verified(pkg: Package, env: Any = None) -> bytes | None:
    """The cached tarball's bytes if it is there and is the pinned one, else None: read once by
    the core's ``guard.paths`` (no link out of the cache, FIFO or device; capped while read),
    and the bytes hashed are the bytes returned."""
    try:
        data = paths.read_file(cache_dir(env), pkg.tgz, MAX_TGZ, label="the npm cache")
    except (OSError, WbError):  # not there, or refused: not the pinned tarball
        return None
    return data if hashlib.sha256(data).hexdigest() == pkg.sha256 else None


def missing(env: Any = None) -> list[Package]:
    return [p for p in PACKAGES if _verified(p, env) is None]


def compiler_ok(env: Any = None) -> str:
    """'' when every tarball is here and intact, else why not and how to get them."""
    gone = missing(env)
    if not gone:
        return ""
    where = cache_dir(env)
    bad = [p for p in gone if (where / p.tgz).exists()]
    if bad:
        return (
            f"{where / bad[0].tgz} is not the pinned {bad[0].name} {bad[0].version} (sha256 "
            f"{bad[0].sha256[:12]}…): "
            "delete it and run `python -m wbcore_lane_js fetch svelte`"
        )
    names = " ".join(f"{p.name}@{p.version}" for p in gone)
    return (
        f"{names} not fetched yet: run `python -m wbcore_lane_js fetch svelte` (from your npm registry: `npm "
        f"config get registry`; sha256-pinned, into {where}), or `npm pack {names}` then `python -m "
        "wbcore_lane_js fetch svelte --from <each .tgz>`"
    )


def fetch(env: Any = None, progress: Any = None, *, tarballs: list[Path] | None = None) -> Path:
    """Put every pinned tarball into the cache: from ``tarballs`` (e.g. made by ``npm pack``,
    matched to a package by file name) or through the core fetcher. A tarball that is not
    the pinned one raises ``InvalidArgs`` and is not kept."""
    from wbcore_runtime.guard import fetch as _fetch

    where = cache_dir(env)
    given = {Path(t).name: Path(t) for t in tarballs or []}
    unknown = sorted(set(given) - {p.tgz for p in PACKAGES})
    if unknown:
        raise InvalidArgs(
            f"{unknown[0]}: not one of the pinned tarballs ({', '.join(p.tgz for p in PACKAGES)})"
        )
    for pkg in PACKAGES:
        if _verified(pkg, env) is not None:
            continue
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{pkg.name}-", dir=where) as tmp:
            tgz = Path(tmp) / pkg.tgz
            seen = env if env is not None else os.environ
            source: str | Path
            if pkg.tgz in given:
                source = given[pkg.tgz]
            elif tarballs:
                continue  # only what was given; the rest stays missing (compiler_ok says which)
            else:
                source = pkg.url(seen)
                if progress:
                    progress(f"svelte lane: fetching {source}")
            # the deployer's allowances apply to a download (a registry mirror on a private address)
            _fetch.pinned(
                source, tgz, pkg.sha256, what=f"{pkg.name} {pkg.version}", max_bytes=MAX_TGZ, env=seen
            )
            os.replace(tgz, where / pkg.tgz)
    return where


def members(pkg: Package, env: Any = None) -> dict[str, bytes]:
    """The regular files of a verified tarball, by path under ``package/`` (read in memory,
    nothing extracted; a link or an odd path is skipped, never followed)."""
    data = _verified(pkg, env)
    if data is None:
        raise InvalidArgs(f"svelte lane: {compiler_ok(env)}")
    # The core's unpacker reads it (names checked, entries and bytes capped), in memory.
    files = unpack.read_files(data, unpack.Caps(max_files=MAX_MEMBERS, max_bytes=64 << 20), what=pkg.tgz,
                              only=lambda n: n.startswith("package/"))
    return {name[len("package/"):]: body for name, body in files.items() if name != "package"}


def check() -> Any:
    from wbcore_runtime.contract.drivers import Availability

    base = qjs.check()
    if not base.ok:
        return base
    gone = missing()
    if not gone:
        return Availability.yes(f"svelte {SVELTE.version} compiler in {base.reason}")
    if any((cache_dir() / p.tgz).exists() for p in gone):
        return Availability.no(compiler_ok())  # a tarball that is not the pinned one: never run it
    return Availability.yes(
        f"svelte {SVELTE.version} (fetched from the configured npm registry by the first svelte build, "
        f"or now with `python -m wbcore_lane_js fetch svelte`) in {base.reason}"
    )


# Every module specifier in `from '…'`, `import '…'` and `import('…')`. Matches inside
# comments too (JSDoc `@import`): those resolve or not; either way the rewrite is harmless.
_SPEC = re.compile(r"""(\bfrom\s*|\bimport\s*\(?\s*)(['"])([^'"\n]+)\2""")


def _pick(target: Any) -> str | None:
    """An ``exports``/``imports`` value resolved with :data:`CONDITIONS`."""
    if isinstance(target, str):
        return target
    if isinstance(target, dict):
        for key, value in target.items():
            if key in CONDITIONS:
                got = _pick(value)
                if got is not None:
                    return got
    return None


class Runtime:
    """Svelte's runtime modules, read from the pinned tarballs, resolved on demand."""

    def __init__(self, env: Any = None) -> None:
        self.files = {p.name: members(p, env) for p in PACKAGES}
        self.meta = {name: json.loads(f["package.json"]) for name, f in self.files.items()}

    def resolve(self, spec: str, pkg: str | None) -> tuple[str, str] | None:
        """``(package, path)`` of a bare specifier (``svelte/server``, ``#client/constants``
        inside ``pkg``); None for what no pinned package provides (``node:…``, types)."""
        if spec.startswith("#") and pkg is not None:
            target = _pick((self.meta[pkg].get("imports") or {}).get(spec))
            return self._file(pkg, target)
        name, _, sub = spec.partition("/")
        if name.startswith("@"):
            return None
        if name not in self.files:
            return None
        exports = self.meta[name].get("exports")
        key = "./" + sub if sub else "."
        if isinstance(exports, dict):
            return self._file(name, _pick(exports.get(key)))
        return None

    def _file(self, pkg: str, target: str | None) -> tuple[str, str] | None:
        if not target:
            return None
        rel = posixpath.normpath(target)
        if rel.endswith((".js", ".mjs")) and rel in self.files[pkg]:
            return pkg, rel
        return None

    def bundle(self, modules: dict[str, str]) -> dict[str, str]:
        """``modules`` (bundle path → text) plus every runtime module they reach, with the
        bare specifiers rewritten to relative paths inside the bundle."""
        out: dict[str, str] = {}
        todo: list[tuple[str, str, str | None]] = [(name, text, None) for name, text in modules.items()]
        seen = set(modules)
        while todo:
            name, text, pkg = todo.pop()

            def swap(m: re.Match[str], name: str = name, pkg: str | None = pkg) -> str:
                spec = m.group(3)
                if spec.startswith("."):
                    if pkg is None:
                        return m.group(0)
                    within = posixpath.normpath(
                        posixpath.join(posixpath.dirname(name.split("/", 2)[2]), spec)
                    )
                    hit: tuple[str, str] | None = (pkg, within) if within in self.files[pkg] else None
                else:
                    hit = self.resolve(spec, pkg)
                if hit is None:
                    return m.group(0)
                path = f"{BUNDLE_DIR}/{hit[0]}/{hit[1]}"
                if path not in seen:
                    seen.add(path)
                    todo.append((path, self.files[hit[0]][hit[1]].decode("utf-8"), hit[0]))
                rel = posixpath.relpath(path, posixpath.dirname(name) or ".")
                return f"{m.group(1)}{m.group(2)}{rel if rel.startswith('.') else './' + rel}{m.group(2)}"

            out[name] = _SPEC.sub(swap, text)
        return out


def _component_import(name: str, text: str) -> str:
    """``import X from './Child.svelte'`` → ``'./Child.svelte.js'`` (the emitted module)."""
    return _SPEC.sub(
        lambda m: (
            m.group(0)[:-1] + ".js" + m.group(2)
            if m.group(3).startswith(".") and m.group(3).endswith(".svelte")
            else m.group(0)
        ),
        text,
    )


@dataclass
class SvelteLane(JsLane):
    """Compiles ``.svelte`` for the server in QuickJS, bundles the runtime, packs as js."""

    @classmethod
    def for_runtime(cls, runtime: Any) -> SvelteLane:
        env = getattr(runtime, "env", {}) or {}
        return cls(
            home=Path(runtime.home),
            guests=guest.runner(runtime),
            limits=guest.GuestLimits(
                timeout_s=float(env.get("WB_BUILD_TIMEOUT", "120")), memory_bytes=512 << 20
            ),
        )

    @property
    def version(self) -> str:
        ours = hashlib.sha256((JS_DIR / "svelte.mjs").read_bytes() + (JS_DIR / "svelte-main.mjs").read_bytes()
                              + Path(__file__).read_bytes()).hexdigest()
        pins = "; ".join(f"{p.name} {p.version} ({p.sha256[:12]})" for p in PACKAGES)
        return f"{JsLane.version.fget(self)}; {pins}; svelte lane {ours[:12]}"  # type: ignore[attr-defined]

    def runtime(self, progress: Any = None) -> Runtime:
        gone = missing()
        if any((cache_dir() / p.tgz).exists() for p in gone):
            raise InvalidArgs(
                f"svelte lane: {compiler_ok()}"
            )  # a planted tarball: refuse, never fetch over it silently
        if gone:
            fetch(progress=progress)
        return Runtime()

    def compile(self, rt: Runtime, sources: dict[str, str]) -> tuple[dict[str, str], list[str]]:
        """The emitted server modules (``X.svelte`` → ``X.svelte.js``) and the compiler's warnings."""
        r = qjs.reactor()
        mod = qjs.module(r.path.read_bytes(), self.cache_dir, self.guests)
        with tempfile.TemporaryDirectory(prefix="wb-svelte-") as tmp:
            app = Path(tmp)
            materialize(sources, app)
            (app / "__wb_svelte_compiler.js").write_bytes(rt.files["svelte"][COMPILER])
            shutil.copyfile(JS_DIR / "svelte.mjs", app / "__wb_svelte.mjs")
            argv = qjs.qjs_args(
                "/app/__wb_svelte.mjs", ["/app/" + n for n in sorted(sources)],
                memory_bytes=self.limits.memory_bytes,
            )
            limits = guest.GuestLimits(self.limits.timeout_s, self.limits.memory_bytes, output_bytes=64 << 20)
            res = qjs.run(mod, app, argv, stdin=None, limits=limits)
        if res.timed_out:
            raise Timeout(f"svelte: the Svelte compiler took over {self.limits.timeout_s:g}s")
        if res.exit_code != 0 or res.truncated:
            raise BuildFailed(f"svelte: the Svelte compiler failed ({res.trap or f'exit {res.exit_code}'})",
                              log=res.stderr.decode("utf-8", "replace"))
        doc = json.loads(res.stdout)
        if doc["errors"]:
            raise BuildFailed(f"svelte: {doc['errors'][0]}", log="\n".join(doc["errors"]))
        return {n: _component_import(n, t) for n, t in doc["files"].items()}, list(doc.get("warnings") or [])

    def build(self, request: BuildRequest) -> BuildOutput:
        src = request.source.dir
        if src is None:
            raise InvalidArgs("svelte builds a source folder; this BUILD_SRC resolved to a prebuilt artifact")
        no_flags("svelte")(request.flags)
        everything = collect(src, (".svelte", ".js", ".mjs", ".json"))
        for name in everything:
            if name in RESERVED or name.split("/", 1)[0] == BUNDLE_DIR:
                raise InvalidArgs(f"svelte: {name} is a name the lane reserves")
        components = {n: t for n, t in everything.items() if n.endswith(".svelte")}
        if not components:
            raise InvalidArgs(f"svelte: no .svelte files under {src}")
        runes = {n: t for n, t in everything.items() if n.endswith((".svelte.js", ".svelte.mjs"))}
        for name in components:
            if name + ".js" in runes:
                raise InvalidArgs(
                    f"svelte: {name}.js is both a rune module and what {name} compiles to; rename one"
                )
        rt = self.runtime(request.progress)
        if request.progress:
            request.progress(
                f"svelte {SVELTE.version}: compiling {len(components)} component(s) inside QuickJS"
            )
        emitted, warnings = self.compile(rt, {**components, **runes})
        # the toolkit's own modules import components by their source name, like a bundler allows
        files = {n: _component_import(n, t) if n.endswith((".js", ".mjs")) else t
                 for n, t in everything.items() if not n.endswith(".svelte") and n not in runes}
        for name, text in emitted.items():
            if name in files:
                raise InvalidArgs(f"svelte: {name} exists and is also emitted from {name[:-3]}")
            files[name] = text
        want: str | None = request.source.entry
        component: str | None
        if want and want.endswith(".svelte"):
            component, want = want, None
        else:
            component = next(
                (c for c in ("App.svelte", "main.svelte", "index.svelte") if c in components), None
            )
            if component is None and len(components) == 1:
                component = next(iter(components))
        if not want and not any(c in files for c in ("main.mjs", "main.js", "index.mjs", "index.js")):
            if component is None:
                raise InvalidArgs(
                    f"svelte: cannot tell which component to render under {src}: name it App.svelte "
                    "(or BUILD_SRC path:<dir>/<X>.svelte, or write a main.js)"
                )
            cli = request.manifest.cli_bin or request.manifest.id
            files["__wb_svelte_main.mjs"] = (
                (JS_DIR / "svelte-main.mjs")
                .read_text()
                .replace("@SERVER@", "svelte/server")
                .replace("@COMPONENT@", "./" + component + ".js")
                .replace("@NAME@", json.dumps(cli)[1:-1])
            )
            want = "__wb_svelte_main.mjs"
        scripts = {n: t for n, t in files.items() if n.endswith((".js", ".mjs"))}
        files.update(rt.bundle(scripts))
        entry = pick_entry(files, want, src)
        files = with_sdk(files)
        modules = sorted(
            f for f in files if f.endswith((".js", ".mjs")) and not f.startswith(BUNDLE_DIR + "/")
        )
        log = self.check(files, modules)
        out = self.pack(files, entry, request.outdir, request.manifest.cli_bin or request.manifest.id)
        runtime_n = sum(1 for f in files if f.startswith(BUNDLE_DIR + "/"))
        notes = "\n".join(warnings)
        return BuildOutput(
            artifact=out,
            log=f"compiled {len(components)} component(s) with svelte {SVELTE.version} (generate: server); "
            f"bundled {runtime_n} runtime module(s); entry {entry}\n{notes}\n{log}",
        )
