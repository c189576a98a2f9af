"""The rust lane driver: rustc (one file) or cargo (a package) inside the build sandbox.

- **One file** (no ``Cargo.toml``): ``rustc --target wasm32-wasi(p1) -C opt-level=s -C
  strip=symbols`` on ``main.rs`` (or the BUILD_SRC entry), source read-only at ``/src``.
- **A Cargo package**: the source is copied into the sandbox's ``/out`` (cargo writes
  ``Cargo.lock`` beside ``Cargo.toml``), then ``cargo build --offline --release`` with
  crates.io replaced by a local directory source: the package's own ``vendor/`` if it
  has one, else the configured crate folder (``$WB_RUST_CRATES``, default Debian's
  ``/usr/share/cargo/registry``) bound read-only at ``/crates``. The target dir is the
  sandbox's private ``/tmp``. Build scripts and proc-macros run natively, but only in
  there: no network, nothing of the host but the toolchain.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wbcore_runtime.build import BuildFailed, BuildOutput, BuildRequest
from wbcore_runtime.contract.errors import Internal, InvalidArgs, Timeout
from wbcore_runtime.contract.sandbox import Bind, BuildSandboxDriver, SandboxLimits, SandboxResult

from wbcore_lane_rust.toolchain import DEFAULT_CRATES, Rust, find

MAX_ARTIFACT_BYTES = 64 << 20
#: Flags a manifest may pass: cfg values and cargo features only.
FLAG_RE = re.compile(r"^(--cfg=[A-Za-z_][A-Za-z0-9_]*(=\"[^\"]*\")?|--features=[A-Za-z0-9_,/-]+)$")


def check_flags(flags: tuple[str, ...]) -> None:
    """The rust lane's ``#+BUILD_FLAGS`` allowlist (build and verify both call it)."""
    for flag in flags:
        if not FLAG_RE.match(flag):
            raise InvalidArgs(f"rust: flag {flag!r} is not allowed (allowed: --cfg=NAME, --features=a,b); "
                              "remove it from #+BUILD_FLAGS")


def limits(wall: float) -> SandboxLimits:
    return SandboxLimits(wall_seconds=wall, cpu_seconds=int(wall * 2) + 10, processes=512, tmp_bytes=2 << 30,
                  out_bytes=1 << 30, out_files=200_000)


