"""The ``os_process`` tier (rung 1): a command runs in a separate process inside the
build sandbox — its own namespaces, no network, no host files but its module, uid 1000,
seccomp, rlimits, a wall-clock deadline — on top of wasm's own linear-memory isolation.

Each call starts one sandboxed interpreter that loads wasmtime and runs the module
(about a few hundred ms: a pool of warm workers speaking seed 003's framed protocol is
the next step). Capabilities are not bridged across the process boundary yet: a command
whose effective caps are not empty is refused here with that reason, never run without them.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wbcore.errors import CapabilityDenied, InvalidArgs, Timeout
from wbcore.records import Availability

if TYPE_CHECKING:
    from wbcore.runtime import Runtime

WORKER = Path(__file__).with_name("_tier_worker.py")
DENIED = "wb-os-process: capability-denied: "  # the worker's refusal line (see _tier_worker.py)


def _wasmtime_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("wasmtime")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


def available() -> Availability:
    from wb_process.sandbox import probe

    if _wasmtime_dir() is None:
        return Availability.no("wasmtime is not importable (pip install wasmtime)")
    ok, reason, _ = probe()
    return Availability.yes(f"sandbox: {reason}") if ok else Availability.no(f"the build sandbox is unavailable: {reason}")


class OsProcessTier:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def call(self, request: Any) -> Any:
        from wbcore.calls import CallResult, CommandRequest, Usage

        from wb_process.sandbox import Bind, Limits, Sandbox, system_binds

        if not isinstance(request, CommandRequest):
            raise InvalidArgs(f"tier os_process cannot run a {type(request).__name__} yet (commands only)")
        if request.caps:
            raise CapabilityDenied(
                f"tier os_process does not bridge capabilities yet; {request.name} is granted "
                f"{', '.join(sorted(request.caps))}: run it at tier instance"
            )
        wasmtime_dir = _wasmtime_dir()
        if wasmtime_dir is None:
            raise InvalidArgs("tier os_process needs wasmtime importable")
        argv = [request.name, *request.argv]
        stdin = request.stdin
        if request.arg_mode == "stdin1" and request.argv:
            stdin = " ".join(request.argv).encode() + b"\n" + stdin
            argv = [request.name]
        base = Path(sys.base_prefix).resolve()
        python = Path(sys.executable).resolve()
        if not python.is_relative_to(base):
            python = base / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
        binds = system_binds() + [
            Bind(base, str(base)),
            Bind(wasmtime_dir, "/wb/site"),
            Bind(WORKER, "/wb/worker.py"),
            Bind(Path(request.artifact), "/wb/module.wasm"),
        ]
        prof = request.profile
        # wasmtime reserves virtual address space (guard regions) per linear memory; the
        # guest's real memory is capped by the store's limits, not by RLIMIT_AS.
        limits = Limits(wall_seconds=request.timeout_s + 2.0, cpu_seconds=int(request.timeout_s) + 2, address_space=64 << 30,
                        output_bytes=max(prof.stdout_bytes, prof.stderr_bytes), out_bytes=1 << 20, tmp_bytes=16 << 20)
        with tempfile.TemporaryDirectory(prefix="wb-osp-") as tmp:
            res = Sandbox().run(
                [str(python), "-I", "-S", "/wb/worker.py", "/wb/site", "/wb/module.wasm", str(prof.memory_bytes), *argv],
                binds=binds, out_dir=Path(tmp), limits=limits, stdin=stdin, cwd="/tmp",
            )
        if res.timed_out or res.limit in ("cpu", "wall-clock"):
            raise Timeout(f"{request.name}: over its {request.timeout_s:g}s deadline at tier os_process")
        if res.returncode == 126 and res.stderr.startswith(DENIED.encode()):
            line = res.stderr.splitlines()[0].decode("utf-8", "replace")
            raise CapabilityDenied(f"{request.name}: {line.removeprefix(DENIED)}")
        return CallResult(stdout=res.stdout[: prof.stdout_bytes], stderr=res.stderr[: prof.stderr_bytes],
                          exit_code=res.returncode, usage=Usage(wall_s=res.duration, bytes_out=len(res.stdout)))


def factory(runtime: Runtime) -> OsProcessTier:
    return OsProcessTier(runtime)
