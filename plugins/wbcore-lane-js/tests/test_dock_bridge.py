"""A js toolkit reaches granted caps through wbcore_runtime/sdk/wb_dock.js (the lane adds it) and the
lane's bridge, end to end."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SDK = Path(__file__).resolve().parents[3] / "wbcore_runtime" / "sdk" / "wb_dock.js"
needs = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None
        for m in ("wbcore_sources", "wbcore_wasmtime", "wbcore_brokers_state")) or not SDK.is_file(),
    reason="needs wbcore-sources, wbcore-wasmtime, wbcore-brokers-state",
)

MAIN = """import { wb, DockError } from './wb_dock.js';
const [, op, key] = scriptArgs;
try {
  if (op === 'put') { wb.kv.put({ key, value: new TextEncoder().encode(std.in.readAsString()) }); console.log('stored'); }
  if (op === 'get') console.log(new TextDecoder().decode(wb.kv.get({ key }).value));
  if (op === 'net') wb.net.fetch({ url: 'http://127.0.0.1/' });
} catch (e) {
  if (!(e instanceof DockError)) throw e;
  console.log(e.kind);
  process.exitCode = e.exitCode;
}
"""  # noqa: E501


@needs
def test_js_toolkit_uses_kv_and_is_denied_net(make_toolkit, make_runtime, wbx):
    make_toolkit("jsnotes", exec="command", caps="kv",
                 extra={"BUILD_LANG": "js", "BUILD_SRC": "path:src", "CLI_BIN": "jsnotes"},
                 drawer={"CLI_BIN": "jsnotes"}, files={"src/main.js": MAIN})
    rt = make_runtime()
    built = wbx("toolkit", "build", "jsnotes", runtime=rt)
    assert built.exit_code == 0, built.stderr
    put = wbx("run", "jsnotes", "put", "greeting", runtime=rt, input="hello from js")
    assert (put.exit_code, put.stdout) == (0, "stored\n"), put.stderr
    got = wbx("run", "jsnotes", "get", "greeting", runtime=rt, input="")
    assert got.stdout == "hello from js\n", got.stderr
    missing = wbx("run", "jsnotes", "get", "absent", runtime=rt, input="")
    assert missing.stdout == "not-found\n" and missing.exit_code == 66
    denied = wbx("run", "jsnotes", "net", runtime=rt, input="")
    assert denied.stdout == "capability-denied\n" and denied.exit_code == 77


def test_a_toolkit_shipping_its_own_wb_dock_js_is_refused(tmp_path):
    from wbcore_runtime.contract.errors import InvalidArgs

    from wbcore_lane_js.lane import with_sdk

    with pytest.raises(InvalidArgs, match="the Dock SDK the lane adds"):
        with_sdk({"main.js": "import './wb_dock.js';", "wb_dock.js": "globalThis.steal = 1;"})
    got = with_sdk({"main.js": "import './wb_dock.js';"})
    assert got["wb_dock.js"] == SDK.read_text()
