"""Third-party C is built by the c-wasm lane (tcc inside wasm) by default, and C that uses a
cap must build and run there too: wb_dock.h gives tcc a direct-call thunk per cap the
manifest declares (a module importing an undeclared cap would not instantiate)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("wbcore_lane_c_wasm", reason="the c-wasm lane (wbcore-lane-c-wasm) is not installed")
pytest.importorskip("wbcore_brokers_state", reason="the kv broker (wbcore-brokers-state) is not installed")

TOOLKITS = Path(__file__).resolve().parents[2] / "toolkits"


@pytest.fixture
def notes_root(tmp_path: Path) -> Path:
    root = tmp_path / "tk"
    shutil.copytree(TOOLKITS / "notes", root / "notes")
    manifest = root / "notes" / "manifest.org"
    manifest.write_text(manifest.read_text().replace("#+BUILD_LANG: c\n", "#+BUILD_LANG: c-wasm\n"))
    return root


def test_c_that_uses_kv_builds_in_c_wasm_and_runs(notes_root: Path, make_runtime, wbx) -> None:
    rt = make_runtime(roots=[notes_root])
    r = wbx("toolkit", "build", "notes", runtime=rt)
    assert r.exit_code == 0, r.stderr
    assert wbx("run", "notes", "put", "todo", runtime=rt, input=b"buy milk\n").exit_code == 0
    got = wbx("run", "notes", "get", "todo", runtime=rt, input=b"")
    assert (got.exit_code, got.stdout) == (0, "buy milk\n"), got.stderr
    # Only the declared cap (plus the Dock's always-linked fetch/info) is imported.
    wasm = rt.artifacts.path(rt.registry.get("command", "notes").sha256).read_bytes()
    assert b"\x02wb\x02kv" in wasm and b"\x02wb\x03vfs" not in wasm


def test_an_undeclared_cap_is_a_build_error_that_names_the_fix(notes_root: Path, make_runtime, wbx) -> None:
    manifest = notes_root / "notes" / "manifest.org"
    manifest.write_text(manifest.read_text().replace("#+CAPS: kv\n", ""))
    rt = make_runtime(roots=[notes_root])
    r = wbx("toolkit", "build", "notes", runtime=rt)
    assert r.exit_code == 2
    assert "declare #+CAPS: kv in the manifest" in r.stderr, r.stderr
