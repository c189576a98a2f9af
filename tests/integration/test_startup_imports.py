"""What each command imports (issue 12's start-up budget): ``wbx run`` never imports Typer,
``wbx toolkit list`` imports no plugin and no wasmtime, and only commands that run wasm
import wasmtime. Each runs in a fresh interpreter, as a user's command would. The CLI's own
package (wbcore_cli) is the importer, so the plugins counted are the others."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from wbcore_runtime.build import builder
from wbcore_runtime.runtime import Runtime

TOOLKITS = Path(__file__).resolve().parents[2] / "toolkits"

PROBE = """
import json, sys
from wbcore_cli.app import main
code = main(sys.argv[1:])
sys.stdout.flush()
print("\\n" + json.dumps({"code": code, "modules": sorted(m for m in sys.modules
      if m.split(".")[0] in ("typer", "wasmtime", "stevedore", "importlib_metadata", "orgparse", "pluggy", "sqlite3")
      or m in ("importlib.metadata", "_hashlib", "dataclasses", "inspect") or (m.startswith("wbcore_") and not m.startswith(("wbcore_runtime", "wbcore_cli"))))}))
"""  # noqa: E501


def probe(home: Path, *args: str, stdin: bytes = b"") -> dict:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WB_")},
           "WB_HOME": str(home), "WB_TOOLKITS_ROOT": str(TOOLKITS)}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], input=stdin, capture_output=True, env=env,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout.decode().rsplit("\n", 2)[-2])


def test_run_imports_no_typer_and_list_no_plugin(tmp_path: Path) -> None:
    home = tmp_path / "home"
    builder.build(Runtime.open(home=home, roots=[TOOLKITS]), "b64")
    probe(home, "run", "b64", stdin=b"hi")  # fills the start-up caches
    ran = probe(home, "run", "b64", stdin=b"hi")
    assert ran["code"] == 0
    assert "wasmtime" in ran["modules"] and not any(m.startswith("typer") for m in ran["modules"]), ran
    assert "importlib.metadata" not in ran["modules"] and "orgparse" not in ran["modules"], ran
    # The resolution was kept by the runs before (wbcore_cli.runcache): no plugin manager, no
    # registry query, and of the plugins only the runner's and the tracer check's modules.
    assert "pluggy" not in ran["modules"] and "sqlite3" not in ran["modules"], ran
    # A small artifact's digests use CPython's own sha256: OpenSSL's library is not loaded.
    assert "_hashlib" not in ran["modules"], ran
    # The run path's records are written by hand (wbcore_runtime.contract.frozen): no dataclass is
    # made, so neither dataclasses nor inspect (~8 ms) is imported.
    assert "dataclasses" not in ran["modules"] and "inspect" not in ran["modules"], ran
    assert ({m.split(".")[0] for m in ran["modules"]
             if m.startswith("wbcore_") and not m.startswith("wbcore_runtime")}
            <= {"wbcore_wasmtime", "wbcore_otel"}), ran

    listed = probe(home, "toolkit", "list")
    assert listed["code"] == 0
    assert not [m for m in listed["modules"]
                if m.startswith(("wasmtime", "wbcore_")) and not m.startswith("wbcore_runtime")], listed
    assert "importlib.metadata" not in listed["modules"] and "orgparse" not in listed["modules"], listed
