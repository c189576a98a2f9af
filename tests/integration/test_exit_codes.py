"""Every exit code the docs promise, checked: the docs are scanned for ``exit N`` claims
and each code found must be one this file (or the named test) exercises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wbcore_testing.fixtures import manifest_text

REPO = Path(__file__).resolve().parents[2]
#: code → where it is checked (this file unless named).
CHECKED = {
    0: "test_audit_verify_0_and_70",
    1: "test_verify_failure_is_1",
    2: "test_invalid_args_is_2",
    68: "tests/core/test_fetch.py (dns)",
    69: "tests/core/test_fetch.py (unreachable)",
    74: "tests/integration/test_crash_safety.py (disk-full)",
    76: "tests/core/test_fetch.py, tests/core/test_identity.py (tls)",
    70: "test_audit_verify_0_and_70, test_trap_is_70",
    77: "plugins/wbcore-lane-js/tests/test_dock_bridge.py (a guest's own capability-denied exit)",
    124: "test_timeout_is_124",
    126: "test_sha256_mismatch_is_126",
    127: "test_not_found_is_127",
}
CLAIM = re.compile(r"\bexits?\s+(?:code\s+)?(\d{1,3})\b|\((\d{1,3}) not found|"
                   r"(\d{1,3}) invalid\s+args|(\d{1,3}) timeout"
                   r"|(\d{1,3}) capability denied|(\d{1,3}) internal")


def test_every_documented_exit_code_is_checked():
    found: dict[int, str] = {}
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for no, line in enumerate(page.read_text().splitlines(), 1):
            for m in CLAIM.finditer(line):
                code = int(next(g for g in m.groups() if g))
                found.setdefault(code, f"{page.name}:{no}")
    assert {126, 127, 70, 2, 124} <= set(found)
    unchecked = {code: where for code, where in found.items() if code not in CHECKED}
    assert not unchecked, f"documented exit codes without a test: {unchecked}"


def _wat_kit(make_toolkit, ident: str, body: str, **extra: str) -> None:
    wat = ('(module (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32))) '
           '(memory (export "memory") 1)\n'
           f'  (func (export "_start") {body}))\n')
    make_toolkit(ident, manifest=manifest_text(ident, exec="command", extra={
        "CLI_BIN": ident, "BUILD_LANG": "wat", "BUILD_SRC": "path:src/main.wat", **extra}),
                 files={"src/main.wat": wat})


@pytest.fixture
def rt(make_toolkit, make_runtime):
    _wat_kit(make_toolkit, "spin", "(loop $l (br $l))")
    _wat_kit(make_toolkit, "trap", "unreachable")
    _wat_kit(make_toolkit, "pinned", "(call $exit (i32.const 0))", SHA256="0" * 64)
    return make_runtime()


def test_not_found_is_127(rt, wbx):
    r = wbx("run", "no-such-command", runtime=rt)
    assert r.exit_code == 127 and r.stderr.startswith("wbx: not-found: ")
    assert wbx("toolkit", "show", "no-such-toolkit", runtime=rt).exit_code == 127


def test_invalid_args_is_2(rt, wbx):
    assert wbx("toolkit", "verify", runtime=rt).exit_code == 2
    assert wbx("toolkit", "build", "spin", "teleport", runtime=rt).exit_code == 2


def test_verify_failure_is_1(make_toolkit, make_runtime, wbx):
    make_toolkit("broken", exec="teleport")
    assert wbx("toolkit", "verify", "broken", runtime=make_runtime()).exit_code == 1


def test_timeout_is_124(rt, wbx):
    assert wbx("toolkit", "build", "spin", runtime=rt).exit_code == 0
    r = wbx("run", "--timeout", "0.3", "spin", runtime=rt, input=b"")
    assert r.exit_code == 124 and r.stderr.startswith("wbx: timeout: ")


def test_trap_is_70(rt, wbx):
    assert wbx("toolkit", "build", "trap", runtime=rt).exit_code == 0
    r = wbx("run", "trap", runtime=rt, input=b"")
    assert r.exit_code == 70 and "internal" in r.stderr


def test_sha256_mismatch_is_126(rt, wbx):
    """docs/signing.md: a #+SHA256 mismatch is capability-denied (126), never internal."""
    r = wbx("toolkit", "build", "pinned", runtime=rt)
    assert r.exit_code == 126, r.stderr
    assert ("wbx: capability-denied: pinned: built artifact" in r.stderr
            and "does not match #+SHA256" in r.stderr)
    assert rt.registry.lookup("command", "pinned") is None


def test_audit_verify_0_and_70(rt, wbx):
    from wbcore_runtime.dispatch.audit import AuditLog

    log = AuditLog.for_home(rt.home, rt.env)
    for i in range(3):
        log.record(principal="t/k", cap="kv", op="get", args_digest=f"{i:064x}", outcome="allowed")
    assert wbx("audit", "--verify", runtime=rt).exit_code == 0
    path = log.dir / "audit.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[2]]) + "\n")  # one decision deleted
    r = wbx("audit", "--verify", runtime=rt)
    assert r.exit_code == 70 and "audit chain broken" in r.stderr
