"""The c-wasm lane driver: compile a C source folder with tcc running in wasmtime.

The compiler guest sees exactly four directories: ``/src`` (the resolved source,
read-only), ``/out`` (the lane's output folder, the only writable one), ``/tcc`` and
``/wasi-sysroot`` (the toolchain, read-only). It runs under an epoch deadline and a
linear-memory cap; its stdout/stderr are captured and capped. ``#include
"/etc/passwd"`` finds nothing: no host path outside those four exists for it.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wbcore_runtime.contract import guest
from wbcore_runtime.build import BuildFailed, BuildOutput, BuildRequest
from wbcore_runtime.dispatch.dock import SDK_C, sdk_c_digest
from wbcore_runtime.contract.errors import InvalidArgs, Timeout

from wbcore_lane_c_wasm.toolchain import Toolchain, stage

#: Largest program the lane hands back, and most .c files it compiles in one build.
MAX_ARTIFACT_BYTES = 64 << 20
MAX_SOURCES = 2000
#: Flags a manifest or caller may pass through to tcc; everything else is refused
#: (``-o``, ``-run``, ``-B``, ``-L``... would change what the lane controls).
#: (``-Wl,``/``-Wa,``/``-Wp,`` would pass anything to the linker, assembler or preprocessor.)
FLAG_RE = re.compile(r"^-(D[A-Za-z_][A-Za-z0-9_]*(=.*)?|U[A-Za-z_][A-Za-z0-9_]*|W(?![alp],)[A-Za-z0-9,=_-]*"
                     r"|O[0-3s]?|g|std=[a-z0-9]+|f[a-z0-9-]+|l(m|c))$")
_MODULES: dict[Path, Any] = {}
_MODULES_LOCK = threading.Lock()
# Drop compiled modules before interpreter teardown unloads wasmtime's bindings.
atexit.register(_MODULES.clear)


def check_flags(flags: tuple[str, ...]) -> None:
    """The c-wasm lane's ``#+BUILD_FLAGS`` allowlist (build and verify both call it)."""
    for flag in flags:
        if not FLAG_RE.match(flag):
            raise InvalidArgs(f"c-wasm: flag {flag!r} is not allowed (allowed: -D -U -W -O -g -std= -f -lm "
                              "-lc); remove it from #+BUILD_FLAGS")


def _path_chmod(caller: Any, path_ptr: int, path_len: int, mode: int) -> int:
    """``shellsim.path_chmod``: the one non-WASI import of tcc-shellsim.wasm.

    tcc calls it once, after writing the linked program, to mark it executable.
    WASI Preview 1 has no permission bits and the lane sets none: this reads no
    guest memory, touches no host file and returns 0 (success). It cannot grant
    the guest anything, since it does nothing.
    """
    return 0


def _link_chmod(linker: Any, _store: Any) -> None:
    import wasmtime

    i32 = wasmtime.ValType.i32()
    linker.define_func("shellsim", "path_chmod", wasmtime.FuncType([i32, i32, i32], [i32]), _path_chmod,
                       access_caller=True)


def compiler_module(tc: Toolchain, guests: guest.GuestRunner) -> guest.GuestModule:
    """The compiled tcc module, compiled by the runtime's guest runner: in memory per process,
    on disk per engine (wasmtime version and config)."""
    with _MODULES_LOCK:
        mod = _MODULES.get(tc.compiler)
        if mod is not None and mod.runner is guests:
            return mod
        mod = guests.module(tc.compiler.read_bytes(), cache_dir=tc.tcc_dir.parent, name="tcc")
        _MODULES[tc.compiler] = mod
        return mod


def _sources(root: Path, entry: str | None) -> tuple[str, list[str]]:
    """(include dir, .c files) as guest paths under /src."""
    base = root
    if entry:
        target = (root / entry)
        if target.is_file():
            if target.suffix != ".c":
                raise InvalidArgs(f"c-wasm builds .c files; {entry!r} is not one")
            return "/src/" + os.path.dirname(entry) if os.path.dirname(entry) else "/src", ["/src/" + entry]
        base = target
    files: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".c"):
                files.append("/src/" + (Path(dirpath) / name).relative_to(root).as_posix())
                if len(files) > MAX_SOURCES:
                    raise InvalidArgs(f"c-wasm: more than {MAX_SOURCES} .c files under {base}")
    if not files:
        raise InvalidArgs(f"c-wasm: no .c files under {base}")
    inc = "/src" if base == root else "/src/" + base.relative_to(root).as_posix()
    return inc, files


