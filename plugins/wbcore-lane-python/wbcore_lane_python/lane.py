"""The python lane: ``componentize-py`` builds a Python toolkit against a WIT world into a
component, inside the runtime's build sandbox (``runtime.build_sandbox()``,
``wbcore_runtime.contract.sandbox``).

Manifest keywords the lane reads:

- ``#+BUILD_SRC: path:src`` — the Python sources (the app module and any pure-Python
  packages it imports); ``#+WIT: src/wit`` — the WIT folder (or file), which must lie
  inside the source folder so its content is part of the source digest and build cache;
- ``#+WIT_WORLD:`` — the world to build (optional when the WIT has one);
- ``#+PY_MODULE:`` — the app module (default: ``app``, or the file ``path:`` names);
- ``#+WASI: p2`` — keep WASI; otherwise the component is built with ``--stub-wasi`` and
  imports nothing (a pure toolkit).

What the compiler sees: the host's program folders and the Python installation
read-only (needed to run componentize-py, whose compiler is native code in that Python
package), ``/src`` read-only, a private ``/tmp``, and ``/out`` for the component; no
network, no ``/etc``, no home. componentize-py pre-initializes the app by running its
module top level inside wasmtime (in the sandbox): toolkit code never runs natively.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from wbcore_runtime.build import BuildFailed, BuildOutput, BuildRequest, products
from wbcore_runtime.guard import paths
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, Timeout
from wbcore_runtime.contract.drivers import Availability
from wbcore_runtime.contract.sandbox import Bind, SandboxLimits

MAX_ARTIFACT_BYTES = 128 << 20
MODULE_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
WORLD_RE = r"^[a-z][a-z0-9-]*(?::[a-z][a-z0-9-]*(?:/[a-z][a-z0-9-]*)?(?:@[0-9A-Za-z.+-]+)?)?$"
#: componentize-py pre-initializes CPython inside wasmtime, which reserves large virtual
#: memory; address space is therefore wide while CPU, wall time and output stay bounded.
ADDRESS_SPACE = 64 << 30


@dataclass(frozen=True, slots=True)
class Toolchain:
    version: str
    package_dir: Path  # the componentize_py package folder
    python_prefix: Path  # sys.base_prefix: the interpreter and its standard library

    @property
    def python(self) -> Path:
        # The base interpreter, not the venv's: a venv made by copying (venv's default
        # outside its CLI) puts its python next to the project, which may sit under /tmp,
        # a folder the sandbox replaces with its own private tmp. componentize_py itself is
        # bound at /pylib and run with -I, so nothing of the venv is needed inside.
        base = self.python_prefix / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
        return base if base.is_file() else Path(sys.executable).resolve()


@cache
def toolchain() -> Toolchain | None:
    spec = importlib.util.find_spec("componentize_py")
    if spec is None or not spec.submodule_search_locations:
        return None
    from importlib.metadata import version

    return Toolchain(version("componentize-py"), Path(next(iter(spec.submodule_search_locations))),
                     Path(sys.base_prefix).resolve())


def check() -> Availability:
    tc = toolchain()
    if tc is None:
        return Availability.no("componentize-py is not installed (pip install componentize-py)")
    return Availability.yes(f"componentize-py {tc.version}")


class PythonLane:
    """``BuildLane("python").factory(runtime)``."""

    def __init__(self, runtime: Any) -> None:
        tc = toolchain()
        if tc is None:
            raise InvalidArgs(check().reason)
        self.tc = tc
        #: asked when a build starts: ``NotFound`` naming what to install when none is served
        self.sandbox = runtime.build_sandbox
        # The toolchain's identity: componentize-py bundles its own CPython, and the host
        # interpreter runs it; both name what produced the bytes.
        self.version = f"componentize-py {tc.version}; host CPython {sys.version.split()[0]}"

    def argv(self, request: BuildRequest) -> tuple[list[str], Path]:
        """The sandboxed command line, and the host source folder bound at ``/src``."""
        import re

        m = request.manifest
        src = request.source.dir
        if src is None:
            raise InvalidArgs(f"{m.id}: the python lane builds from source (BUILD_SRC resolved to a prebuilt "
                              "artifact)")
        # CPython would import bytecode from __pycache__ (or a bare .pyc) instead of the
        # source: code nobody reviewed, and the poisoning vector of docs/build.md.
        products.refuse(src, lane="python", dirs=products.PYTHON_PRODUCTS[0],
                        suffixes=products.PYTHON_PRODUCTS[1])
        wit_rel = m.extra("WIT")
        if not wit_rel:
            raise InvalidArgs(f"{m.id}: the python lane needs #+WIT (the WIT folder or file, inside "
                              f"{m.build_src})")
        try:
            wit = paths.inside(m.dir, wit_rel, expect="any")
        except NotFound:
            raise InvalidArgs(f"{m.id}: #+WIT {wit_rel} does not exist") from None
        real_src = Path(os.path.realpath(src))
        if wit != real_src and real_src not in wit.parents:
            # The resolved copy is what the digest covers; a WIT outside it would escape the build cache.
            try:
                rel_to_src = wit.relative_to(Path(os.path.realpath(m.dir))
                                             / (m.build_src or "").split(":", 1)[-1])
            except ValueError:
                raise InvalidArgs(f"{m.id}: #+WIT {wit_rel} must lie inside the BUILD_SRC folder "
                                  f"{m.build_src}") from None
            wit = real_src / rel_to_src
        if not wit.exists():
            raise InvalidArgs(f"{m.id}: #+WIT {wit_rel} does not exist")
        wit_in = "/src/" + wit.relative_to(real_src).as_posix() if wit != real_src else "/src"
        module = m.extra("PY_MODULE") or (Path(request.source.entry).stem if request.source.entry else "app")
        if not re.match(MODULE_RE, module):
            raise InvalidArgs(f"{m.id}: #+PY_MODULE {module!r} is not a module name")
        if not (real_src / f"{module}.py").is_file() and not (real_src / module / "__init__.py").is_file():
            raise InvalidArgs(f"{m.id}: app module {module!r} not found in {m.build_src} ({module}.py)")
        argv = [str(self.tc.python), "-I", "-c",
                "import sys; sys.path.insert(0, '/pylib'); import componentize_py; "
                "sys.exit(componentize_py.script())",
                "-d", wit_in]
        world = m.extra("WIT_WORLD")
        if world:
            if not re.match(WORLD_RE, world):
                raise InvalidArgs(f"{m.id}: #+WIT_WORLD {world!r} is not a world name")
            argv += ["-w", world]
        argv += ["componentize", "-p", "/src", "-o", "/out/component.wasm"]
        if (m.extra("WASI") or "").lower() not in ("p2", "yes", "true"):
            argv.append("--stub-wasi")
        argv.append(module)
        return argv, real_src

    def build(self, request: BuildRequest) -> BuildOutput:
        argv, src = self.argv(request)
        m = request.manifest
        box = self.sandbox()
        binds = [*box.system_binds(), Bind(self.tc.python_prefix, str(self.tc.python_prefix)),
                 Bind(self.tc.package_dir, "/pylib/componentize_py"), Bind(src, "/src")]
        if not str(self.tc.python).startswith(str(self.tc.python_prefix)):
            binds.append(Bind(self.tc.python.parent, str(self.tc.python.parent)))
        if request.progress:
            request.progress(f"componentize-py {self.tc.version}: building {m.id} (pre-initializes CPython; "
                             "~10-20 s)")
        limits = SandboxLimits(wall_seconds=300, cpu_seconds=300, address_space=ADDRESS_SPACE,
                               out_bytes=MAX_ARTIFACT_BYTES, tmp_bytes=1 << 30)
        res = box.run(argv, binds=binds, out_dir=request.outdir, limits=limits,
                      env={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "SOURCE_DATE_EPOCH": "0"})
        log = res.log
        if res.timed_out:
            raise Timeout(f"{m.id}: componentize-py passed its {res.limit or 'wall-clock'} "
                          f"limit\n{log[-4000:]}")
        out = request.outdir / "component.wasm"
        if not res.ok or not out.is_file():
            first = next((ln for ln in log.splitlines() if "Error" in ln), f"exit {res.returncode}")
            raise BuildFailed(f"python lane: componentize-py failed for {m.id}: {first.strip()}",
                              log=_trim(log))
        return BuildOutput(artifact=out, log=_trim(log))


def _trim(log: str) -> str:
    # componentize-py prints Rust backtraces of 30+ frames; keep the Python part.
    lines = [ln for ln in log.splitlines() if not ln.lstrip().startswith(("at ", "Stack backtrace"))
             and not ln.lstrip()[:4].rstrip(":").isdigit()]
    return "\n".join(lines)[-64_000:]
