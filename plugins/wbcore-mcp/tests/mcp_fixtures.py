"""Fixture toolkits for the MCP and `wbx call` tests: a command, a runaway command, a
kernel, a typed component and a component that imports an ungranted cap, registered
from the WAT sources in data/ (the wat lane's job, done here directly)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wbcore_testing.fixtures import manifest_text, write_toolkit

DATA = Path(__file__).parent / "data"
CAPUSER = Path(__file__).parents[2] / "wbcore-wasmtime" / "tests" / "data" / "capuser.wat"

TEXT_SKILL = """#+TITLE: tcat
#+ARG: fail:boolean Make the command fail with exit code 3 (for testing).
#+FLAGS: idempotent

Copies stdin to stdout.
"""


def populate(root: Path, home: Path) -> None:
    """Write the fixture toolkits under ``root`` and register their artifacts in ``home``."""
    import wasmtime

    from wbcore_runtime.build import builder
    from wbcore_runtime.runtime import Runtime

    rt = Runtime.open(home=home, roots=[root])
    store = rt.artifacts

    def put(path: Path) -> str:
        return store.put_bytes(bytes(wasmtime.wat2wasm(path.read_text()))).sha256

    kits: list[tuple[str, str, str, dict[str, Any], str]] = [
        ("textkit", "command", "tcat", {"TAGLINE": "Echo text through a sandboxed command."}, "echo.wat"),
        ("loopkit", "command", "spin", {"TAGLINE": "A runaway command that never ends."}, "spin.wat"),
        ("upperkit", "kernel", "upcase", {"TAGLINE": "Upper-case bytes in a hot loop."}, "upper.wat"),
        ("calckit", "component", "calckit", {"TAGLINE": "Typed arithmetic as a component."}, "calc.wat"),
        ("kvkit", "component", "kvkit", {"TAGLINE": "A component that wants the kv cap."}, str(CAPUSER)),
    ]
    for ident, shape, name, kw, src in kits:
        extra = {"CLI_BIN": name} if shape != "component" else {"WIT": "wb:host/toolkit"}
        if shape == "kernel":
            extra["KERNEL_TIMEOUT"] = "5"
        skills = {"overview": f"#+TITLE: {ident} overview\n\n{kw['TAGLINE']}\n"}
        if ident == "textkit":
            skills["tcat"] = TEXT_SKILL
        write_toolkit(root, ident, manifest_text(ident, exec=shape, extra=extra, tagline=kw["TAGLINE"]),
                      skills=skills)
        sha = put(DATA / src if "/" not in src else Path(src))
        rt.discover(refresh=True)
        builder.register_artifact(rt, ident, sha)  # as a build would: with the toolkit's provenance
    rt.registry.close()