def crate_name(name: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return out if out and not out[0].isdigit() else f"_{out}"


def cargo_bin(manifest: Path, want: str | None) -> str:
    """The binary target to build: ``want`` if the package has it, else its first bin."""
    try:
        doc = tomllib.loads(manifest.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidArgs(f"rust: cannot read {manifest.name}: {exc}") from None
    bins = [b.get("name") for b in doc.get("bin", []) if isinstance(b, dict) and b.get("name")]
    pkg = (doc.get("package") or {}).get("name")
    if not bins and pkg:
        bins = [pkg]
    if not bins:
        raise InvalidArgs(f"rust: {manifest} names no [package] or [[bin]]")
    return want if want is not None and want in bins else str(bins[0])


def crate_set(folder: Path | None) -> str:
    """What a cargo build without ``vendor/`` can link: a digest of the crate folder's path
    and the names of its crates (``name-version``; a published version never changes, as
    on crates.io), ``none`` without one. Another crate folder, or a crate version added or
    removed, changes it: cargo may resolve the same ``Cargo.toml`` to other code."""
    if folder is None:
        return "none"
    h = hashlib.sha256(str(folder).encode() + b"\0")
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    for name in names:
        h.update(name.encode(errors="surrogateescape") + b"\0")
    return h.hexdigest()[:16]


@dataclass
class RustLane:
    home: Path
    env: Mapping[str, str]
    #: The runtime's ``build_sandbox``, asked when a build starts (``NotFound`` naming what
    #: to install when no plugin serves one).
    sandbox: Callable[[], BuildSandboxDriver]
    wall: float = 600.0

    @classmethod
    def for_runtime(cls, runtime: Any) -> RustLane:
        env = dict(getattr(runtime, "env", {}) or {})
        return cls(home=Path(runtime.home), env=env, sandbox=runtime.build_sandbox,
                   wall=float(env.get("WB_BUILD_TIMEOUT", "600")))

    @property
    def rust(self) -> Rust:
        got = find()
        if isinstance(got, str):
            raise Internal(f"rust lane unavailable: {got}")
        return got

    @property
    def version(self) -> str:
        """The toolchain, the recipe and the crate set a cargo build resolves from: the build
        cache key's toolchain part (``wbcore_runtime.build.cache.key``)."""
        r = self.rust
        return (f"{r.version} {r.target} opt-level=s strip=symbols; cargo {'yes' if r.cargo else 'no'}; "
                f"crates {crate_set(self.crates_dir())}")

    def crates_dir(self) -> Path | None:
        base = self.env.get("WB_RUST_CRATES")
        p = Path(base) if base else DEFAULT_CRATES
        return p if p.is_dir() else None

    def _tool_binds(self, box: BuildSandboxDriver, r: Rust) -> tuple[list[Bind], str, str | None]:
        """Binds for the toolchain, and the rustc / cargo paths inside the sandbox."""
        binds = list(box.system_binds())
        if r.system:
            return binds, str(r.rustc), str(r.cargo) if r.cargo else None
        binds.append(Bind(r.sysroot, "/rust"))
        return binds, "/rust/bin/rustc", "/rust/bin/cargo" if r.cargo else None

    def build(self, request: BuildRequest) -> BuildOutput:
        src = request.source.dir
        if src is None:
            raise InvalidArgs("rust builds a source folder; this BUILD_SRC resolved to a prebuilt artifact")
        check_flags(request.flags)
        box = self.sandbox()
        r = self.rust
        name = request.manifest.cli_bin or request.manifest.id
        root = (src / request.source.entry if request.source.entry and (src / request.source.entry).is_dir()
                else src)
        with tempfile.TemporaryDirectory(prefix="wb-rust-") as tmp:
            box_out = Path(tmp) / "out"
            if (root / "Cargo.toml").is_file():
                res, cmdline = self._cargo(request, box, r, root, name, box_out)
            else:
                res, cmdline = self._rustc(request, box, r, src, name, box_out)
            log = f"$ {cmdline}\n{res.log}"
            if res.timed_out:
                raise Timeout((f"rust: build passed its {self.wall:g}s deadline and was killed\n"
                               f"{res.log}").rstrip())
            if not res.ok:
                first = next((ln for ln in res.log.splitlines() if ln.startswith("error")),
                             f"exit {res.returncode}")
                why = f"the {res.limit} limit" if res.limit else f"exit {res.returncode}"
                raise BuildFailed(f"rust: build failed ({why}): {first}", log=log)
            built = box_out / f"{name}.wasm"
            if not built.is_file():
                raise BuildFailed(f"rust: the build exited 0 but wrote no {name}.wasm", log=log)
            if built.stat().st_size > MAX_ARTIFACT_BYTES:
                raise BuildFailed(f"rust: output over the {MAX_ARTIFACT_BYTES}-byte cap", log=log)
            request.outdir.mkdir(parents=True, exist_ok=True)
            artifact = request.outdir / f"{name}.wasm"
            shutil.move(str(built), artifact)
        return BuildOutput(artifact=artifact, log=log)

    def _rustc(self, request: BuildRequest, box: BuildSandboxDriver, r: Rust, src: Path, name: str,
               out: Path) -> tuple[SandboxResult, str]:
        entry = request.source.entry or "main.rs"
        if not (src / entry).is_file():
            if (src / "src" / "main.rs").is_file() and not request.source.entry:
                entry = "src/main.rs"
            else:
                raise InvalidArgs(f"rust: no {entry} under {src} (and no Cargo.toml)")
        binds, rustc, _ = self._tool_binds(box, r)
        binds.append(Bind(src, "/src"))
        cfgs = [f for f in request.flags if f.startswith("--cfg=")]
        argv = [rustc, "--edition", "2021", "--crate-name", crate_name(name), "--crate-type", "bin",
                "--target", r.target, "-C", "opt-level=s", "-C", "strip=symbols", "-C", "codegen-units=1",
                "--remap-path-prefix=/src=src", *cfgs,
                "-o", f"/out/{name}.wasm", f"/src/{entry}"]
        if request.progress:
            request.progress(f"{r.version} → {r.target} in the build sandbox")
        res = box.run(argv, binds=binds, out_dir=out, limits=limits(self.wall), env={"TMPDIR": "/tmp"},
                      cwd="/src")
        return res, " ".join(argv)

    def _cargo(self, request: BuildRequest, box: BuildSandboxDriver, r: Rust, root: Path, name: str,
               out: Path) -> tuple[SandboxResult, str]:
        binds, rustc, cargo = self._tool_binds(box, r)
        if cargo is None:
            raise InvalidArgs(f"rust: {root.name} is a Cargo package but {r.version} has no cargo beside it")
        binary = cargo_bin(root / "Cargo.toml", name)
        if (root / "vendor").is_dir():
            crates = "/out/vendor"
        else:
            cdir = self.crates_dir()
            crates = "/crates"
            if cdir is not None:
                binds.append(Bind(cdir, "/crates"))
        features = [f for f in request.flags if f.startswith("--features=")]
        cargo_argv = [cargo, "build", "--offline", "--release", "--target", r.target, "--bin", binary,
                      "--manifest-path", "/out/Cargo.toml", *features,
                      "--config", 'source.crates-io.replace-with="wb-local"',
                      "--config", f'source.wb-local.directory="{crates}"']
        cfg_flags = " ".join(f.replace("--cfg=", "--cfg ", 1)
                             for f in request.flags if f.startswith("--cfg="))
        env = {
            "CARGO_HOME": "/tmp/cargo-home", "CARGO_TARGET_DIR": "/tmp/target", "CARGO_NET_OFFLINE": "true",
            "RUSTC": rustc, "TMPDIR": "/tmp", "CARGO_TERM_COLOR": "never",
            "CARGO_PROFILE_RELEASE_OPT_LEVEL": "s", "CARGO_PROFILE_RELEASE_CODEGEN_UNITS": "1",
            "RUSTFLAGS": f"-C strip=symbols --remap-path-prefix=/out=src {cfg_flags}".strip(),
        }
        if request.progress:
            request.progress(f"cargo build --offline ({r.version} → {r.target}) in the build sandbox")
        quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in cargo_argv)
        script = f"set -e\n{quoted}\ncp /tmp/target/{r.target}/release/{binary}.wasm /out/{name}.wasm\n"
        res = box.run(["/bin/sh", "-c", script], binds=binds, out_dir=out, limits=limits(self.wall),
                      env=env, cwd="/out", seed_out=root)
        return res, " ".join(cargo_argv)