#: A cap name that can be a C identifier suffix (-DWB_CAP_<cap>).
_CAP_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
#: tcc's message for a Dock function of a cap the manifest does not declare.
_UNDECLARED_CAP = re.compile(r"'wb_([a-z][a-z0-9_]*)' undeclared")


@dataclass
class CWasmLane:
    """Compiles every ``*.c`` of the source folder (or the one ``entry``) into one WASI module."""

    home: Path
    guests: guest.GuestRunner  # the runtime's WASI guest runner (contract.guest.runner)
    limits: guest.GuestLimits = field(default_factory=lambda: guest.GuestLimits(timeout_s=60.0,
                                                                                memory_bytes=512 << 20))
    _toolchain: Toolchain | None = None

    @classmethod
    def for_runtime(cls, runtime: Any) -> CWasmLane:
        env = getattr(runtime, "env", {}) or {}
        timeout = float(env.get("WB_BUILD_TIMEOUT", "60"))
        return cls(home=Path(runtime.home), guests=guest.runner(runtime),
                   limits=guest.GuestLimits(timeout_s=timeout, memory_bytes=512 << 20))

    @property
    def toolchain(self) -> Toolchain:
        if self._toolchain is None:
            self._toolchain = stage(self.home)
        return self._toolchain

    @property
    def version(self) -> str:
        return f"{self.toolchain.version}; wb_dock.h {sdk_c_digest()[:12]}"

    def build(self, request: BuildRequest) -> BuildOutput:
        src = request.source.dir
        if src is None:
            raise InvalidArgs("c-wasm builds a source folder; this BUILD_SRC resolved to a prebuilt artifact")
        check_flags(request.flags)
        inc, files = _sources(src, request.source.entry)
        name = (request.manifest.cli_bin or request.manifest.id) + ".wasm"
        outdir = request.outdir
        outdir.mkdir(parents=True, exist_ok=True)
        tc = self.toolchain
        # tcc knows an import's signature only from a direct call, so wb_dock.h gives it one
        # thunk per cap; -DWB_CAP_<cap> for each #+CAPS cap keeps the others out of the module
        # (a module importing an ungranted cap does not instantiate).
        caps = [f"-DWB_CAP_{c}" for c in sorted(request.manifest.caps) if _CAP_NAME.fullmatch(c)]
        argv = ["tcc", f"-I{inc}", "-I/wb-sdk", *caps, *request.flags, "-o", f"/out/{name}", *files]
        if request.progress:
            request.progress(f"tcc (in wasm): compiling {len(files)} file(s)")
        result = guest.run(
            compiler_module(tc, self.guests),
            argv,
            preopens=[
                guest.Preopen(src, "/src"),
                guest.Preopen(outdir, "/out", writable=True),
                guest.Preopen(tc.tcc_dir, "/tcc"),
                guest.Preopen(tc.sysroot, "/wasi-sysroot"),
                guest.Preopen(SDK_C, "/wb-sdk"),  # the Dock's C SDK (wb_dock.h), one copy in the core
            ],
            limits=self.limits,
            extra_imports=_link_chmod,
        )
        log = (result.stdout + result.stderr).decode("utf-8", "replace")
        if result.truncated:
            log += f"\n[c-wasm: compiler output cut at {self.limits.output_bytes} bytes]"
        cmdline = " ".join(argv)
        if result.timed_out:
            raise Timeout(f"c-wasm: tcc did not finish within {self.limits.timeout_s:g}s ({cmdline})")
        if result.exit_code != 0:
            why = result.trap or f"exit {result.exit_code}"
            first = next((ln for ln in log.splitlines() if ln.strip()), why)
            used = sorted(set(_UNDECLARED_CAP.findall(log)))
            if used:
                first += (f" — the program calls the Dock's {', '.join(f'wb_{c}' for c in used)}: declare "
                          f"#+CAPS: {' '.join(used)} in the manifest (the c-wasm lane links the caps it "
                          "declares)")
            raise BuildFailed(f"c-wasm: tcc failed ({why}): {first}", log=f"$ {cmdline}\n{log}")
        artifact = outdir / name
        if not artifact.is_file():
            raise BuildFailed(f"c-wasm: tcc exited 0 but wrote no /out/{name}", log=log)
        size = artifact.stat().st_size
        if size > MAX_ARTIFACT_BYTES:
            artifact.unlink()
            raise BuildFailed(f"c-wasm: output is {size} bytes, over the {MAX_ARTIFACT_BYTES}-byte cap",
                              log=log)
        return BuildOutput(artifact=artifact, log=f"$ {cmdline}\n{log}")
