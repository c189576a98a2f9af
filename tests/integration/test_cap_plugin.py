"""A plugin installed with pip adds a capability (docs/plugins.md, "A plugin that adds a cap").

The distribution in ``tests/data/cap-plugin`` (``example-wbcore-dice``) serves a broker for
``dice``, a cap the core does not know, declaring its meaning and no profile. A toolkit whose
WAT guest imports ``wb.dice`` is refused (capability-denied, exit 126) until the deployer
grants it, then answers real bytes from the host; without the plugin the cap is unknown and
still grants nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("wasmtime")
cbor2 = pytest.importorskip("cbor2")

from wbcore_runtime.build import builder  # noqa: E402  (after importorskip)
from wbcore_runtime import hookimpl  # noqa: E402
from wbcore_runtime.contract.errors import CapabilityDenied  # noqa: E402
from wbcore_runtime.contract.records import Broker  # noqa: E402
from wbcore_testing.fixtures import manifest_text, write_toolkit  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "data"

#: command: calls ``wb.dice`` with {"op": "roll", "count": 4, "sides": 6} and writes the CBOR answer to
#: stdout.
DICE_WAT = """(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (import "wb" "dice" (func $dice (param i32 i32 i32 i32) (result i64)))
  (memory (export "memory") 2)
  (data (i32.const 64) "\\a3\\62op\\64roll\\65count\\04\\65sides\\06")
  (func (export "_start") (local $n i64)
    (local.set $n (call $dice (i32.const 64) (i32.const 23) (i32.const 4096) (i32.const 60000)))
    (if (i64.lt_s (local.get $n) (i64.const 0)) (then (local.set $n (i64.const 0))))
    (i32.store (i32.const 0) (i32.const 4096)) (i32.store (i32.const 4) (i32.wrap_i64 (local.get $n)))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
"""


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _wbx(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wbcore_runtime", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def test_pip_installed_plugin_adds_a_cap(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(DATA / "cap-plugin", src)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--no-deps",
                    "--no-build-isolation", "--no-index", "--target", str(site), str(src)], check=True,
                   timeout=300)
    root = tmp_path / "toolkits"
    write_toolkit(root, "rolls", manifest_text("rolls", exec="command", caps="dice", extra={
        "BUILD_LANG": "wat", "BUILD_SRC": "path:src/main.wat", "CLI_BIN": "rolls"}),
                  files={"src/main.wat": DICE_WAT})
    env = {k: v for k, v in os.environ.items() if not k.startswith("WB_")}
    env.update(PYTHONPATH=str(site), WB_HOME=str(tmp_path / "home"), WB_TOOLKITS_ROOT=str(root))

    listing = _wbx(env, tmp_path, "plugins")
    assert "dice · example-wbcore-dice 0.2.0 · ok" in listing.stdout, listing.stdout + listing.stderr
    assert ("new cap dice: roll dice with the host's random source; granted by an explicit grant only"
            in listing.stdout)

    verify = _wbx(env, tmp_path, "toolkit", "verify", "rolls")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "dice granted only by explicit consent" in verify.stdout
    assert ("dice: roll dice with the host's random source (declared by example-wbcore-dice 0.2.0)"
            in verify.stdout)

    built = _wbx(env, tmp_path, "toolkit", "build", "rolls")
    assert built.returncode == 0, built.stdout + built.stderr
    denied = _wbx(env, tmp_path, "run", "rolls")
    assert denied.returncode == 126, denied.stdout + denied.stderr
    assert "dice" in denied.stderr and "not granted" in denied.stderr

    granted = _wbx(env, tmp_path, "toolkit", "grant", "rolls", "dice")
    assert granted.returncode == 0, granted.stdout + granted.stderr
    assert ("dice: roll dice with the host's random source (declared by example-wbcore-dice 0.2.0)"
            in granted.stdout)
    assert "effective: dice" in granted.stdout

    if _has("wbcore_mcp"):  # the MCP door shows the plugin's cap with its meaning
        tools = json.loads(_wbx(env, tmp_path, "mcp", "tools", "--json", "--only", "rolls").stdout)
        (tool,) = [t for t in tools if t["name"] == "rolls.rolls"]
        assert ("[plugin caps: dice: roll dice with the host's random source, from example-wbcore-dice 0.2.0]"
                in tool["description"])
        assert tool["annotations"]["openWorldHint"] is True and tool["annotations"]["readOnlyHint"] is False

    ran = subprocess.run([sys.executable, "-m", "wbcore_runtime", "run", "rolls"], capture_output=True,
                         env=env, cwd=tmp_path, timeout=120)
    assert ran.returncode == 0, ran.stderr
    faces = cbor2.loads(ran.stdout)["faces"]
    assert len(faces) == 4 and all(1 <= f <= 6 for f in faces)

    # The plugin gone, the same grant grants nothing: the cap is unknown again (fail-closed).
    env.pop("PYTHONPATH")
    gone = _wbx(env, tmp_path, "run", "rolls")
    assert gone.returncode == 126, gone.stdout + gone.stderr
    verify = _wbx(env, tmp_path, "toolkit", "verify", "rolls")
    assert verify.returncode == 1 and "unknown cap(s): dice" in verify.stdout



class _ProfiledDice:
    """The same broker, in-process, declaring that the network profile grants its cap."""

    @staticmethod
    def _driver(runtime: object) -> object:
        import secrets

        class Driver:
            def handle(self, call: object) -> object:
                return {"faces": bytes(1 + secrets.randbelow(6) for _ in range(call.arg("count", int)))}  # type: ignore[attr-defined]

        return Driver()

    @hookimpl
    def wbcore_brokers(self):  # noqa: ANN201 - a hook implementation
        yield Broker(name="dice", summary="dice", factory=self._driver, meaning="roll dice",
                     profiles=("network",))


def test_a_profile_named_by_the_declaration_grants_the_cap(make_runtime, toolkit_root: Path) -> None:
    for ident, profile in (("netdice", "network"), ("mindice", "minimal")):
        write_toolkit(toolkit_root, ident, manifest_text(ident, exec="command", caps="dice", extra={
            "BUILD_LANG": "wat", "BUILD_SRC": "path:src/main.wat", "CLI_BIN": ident, "PROFILE": profile}),
            files={"src/main.wat": DICE_WAT})
    rt = make_runtime(plugins=["wasmtime", "sources", _ProfiledDice()])
    builder.build(rt, "netdice")
    builder.build(rt, "mindice")
    # first-party: the profile grants it, no consent step
    assert rt.resolve("command", "netdice").caps == {"dice"}
    faces = cbor2.loads(rt.call("netdice").stdout)["faces"]
    assert len(faces) == 4 and all(1 <= f <= 6 for f in faces)
    assert rt.resolve("command", "mindice").caps == frozenset()  # a profile it did not name grants nothing
    with pytest.raises(CapabilityDenied, match="not granted"):
        rt.call("mindice")
