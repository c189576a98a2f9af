"""The ``c`` and ``zig`` lane drivers: C and Zig compiled to wasm32-wasi inside the build sandbox.

The ``c`` lane compiles with Debian's prebuilt WASI toolchain when it is installed
(clang ≥ 20, wasm-ld, compiler-rt builtins and ``wasi-libc``: nothing to compile before
the first build), else with ``zig cc`` (:func:`wbcore_lane_zig.toolchain.c_toolchain` decides,
``wbx lanes`` says which and why). The ``zig`` lane is always zig.

What the compiler sees: the compiler (``/zig``, the ziglang package, or the host's ``/usr``
read-only for clang, whose sysroot is bound at ``/sysroot``), ``/src`` (the resolved
source, read-only), zig's warmed global cache at ``/zig-cache`` through a private overlay,
a private ``/tmp`` and ``/out`` (copied back to the request's ``outdir``). No network,
no ``/etc``, no home, uid 1000 without capabilities, seccomp, rlimits and a deadline
(the runtime's build sandbox, ``wbcore_runtime.contract.sandbox``). Paths inside are fixed and source paths
are mapped to ``.`` (``-ffile-prefix-map``), so the same source and flags give the same
bytes on any machine.

Programs that include ``<setjmp.h>`` (or declare ``#+C_SJLJ: yes``) are built with
setjmp/longjmp lowered to WebAssembly exception handling; the lane adds those flags
itself, never the manifest (``-m*`` and ``-mllvm`` stay outside the allowlist).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from wbcore_runtime.build import BuildFailed, BuildOutput, BuildRequest, products
from wbcore_runtime.guard import paths
from wbcore_runtime.dispatch.dock import SDK_C, sdk_c_digest
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, Timeout
from wbcore_runtime.contract.sandbox import Bind, BuildSandboxDriver, SandboxLimits

from wbcore_lane_zig import cache as _cache
from wbcore_lane_zig.toolchain import WASI_INCLUDE, WASI_LIB, Clang, Zig, c_toolchain, find

MAX_ARTIFACT_BYTES = 64 << 20
MAX_SOURCES = 2000
#: Where the core's C SDK folder (``wbcore_runtime.dispatch.dock.SDK_C``) is bound, read-only, in a build.
SDK_GUEST = "/wb-sdk"
#: Flags a manifest or caller may add to ``zig cc``; the lane owns target, output and paths.
C_FLAG_RE = re.compile(
    # -W warnings, but never -Wl, / -Wa, / -Wp,: those pass anything to the linker, assembler
    # or preprocessor (stack size, exports, response files) past this allowlist
    r"^-(D[A-Za-z_][A-Za-z0-9_]*(=[^\s]*)?|U[A-Za-z_][A-Za-z0-9_]*|W(?![alp],)[A-Za-z0-9,=_-]*|O[0-3sz]?|g0?"
    r"|std=[a-z0-9+]+|f[a-z0-9-]+(=[a-z0-9]+)?|l(m|c|wasi-emulated-(signal|process-clocks|getpid|mman))|s)$"
)
#: ``-f`` flags that change the target, load host code or write outside ``/out``: the lane
#: decides exceptions (setjmp/longjmp) and the linker itself.
C_FLAG_DENY = re.compile(r"^-f(no-)?(wasm-|exceptions|cxx-exceptions|plugin|pass-plugin|use-ld|sanitize|"
                         r"profile|coverage|embed|lto|modules|crash-diagnostics|save-optimization|record|time-trace)")
#: ``#include <setjmp.h>`` in a source or header: the program needs setjmp/longjmp.
SETJMP_RE = re.compile(rb"^[ \t]*#[ \t]*include[ \t]*[<\"]setjmp\.h[>\"]", re.MULTILINE)
SJLJ = Path(__file__).parent / "sjlj"
#: What clang needs to lower setjmp/longjmp to the exception encoding wasmtime runs.
SJLJ_FLAGS = ["-mllvm", "-wasm-enable-sjlj", "-mllvm", "-wasm-use-legacy-eh=false"]
#: zig's own wasi-libc has ``<setjmp.h>`` and the runtime (built into its libc when the
#: exception-handling feature is on: a second wasi-libc build in the overlaid cache, minutes,
#: the first time each sandbox sees it); only the ``__c_longjmp`` tag comes from ``sjlj/tag.c``.
ZIG_SJLJ_FLAGS = ["-mexception-handling", *SJLJ_FLAGS]
#: wasm-ld's default stack is 64 KiB; zig's (and what C programs expect) is 1 MiB. The stack
#: comes first in linear memory, so an overflow traps instead of overwriting data.
STACK_BYTES = 1 << 20
#: How the clang path compiles (part of the lane version, so of the build cache key).
CLANG_RECIPE = ("r1: clang --target=wasm32-wasip1 -Oz -s -ffile-prefix-map, 1 MiB stack; "
                "sjlj: exnref + wb rt.c")
#: How the zig path compiles C, beyond the warm-up's recipe (part of the build cache key).
ZIG_C_RECIPE = "c r2: -ffile-prefix-map; sjlj: -mexception-handling, zig's libc runtime + tag.c"
ZIG_FLAG_RE = re.compile(r"^(-O(Debug|ReleaseSafe|ReleaseFast|ReleaseSmall)|-f(no-)?(strip|single-threaded)"
                         r"|-D[A-Za-z_][A-Za-z0-9_]*(=[^\s]*)?)$")


def lane_version(zig: Zig) -> str:
    """The c and zig drivers' version: the toolchain's identity and the cache recipe."""
    return f"zig {zig.version}; {_cache.RECIPE}"


@dataclass
class ZigLaneBase:
    home: Path
    env: dict[str, str]
    #: The runtime's ``build_sandbox``, asked when a build starts (``NotFound`` naming what
    #: to install when no plugin serves one).
    sandbox: Callable[[], BuildSandboxDriver]
    lane: ClassVar[str] = "c"

    @classmethod
    def for_runtime(cls, runtime: Any) -> ZigLaneBase:
        return cls(home=Path(runtime.home), env=dict(getattr(runtime, "env", {}) or {}),
                   sandbox=runtime.build_sandbox)

    @property
    def zig(self) -> Zig:
        zig = find()
        if isinstance(zig, str):
            raise InvalidArgs(f"{self.lane} lane: {zig}")
        return zig

    @property
    def version(self) -> str:
        return lane_version(self.zig)

    def _timeout(self) -> float:
        return float(self.env.get("WB_BUILD_TIMEOUT", "300"))

    def _compile(self, request: BuildRequest, argv: list[str], name: str, *, cwd: str = "/tmp",
                 clang: Clang | None = None, extra_binds: tuple[Bind, ...] = ()) -> BuildOutput:
        """Run ``argv`` in the build sandbox: with zig (its warmed cache overlaid) unless
        ``clang`` is given (the host's ``/usr`` read-only, Debian's wasi-libc at ``/sysroot``)."""
        src = request.source.dir
        assert src is not None
        refuse_objects(request)
        box = self.sandbox()
        progress: Callable[[str], None] | None = request.progress
        if clang is None:
            zig = self.zig
            cache = _cache.cache_dir(zig, self.home, self.env)
            _cache.warm(zig, cache, box, progress=progress)
            binds = [Bind(zig.root, "/zig"), Bind(cache, "/zig-cache", overlay=True)]
            env = {"ZIG_GLOBAL_CACHE_DIR": "/zig-cache", "ZIG_LOCAL_CACHE_DIR": "/tmp/zig-local"}
        else:
            binds = [*box.system_binds(), Bind(WASI_INCLUDE, "/sysroot/include/wasm32-wasip1"),
                     Bind(WASI_LIB, "/sysroot/lib/wasm32-wasip1")]
            env = {"TMPDIR": "/tmp"}
        timeout = self._timeout()
        limits = SandboxLimits(wall_seconds=timeout, cpu_seconds=int(timeout) * 2, open_files=8192,
                               processes=256, out_bytes=MAX_ARTIFACT_BYTES * 2, tmp_bytes=1 << 30)
        if progress:
            progress(f"{self.lane}: " + " ".join(argv[1:6]) + " …")
        outdir = request.outdir
        outdir.mkdir(parents=True, exist_ok=True)
        res = box.run(
            argv,
            binds=[*binds, Bind(src, "/src"), Bind(SDK_C, SDK_GUEST), *extra_binds],
            out_dir=outdir,
            env={**env, **_user_env(request)},
            cwd=cwd,
            limits=limits,
        )
        cmdline = " ".join(argv)
        log = f"$ {cmdline}\n{res.log}"
        if res.timed_out:
            raise Timeout(f"{self.lane} lane: the compiler did not finish within {timeout:g}s ({cmdline})")
        if not res.ok:
            why = f"{res.limit} limit" if res.limit else f"exit {res.returncode}"
            first = next((ln for ln in res.log.splitlines() if "error" in ln), None) or next(
                (ln for ln in res.log.splitlines() if ln.strip()), why)
            raise BuildFailed(f"{self.lane} lane: compile failed ({why}): {first.strip()}", log=log)
        artifact = outdir / name
        if artifact.is_symlink():  # the build wrote it: a link could name a host file
            raise BuildFailed(f"{self.lane} lane: the compiler wrote {name} as a symlink, not a file",
                              log=log)
        if not artifact.is_file():
            # the containment walk: a .wasm link the build left is never followed out
            found = [outdir / n.rel for n in paths.walk(outdir, label="the build's output folder")
                     if n.kind == "file" and n.rel.endswith(".wasm")]
            if len(found) != 1:
                raise BuildFailed(f"{self.lane} lane: the compiler exited 0 but wrote no {name}", log=log)
            os.replace(found[0], artifact)
        size = artifact.stat().st_size
        with artifact.open("rb") as fh:
            magic = fh.read(4)
        if magic != b"\0asm" or size > MAX_ARTIFACT_BYTES:
            artifact.unlink()
            raise BuildFailed(f"{self.lane} lane: {name} is not a wasm module under {MAX_ARTIFACT_BYTES} "
                              "bytes", log=log)
        return BuildOutput(artifact=artifact, log=log)


def refuse_objects(request: BuildRequest) -> None:
    """Object files, archives and shared objects in the source are refused unless the
    manifest lists them (``#+BUILD_OBJECTS: lib/libx.a ...``, paths inside the source)."""
    assert request.source.dir is not None
    declared = (request.manifest.extra("BUILD_OBJECTS") or "").split()
    products.refuse(request.source.dir, lane=request.manifest.build_lang or "c",
                    suffixes=products.NATIVE_PRODUCTS[1],
                    declared=declared, hint=", or list it in #+BUILD_OBJECTS if it is meant to be there")


def _user_env(request: BuildRequest) -> dict[str, str]:
    """Only plain ``[A-Z_]`` names pass, never the lane's own (``ZIG_*``, ``PATH``)."""
    out = {}
    for k, v in request.env.items():
        if (not re.fullmatch(r"[A-Z][A-Z0-9_]*", k)
                or k.startswith(("ZIG_", "CLANG", "CCC_", "COMPILER_PATH"))
                or k in ("PATH", "HOME", "TMPDIR", "CPATH", "C_INCLUDE_PATH", "LIBRARY_PATH")):
            raise InvalidArgs(f"build env {k!r} is not allowed")
        out[k] = v
    return out


def artifact_name(request: BuildRequest) -> str:
    return (request.manifest.cli_bin or request.manifest.id) + ".wasm"


def _inside(root: Path, entry: str | None) -> Path:
    """The build entry by the core's one containment rule (:mod:`wbcore_runtime.guard.paths`)."""
    if not entry:
        return root
    try:
        return paths.inside(root, entry, expect="any", label="the source folder")
    except NotFound:
        raise InvalidArgs(f"build entry {entry!r} does not exist in {root}") from None


def _guest(root: Path, path: Path) -> str:
    rel = path.relative_to(os.path.realpath(root)).as_posix()
    return "/src" if rel == "." else f"/src/{rel}"


def check_c_flags(flags: tuple[str, ...]) -> None:
    """The c lane's ``#+BUILD_FLAGS`` allowlist (build and verify both call it)."""
    for flag in flags:
        if not C_FLAG_RE.match(flag) or C_FLAG_DENY.match(flag):
            raise InvalidArgs(f"c lane: flag {flag!r} is not allowed (allowed: -D -U -W -O -g -std= -f -lm "
                              "-lc -lwasi-emulated-{signal,process-clocks,getpid,mman} -s; "
                              "not the -f flags that pick exceptions, plugins, sanitizers or the linker); "
                              "remove it from #+BUILD_FLAGS")


def check_zig_flags(flags: tuple[str, ...]) -> None:
    """The zig lane's ``#+BUILD_FLAGS`` allowlist (build and verify both call it)."""
    for flag in flags:
        if not ZIG_FLAG_RE.match(flag):
            raise InvalidArgs(f"zig lane: flag {flag!r} is not allowed (allowed: -O<mode>, -f[no-]strip, "
                              "-f[no-]single-threaded, -D<name>=<value>); remove it from #+BUILD_FLAGS")


def wants_sjlj(request: BuildRequest, root: Path) -> bool:
    """``#+C_SJLJ: yes|no`` when given, else whether any ``.c``/``.h`` under ``root``
    includes ``<setjmp.h>`` (first 1 MiB of each file, at most ``MAX_SOURCES * 4`` files)."""
    said = (request.manifest.extra("C_SJLJ") or "").strip().lower()
    if said in ("yes", "no"):
        return said == "yes"
    if said:
        raise InvalidArgs(f"#+C_SJLJ: {said!r}: use yes or no (leave it out to detect <setjmp.h>)")
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in filenames:
            path = Path(dirpath) / f
            # regular files only: a link is not followed, and a FIFO named x.c would block the read
            if not f.endswith((".c", ".h")) or not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            seen += 1
            if seen > MAX_SOURCES * 4:
                return False
            with path.open("rb") as fh:
                if SETJMP_RE.search(fh.read(1 << 20)):
                    return True
    return False


class CLane(ZigLaneBase):
    """Every ``*.c`` of the source folder (or the one ``entry``) into one WASI command."""

    @property
    def toolchain(self) -> Clang | Zig:
        tc = c_toolchain(self.env or dict(os.environ))
        if isinstance(tc, str):
            raise InvalidArgs(f"c lane: {tc}")
        return tc

    @property
    def version(self) -> str:
        tc = self.toolchain
        sdk = f"wb_dock.h {sdk_c_digest()[:12]}"
        if isinstance(tc, Clang):
            return f"{tc.version}; {CLANG_RECIPE}; {sdk}"
        return f"zig {tc.version}; {_cache.RECIPE}; {ZIG_C_RECIPE}; {sdk}"

    def build(self, request: BuildRequest) -> BuildOutput:
        src = request.source.dir
        if src is None:
            raise InvalidArgs("c lane builds a source folder; this BUILD_SRC resolved to a prebuilt artifact")
        check_c_flags(request.flags)
        base = _inside(src, request.source.entry)
        if base.is_file():
            if base.suffix != ".c":
                raise InvalidArgs(f"c lane builds .c files; {request.source.entry!r} is not one")
            files, inc = [_guest(src, base)], _guest(src, base.parent)
        else:
            files = []
            for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                files += [_guest(src, Path(dirpath) / f) for f in sorted(filenames) if f.endswith(".c")]
                if len(files) > MAX_SOURCES:
                    raise InvalidArgs(f"c lane: more than {MAX_SOURCES} .c files under {base}")
            if not files:
                raise InvalidArgs(f"c lane: no .c files under {base}")
            inc = _guest(src, base)
        opt = [] if any(f.startswith("-O") for f in request.flags) else ["-Oz"]
        includes = [f"-I{inc}"] + ([f"-I{inc}/include"]
                                   if (base if base.is_dir() else base.parent).joinpath("include").is_dir()
                                   else [])
        includes.append(f"-I{SDK_GUEST}")  # the Dock's C SDK (wb_dock.h), one copy in the core
        name = artifact_name(request)
        sjlj = wants_sjlj(request, base if base.is_dir() else base.parent)
        tc = self.toolchain
        if isinstance(tc, Clang):
            extra: tuple[Bind, ...] = (Bind(SJLJ, "/wb-sjlj"),) if sjlj else ()
            argv = [str(tc.binary), "--target=wasm32-wasip1", "--sysroot=/sysroot", *opt, "-s",
                    "-ffile-prefix-map=/src=.", "-ffile-prefix-map=/wb-sjlj=wb-sjlj",
                    f"-Wl,-z,stack-size={STACK_BYTES}",
                    *(["-I/wb-sjlj/include", *SJLJ_FLAGS] if sjlj else []), *includes, *request.flags,
                    "-o", f"/out/{name}", *files, *(["/wb-sjlj/rt.c"] if sjlj else [])]
            if "-lm" not in request.flags:
                argv.append("-lm")
            return self._compile(request, argv, name, clang=tc, extra_binds=extra)
        argv = ["/zig/zig", "cc", "--target=wasm32-wasi", *opt, "-s", "-ffile-prefix-map=/src=.",
                "-ffile-prefix-map=/wb-sjlj=wb-sjlj", *includes, *(ZIG_SJLJ_FLAGS if sjlj else []),
                *request.flags, "-o", f"/out/{name}", *files, *(["/wb-sjlj/tag.c"] if sjlj else [])]
        if "-lm" not in request.flags:
            argv.append("-lm")
        return self._compile(request, argv, name, extra_binds=(Bind(SJLJ, "/wb-sjlj"),) if sjlj else ())


class ZigLane(ZigLaneBase):
    """A ``.zig`` root file (``entry``, else ``src/main.zig`` or ``main.zig``) with ``build-exe``.

    ``build.zig`` is not run: its build runner is a native program zig compiles from the
    whole std for each new build.zig (minutes on two cores, cached only per build.zig)."""

    lane: ClassVar[str] = "zig"

    def build(self, request: BuildRequest) -> BuildOutput:
        src = request.source.dir
        if src is None:
            raise InvalidArgs("zig lane builds a source folder; this BUILD_SRC resolved to a prebuilt "
                              "artifact")
        check_zig_flags(request.flags)
        base = _inside(src, request.source.entry)
        name = artifact_name(request)
        if base.is_dir():
            entry = next((base / c for c in ("src/main.zig", "main.zig") if (base / c).is_file()), None)
            if entry is None:
                hint = (" (build.zig projects are not run: zig would compile its build runner natively for "
                        "every build, minutes each; name the root .zig file instead)"
                        if (base / "build.zig").is_file() else "")
                raise InvalidArgs(f"zig lane: no src/main.zig or main.zig under {base}{hint}")
            base = entry
        if base.suffix != ".zig":
            raise InvalidArgs(f"zig lane builds .zig files; {base.name!r} is not one")
        opt = next((f[2:] for f in request.flags if f.startswith("-O") and not f.startswith("-D")),
                   "ReleaseSmall")
        strip = [] if any("strip" in f for f in request.flags) else ["-fstrip"]
        extra = [f for f in request.flags if f.startswith("-f")]
        argv = ["/zig/zig", "build-exe", "-target", "wasm32-wasi", "-O", opt, *strip, *extra,
                f"-femit-bin=/out/{name}", _guest(src, base)]
        return self._compile(request, argv, name)
